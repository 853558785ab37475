"""Lamorel's README snippets through llmgym.compat.lamorel (only the import changed), with a tiny GPT-2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from llmgym.compat.lamorel import (
    BaseModelInitializer,
    BaseModuleFunction,
    BaseUpdater,
    Caller,
    lamorel_init,
    load_lamorel_config,
)
from llmgym.errors import ConfigError
from llmgym.testing import save_tiny_model

CONFIG = """
lamorel_args:
  log_level: info
  allow_subgraph_use_whith_gradient: false
  distributed_setup_args:
    n_rl_processes: 1
    n_llm_processes: 1
  accelerate_args:
    config_file: accelerate/default_config.yaml
    machine_rank: 0
    num_machines: 1
  llm_args:
    model_type: causal
    model_path: {model_path}
    pretrained: true
    minibatch_size: 4
    pre_encode_inputs: true
    load_in_4bit: false
    parallelism:
      use_gpu: false
      model_parallelism_size: 1
      synchronize_gpus_after_scoring: false
      empty_cuda_cache_after_scoring: false
  updater_args: {{}}
rl_script_args:
  path: ???
"""


@pytest.fixture(scope="module")
def config_args(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a DictConfig
    root = tmp_path_factory.mktemp("lamorel")
    model = save_tiny_model(root / "gpt2", "gpt2")
    path = root / "config.yaml"
    path.write_text(CONFIG.format(model_path=model))
    return load_lamorel_config(path)


# ---- Lamorel README: "Custom modules" (verbatim) -------------------------------------------
class TwoLayersMLPModuleFn(BaseModuleFunction):
    def __init__(self, model_type, n_outputs):
        super().__init__()
        self._model_type = model_type
        self._n_outputs = n_outputs

    def initialize(self):
        llm_hidden_size = self.llm_config.to_dict()[self.llm_config.attribute_map['hidden_size']]
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(llm_hidden_size, 128),
            torch.nn.Linear(128, 128),
            torch.nn.Linear(128, self._n_outputs),
        ).to(self.device)

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        if self._model_type == "causal":
            model_head = forward_outputs['hidden_states'][0][0, len(tokenized_contexts["input_ids"])-1, :]
        else:
            model_head = forward_outputs['encoder_last_hidden_state'][0, len(tokenized_contexts["input_ids"]) - 1, :]
        output = self.mlp(model_head)
        return output


# ---- Lamorel README: "Updaters" (verbatim) ---------------------------------------------------
class TestUpdater(BaseUpdater):
    __test__ = False  # not a pytest class

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):
        if not hasattr(self, 'loss_fn'):
            self.loss_fn = torch.nn.CrossEntropyLoss()
        if not hasattr(self, 'optimizer'):
            self.optimizer = torch.optim.Adam(self._llm_module.module._module_functions["mlp_head"].parameters())
        output = self._llm_module(['mlp_head'], contexts=contexts, require_grad=True)
        stacked_output = torch.stack([_o["mlp_head"] for _o in output]).to('cpu')
        loss = self.loss_fn(stacked_output, kwargs["labels"][_current_batch_ids, :])
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return {"loss": loss}


# ---- Lamorel's PPO_finetuning heads (verbatim) -----------------------------------------------
class ValueHeadModuleFn(BaseModuleFunction):
    def __init__(self, model_type):
        super().__init__()
        self._model_type = model_type

    def initialize(self):
        llm_hidden_size = self.llm_config.to_dict()[self.llm_config.attribute_map['hidden_size']]
        self.value_head_op = torch.nn.Sequential(
            torch.nn.Linear(llm_hidden_size, 1024), torch.nn.Sigmoid(), torch.nn.Linear(1024, 1),
        ).to(self.device)

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        if self._model_type == "causal":
            model_head = forward_outputs['hidden_states'][-1][:, len(tokenized_contexts["input_ids"]) - 1, :]
        else:
            model_head = forward_outputs["decoder_hidden_states"][-1][:, 0, :]
        value = self.value_head_op(model_head.to(torch.float32).to(self.device))
        return value.cpu()


class LogScoringModuleFn(BaseModuleFunction):
    def __init__(self, model_type):
        super().__init__()
        self._model_type = model_type
        self._pad_token = 0

    def initialize(self):
        pass

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        logits = forward_outputs["logits"][:, len(tokenized_contexts["input_ids"]) - 1:-1, :]
        output_tokens = minibatch["input_ids"][:, len(tokenized_contexts["input_ids"]):]
        tokens_logprobs = torch.gather(logits.log_softmax(-1), 2, output_tokens[:, :, None]).squeeze(-1)
        mask = output_tokens == self._pad_token
        return tokens_logprobs.masked_fill(mask, 0.0).sum(-1).cpu()


def test_readme_instantiation_scoring_generation(config_args) -> None:
    lamorel_init()
    lm_server = Caller(config_args.lamorel_args)
    scores = lm_server.score(contexts=["This is an examples prompt, continue it with"],
                             candidates=[["a sentence", "another sentence"]])
    assert len(scores) == 1 and scores[0].shape == (2,) and bool((scores[0] < 0).all())
    gens = lm_server.generate(contexts=["This is an examples prompt, continue it with"])
    assert isinstance(gens[0][0]["text"], str) and float(gens[0][0]["text_probability"]) <= 1.0
    gens = lm_server.generate(contexts=["This is an examples prompt, continue it with"], temperature=0.1, max_length=45, do_sample=True)  # 25 in the README: the tiny tokenizer is finer
    assert len(gens[0][0]["tokens"]) >= 1
    lm_server.close()


def test_readme_custom_modules_and_updater(config_args) -> None:
    lm_server = Caller(config_args.lamorel_args,
                       custom_module_functions={
                           'mlp_head': TwoLayersMLPModuleFn(config_args.lamorel_args.llm_args.model_type, 2)
                       },
                       custom_updater=TestUpdater())
    direct = lm_server.custom_module_fns(module_function_keys=['mlp_head'],
                                         contexts=["This is an examples prompt, continue it with"])
    assert direct[0]["mlp_head"].shape == (2,)
    # The README passes a flat candidate list for its single context: accepted as that context's list.
    both = lm_server.score(additional_module_function_keys=['mlp_head'],
                           contexts=["This is an examples prompt, continue it with"],
                           candidates=["a sentence", "another sentence"])
    assert set(both[0]) == {"__score", "mlp_head"} and both[0]["__score"].shape == (2,)
    # The README's labels are 1-D, which its own `labels[_current_batch_ids, :]` cannot index: one row per context here.
    before = [p.detach().clone() for p in lm_server.llm.model.parameters()]
    losses = []
    for _ in range(3):
        result = lm_server.update(
            contexts=["This is an examples prompt, continue it with"],
            candidates=["a sentence"],
            labels=torch.tensor([[0, 1]], dtype=torch.float32),
        )
        losses += [r["loss"].item() for r in result]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert all(torch.equal(a, b) for a, b in zip(before, lm_server.llm.model.parameters())), "only the head trains"
    lm_server.close()


def test_ppo_finetuning_heads_match_llmgym_scores(config_args) -> None:
    lm_server = Caller(config_args.lamorel_args, custom_module_functions={
        'score': LogScoringModuleFn("causal"), 'value': ValueHeadModuleFn("causal")})
    actions = [" turn left", " turn right", " go forward"]  # Lamorel tokenizes candidates alone: keep the space
    prompt = "Goal of the agent: go to the red ball. Observation: you see a wall. Next action:"
    output = lm_server.custom_module_fns(['score', 'value'], contexts=[prompt], candidates=[actions], minibatch_size=2)[0]
    assert output["score"].shape == (3,) and output["value"].shape == (3, 1)
    reference = lm_server.score(contexts=[prompt], candidates=[actions])[0]
    assert torch.allclose(output["score"], reference, atol=1e-4)
    value = lm_server.custom_module_fns(module_function_keys=['value'], contexts=[prompt], candidates=[actions[0]], minibatch_size=1)[0]["value"][0]
    assert value.shape == (1,)
    lm_server.close()


def test_model_initializer_and_plain_dict_config(config_args) -> None:
    class Freeze(BaseModelInitializer):
        def initialize_model(self, model):
            for param in model._modules['_LLM_model'].parameters():
                param.requires_grad = False

    plain = OmegaConf.to_container(config_args.lamorel_args)
    lm_server = Caller(plain, custom_model_initializer=Freeze())
    assert not any(p.requires_grad for p in lm_server.llm.model.parameters())
    with pytest.raises(ConfigError, match="custom_updater"):
        lm_server.update(["a"], [["b"]])
    lm_server.close()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"llm_args": {"model_typo": "causal"}}, r"lamorel_args\.llm_args\.model_typo is not supported"),
        ({"distributed_setup_args": {"n_llm_processes": 2}}, r"n_llm_processes=2 is not supported"),
        ({"accelerate_args": {"num_machines": 2}}, r"num_machines=2"),
        ({"llm_args": {"parallelism": {"model_parallelism_size": 2}}}, r"model_parallelism_size=2"),
        ({"llm_args": {"model_type": "encoder"}}, r"model_type='encoder' must be 'causal' or 'seq2seq'"),
        ({"llm_args": {"model_type": "seq2seq"}}, r"model_type='seq2seq' but .* is a causal model"),
        ({"llm_args": {"minibatch_size": 0}}, r"minibatch_size=0 must be a positive integer"),
        ({"log_level": "loud"}, r"log_level='loud'"),
        ({"vllm_args": {}}, r"lamorel_args\.vllm_args is not supported"),
    ],
)
def test_unsupported_keys_raise_config_error(config_args, override: dict, message: str) -> None:
    merged = OmegaConf.merge(config_args.lamorel_args, OmegaConf.create(override)) if "vllm_args" not in override else None
    config = merged if merged is not None else {**OmegaConf.to_container(config_args.lamorel_args), **override}
    with pytest.raises(ConfigError, match=message):
        Caller(config)


def test_load_lamorel_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_lamorel_config(tmp_path / "missing.yaml")
    path = tmp_path / "c.yaml"
    path.write_text("lamorel_args:\n  llm_args:\n    model_type: causal\n")
    with pytest.raises(ConfigError, match="model_path is missing"):
        load_lamorel_config(path)
    path.write_text("lamorel_args: {}\nextra: 1\n")
    with pytest.raises(ConfigError, match="'extra' is not supported"):
        load_lamorel_config(path)
