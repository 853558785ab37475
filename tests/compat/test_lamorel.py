"""Lamorel's README snippets, example heads and tests through llmgym.compat.lamorel (only the import changed).

The module functions and updaters below are Lamorel's (https://github.com/flowersteam/lamorel, MIT
licence) as of its 2023-11 decoder-only rework, verbatim; tiny offline models replace OPT-125m.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
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
from llmgym.compat.lamorel_config import parse_lamorel_args
from llmgym.config import DistributedConfig
from llmgym.errors import ConfigError
from llmgym.testing import save_tiny_model, tiny_causal_lm

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


def _caller(
    config_args, pre_encode_inputs: bool, model_path=None, model_type="causal", minibatch_size=None, **kwargs
):
    """A Caller on the module's config with ``llm_args`` overridden."""
    override = {"pre_encode_inputs": pre_encode_inputs, "model_type": model_type}
    if model_path is not None:
        override["model_path"] = str(model_path)
    if minibatch_size is not None:
        override["minibatch_size"] = minibatch_size
    merged = OmegaConf.merge(config_args.lamorel_args, OmegaConf.create({"llm_args": override}))
    return Caller(merged, **kwargs)


# ---- Lamorel README: "Custom modules" (verbatim) -------------------------------------------
class TwoLayersMLPModuleFn(BaseModuleFunction):
    def __init__(self, model_type, n_outputs, pre_encoded_input):
        super().__init__()
        self._model_type = model_type
        self._n_outputs = n_outputs
        self._pre_encoded_input = pre_encoded_input

    def initialize(self):
        """
        Use this method to initialize your module operations.
        - self.llm_config gives the configuration of the LLM (e.g. useful to know the size of representations)
        - self.device gives you access to the main device (e.g. GPU) the LLM is using
        """
        if "hidden_size" in self.llm_config.attribute_map:
            _hidden_size_key = self.llm_config.attribute_map["hidden_size"]
        else:
            if "word_embed_proj_dim" in self.llm_config.to_dict():
                _hidden_size_key = "word_embed_proj_dim"
            elif "hidden_size" in self.llm_config.to_dict():
                _hidden_size_key = "hidden_size"
            else:
                print(self.llm_config.to_dict())
                raise NotImplementedError("Unknown hidden size key")
        llm_hidden_size = self.llm_config.to_dict()[_hidden_size_key]
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(llm_hidden_size, 128),
            torch.nn.Linear(128, 128),
            torch.nn.Linear(128, self._n_outputs),
        ).to(self.device)

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        """
        Perform your operations here.
        - forward_outputs gives access the output of the computations performed by the LLM (e.g. representations of each layer)
        - minibatch gives access to the input data (i.e. a prompt and multiple candidates) given to the LLM
        - tokenized_context gives access to the prompt used
        """
        # Get last layer's hidden from last token in context
        if self._model_type == "causal":
            if self._pre_encoded_input:
                end_of_context_position = 0
            else:  # hence input should be removed from result
                end_of_context_position = len(
                    tokenized_contexts[0]["input_ids"]
                )  # inputs are padded so all of same size

            model_head = forward_outputs["hidden_states"][-1][:, end_of_context_position, :]
        else:
            model_head = forward_outputs["decoder_hidden_states"][-1][:, 0, :]

        # Give representation to our MLP
        output = self.mlp(model_head)
        return output


# ---- Lamorel README: "Updaters" (verbatim but for the commented-out alternatives) ----------------
class TestUpdater(BaseUpdater):
    __test__ = False  # not a pytest class

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):
        if not hasattr(self, "loss_fn"):
            self.loss_fn = torch.nn.CrossEntropyLoss()
        if not hasattr(self, "optimizer"):
            # 2. Only some custom modules
            self.optimizer = torch.optim.Adam(
                self._llm_module.module._module_functions["mlp_head"].parameters()
            )

        # 2. Only some custom modules
        output = self._llm_module(["mlp_head"], contexts=contexts, require_grad=True)

        # Stack outputs to batch loss computation
        stacked_output = torch.stack([_o["mlp_head"] for _o in output]).to("cpu")

        # Compute loss with the labels corresponding to the current batch
        loss = self.loss_fn(stacked_output, kwargs["labels"][_current_batch_ids, :])

        # Compute gradients and update graph
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return {"loss": loss}


# ---- Lamorel examples/PPO_finetuning/main.py: the two module functions (verbatim) ----------------
class LogScoringModuleFn(BaseModuleFunction):
    def __init__(self, model_type, pre_encoded_input):
        super().__init__()
        self._model_type = model_type
        self._pad_token = 0
        self._pre_encoded_input = pre_encoded_input

    def initialize(self):
        pass

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        if self._model_type == "causal":
            if self._pre_encoded_input:
                end_of_context_position = 0
            else:  # hence input should be removed from result
                end_of_context_position = len(
                    tokenized_contexts[0]["input_ids"]
                )  # inputs are padded so all of same size

            logits = forward_outputs["logits"][:, end_of_context_position:-1, :]
            output_tokens = minibatch["input_ids"][:, end_of_context_position + 1 :]
        else:
            logits = forward_outputs["logits"][:, :-1, :]  # skip </s> token appended by tokenizer
            output_tokens = minibatch["decoder_input_ids"][:, 1:]  # skip pad token

        logprobs = torch.log_softmax(logits, dim=-1)  # convert logits to log-probabilities
        tokens_logprobs = (
            torch.gather(logprobs, 2, output_tokens[:, :, None]).squeeze(-1).to(torch.float32)
        )  # filter with sequence tokens

        # Compute mask to assign log-probability 0 to padding tokens
        mask = torch.ones(tokens_logprobs.shape, dtype=torch.bool, device=self.device)
        for i, _output in enumerate(output_tokens):
            for j, _token in enumerate(_output):
                if _token != self._pad_token:
                    mask[i, j] = False
        masked_token_logprobs = tokens_logprobs.masked_fill(mask, 0.0)  # apply mask
        minibatch_logprobs = masked_token_logprobs.sum(-1)  # compute final sequences' log-probabilities

        return minibatch_logprobs.cpu()


class ValueHeadModuleFn(BaseModuleFunction):
    def __init__(self, model_type, pre_encoded_input):
        super().__init__()
        self._model_type = model_type
        self._pre_encoded_input = pre_encoded_input

    def initialize(self):
        if "hidden_size" in self.llm_config.attribute_map:
            _hidden_size_key = self.llm_config.attribute_map["hidden_size"]
        else:
            if "word_embed_proj_dim" in self.llm_config.to_dict():
                _hidden_size_key = "word_embed_proj_dim"
            elif "hidden_size" in self.llm_config.to_dict():
                _hidden_size_key = "hidden_size"
            else:
                print(self.llm_config.to_dict())
                raise NotImplementedError("Unknown hidden size key")

        self._llm_hidden_size = self.llm_config.to_dict()[_hidden_size_key]
        self.value_head_op = torch.nn.Sequential(
            torch.nn.Linear(self._llm_hidden_size, 1024),
            torch.nn.Sigmoid(),
            torch.nn.Linear(1024, 1024),
            torch.nn.Sigmoid(),
            torch.nn.Linear(1024, 1),
        ).to(self.device)

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        # Get last layer's hidden from last token in context
        if self._model_type == "causal":
            if self._pre_encoded_input:
                end_of_context_position = 0
            else:  # hence input should be removed from result
                end_of_context_position = len(
                    tokenized_contexts[0]["input_ids"]
                )  # inputs are padded so all of same size

            model_head = forward_outputs["hidden_states"][-1][:, end_of_context_position, :]
        else:
            model_head = forward_outputs["decoder_hidden_states"][-1][:, 0, :]

        value = self.value_head_op(model_head.to(torch.float32).to(self.device))
        return value.cpu()


# ---- Lamorel tests/causal_lms/causal_lm_training.py: head and updater (verbatim) -----------------
class SigmoidOutputModuleFn(BaseModuleFunction):
    def __init__(self, model_type):
        super().__init__()
        self._model_type = model_type

    def initialize(self):
        if "hidden_size" in self.llm_config.attribute_map:
            _hidden_size_key = self.llm_config.attribute_map["hidden_size"]
        else:
            if "word_embed_proj_dim" in self.llm_config.to_dict():
                _hidden_size_key = "word_embed_proj_dim"
            elif "hidden_size" in self.llm_config.to_dict():
                _hidden_size_key = "hidden_size"
            else:
                print(self.llm_config.to_dict())
                raise NotImplementedError("Unknown hidden size key")

        self._llm_hidden_size = self.llm_config.to_dict()[_hidden_size_key]
        if "num_hidden_layers" in self.llm_config.attribute_map:
            hidden_layers_config_key = self.llm_config.attribute_map["num_hidden_layers"]
        else:
            hidden_layers_config_key = "num_hidden_layers"
        self._last_hidden_layer = self.llm_config.to_dict()[hidden_layers_config_key] - 1

        self.head_op = torch.nn.Sequential(
            torch.nn.Linear(self._llm_hidden_size, 64),
            torch.nn.Sigmoid(),
            torch.nn.Linear(64, 1),
            torch.nn.Sigmoid(),
        ).to(self.device)

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        # Get last layer's hidden from last token in context
        if self._model_type == "causal":
            model_head = forward_outputs["hidden_states"][self._last_hidden_layer][:, -1, :]  # WTF ???
        else:
            model_head = forward_outputs["decoder_hidden_states"][self._last_hidden_layer + 1][:, 0, :]

        output = self.head_op(model_head.to(torch.float32).to(self.device))
        return output.cpu()


class BCEUpdater(BaseUpdater):
    def __init__(
        self,
        model_type,
        minibatch_size,
        gradient_batch_size,
        gradient_minibatch_size=None,
        use_all_params_for_optim=True,
    ):
        super(BCEUpdater, self).__init__()  # noqa: UP008 - verbatim
        self._model_type = model_type
        self._minibatch_size = minibatch_size
        self._gradient_batch_size = gradient_batch_size
        self._gradient_minibatch_size = gradient_minibatch_size
        self._use_all_params_for_optim = use_all_params_for_optim

    def get_trainable_params(self, model, return_with_names=False):
        if return_with_names:
            return ((n, p) for n, p in model.named_parameters() if p.requires_grad)
        else:
            return (p for p in model.parameters() if p.requires_grad)

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):
        if not hasattr(self, "loss_fn"):
            self.loss_fn = torch.nn.BCELoss()

        if not hasattr(self, "optimizer"):
            if self._use_all_params_for_optim:
                # iterator_trainable_params = self._llm_module.parameters()
                for param in self._llm_module.module._LLM_model.parameters():
                    param.requires_grad = False
                iterator_trainable_params = self._llm_module.module._module_functions[
                    "sigmoid_output"
                ].parameters()
            else:
                iterator_trainable_params = self.get_trainable_params(self._llm_module, False)

            self.optimizer = torch.optim.Adam(iterator_trainable_params, lr=5e-3)

        current_process_buffer = {}
        for k in ["labels"]:
            current_process_buffer[k] = kwargs[k][_current_batch_ids]

        losses = []
        n_minibatches = math.ceil(len(contexts) / self._minibatch_size)
        for step in range(n_minibatches):
            _minibatch_start_idx = step * self._minibatch_size
            _minibatch_end_idx = min((step + 1) * self._minibatch_size, len(contexts))

            self.optimizer.zero_grad()
            gradient_accumulation_steps = math.ceil(
                _minibatch_end_idx - _minibatch_start_idx / self._gradient_batch_size
            )
            for accumulated_batch in range(gradient_accumulation_steps):
                _start_idx = _minibatch_start_idx + accumulated_batch * self._gradient_batch_size
                _stop_idx = _minibatch_start_idx + min(
                    (accumulated_batch + 1) * self._gradient_batch_size, _minibatch_end_idx
                )
                _contexts = contexts[_start_idx:_stop_idx]
                _labels = current_process_buffer["labels"][_start_idx:_stop_idx]
                if len(_contexts) == 0:
                    break  # noqa: E701 - verbatim
                if self._gradient_minibatch_size is None:
                    _batch_size = self._gradient_batch_size
                else:
                    _batch_size = self._gradient_minibatch_size

                output = self._llm_module(
                    ["sigmoid_output"], contexts=_contexts, require_grad=True, minibatch_size=_batch_size
                )
                predicted = torch.stack([_o["sigmoid_output"][0] for _o in output])
                loss = self.loss_fn(predicted, _labels) / gradient_accumulation_steps
                losses.append(loss.detach().cpu().item())
                loss.backward()

            self.optimizer.step()

        return {"loss": np.mean(losses)}


PRE_ENCODE = pytest.mark.parametrize(
    "pre_encode_inputs", [True, False], ids=["pre_encoded", "not_pre_encoded"]
)
CONTEXTS = [
    "Goal of the agent: go to the red ball. Observation: you see a wall. Next action:",
    "You see a wall. Action:",
    "Hi:",
]
CANDIDATES = [
    [" turn left", " turn right", " go forward"],
    [" drop", " toggle the yellow door"],
    [" pick up"],
]


def test_readme_instantiation_scoring_generation(config_args) -> None:
    lamorel_init()
    lm_server = Caller(config_args.lamorel_args)
    scores = lm_server.score(
        contexts=["This is an examples prompt, continue it with"],
        candidates=[["a sentence", "another sentence"]],
    )
    assert len(scores) == 1 and scores[0].shape == (2,) and bool((scores[0] < 0).all())
    gens = lm_server.generate(contexts=["This is an examples prompt, continue it with"])
    assert isinstance(gens[0][0]["text"], str) and float(gens[0][0]["text_probability"]) <= 1.0
    gens = lm_server.generate(
        contexts=["This is an examples prompt, continue it with"],
        temperature=0.1,
        max_length=45,
        do_sample=True,
    )  # 25 in the README: the tiny tokenizer is finer
    assert len(gens[0][0]["tokens"]) >= 1
    lm_server.close()


@PRE_ENCODE
def test_readme_custom_modules_and_updater(config_args, pre_encode_inputs: bool) -> None:
    lm_server = _caller(
        config_args,
        pre_encode_inputs,
        custom_module_functions={
            "mlp_head": TwoLayersMLPModuleFn(
                config_args.lamorel_args.llm_args.model_type, 2, pre_encode_inputs
            )
        },
        custom_updater=TestUpdater(),
    )
    direct = lm_server.custom_module_fns(
        module_function_keys=["mlp_head"], contexts=["This is an examples prompt, continue it with"]
    )
    assert direct[0]["mlp_head"].shape == (1, 2)  # one row: the empty candidate
    # The README passes a flat candidate list for its single context: accepted as that context's list.
    both = lm_server.score(
        additional_module_function_keys=["mlp_head"],
        contexts=["This is an examples prompt, continue it with"],
        candidates=["a sentence", "another sentence"],
    )
    assert (
        set(both[0]) == {"__score", "mlp_head"}
        and both[0]["__score"].shape == (2,)
        and both[0]["mlp_head"].shape == (2, 2)
    )
    # The README's 1-D labels cannot be indexed by its own `labels[_current_batch_ids, :]`; labels shaped like its
    # stacked output ([contexts, rows, 2]) make CrossEntropyLoss's class dimension the single row: the loss is 0.
    result = lm_server.update(
        contexts=["This is an examples prompt, continue it with"],
        candidates=["a sentence"],
        labels=torch.tensor([[[0.0, 1.0]]]),
    )
    assert len(result) == 1 and float(result[0]["loss"].detach()) == pytest.approx(0.0)
    lm_server.close()


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lamorel_models")
    return {kind: save_tiny_model(root / kind, kind) for kind in ("gpt2", "llama", "t5")}


@PRE_ENCODE
@pytest.mark.parametrize("kind", ["gpt2", "llama", "t5"])
def test_scoring_module_from_logits_matches_score(
    config_args, model_paths, kind: str, pre_encode_inputs: bool
) -> None:
    model_type = "seq2seq" if kind == "t5" else "causal"
    lm_server = _caller(
        config_args,
        pre_encode_inputs,
        model_paths[kind],
        model_type,
        minibatch_size=2,
        custom_module_functions={"score": LogScoringModuleFn(model_type, pre_encode_inputs)},
    )
    output = lm_server.custom_module_fns(["score"], contexts=CONTEXTS, candidates=CANDIDATES)
    reference = lm_server.score(contexts=CONTEXTS, candidates=CANDIDATES)
    native = lm_server.llm.score(CONTEXTS, CANDIDATES)
    for out, ref, nat, cands in zip(output, reference, native, CANDIDATES):
        assert out["score"].shape == (len(cands),)
        assert torch.allclose(out["score"], ref, atol=1e-4) and torch.allclose(ref, nat, atol=1e-6)
    lm_server.close()


def _last_context_hidden(llm, context: str) -> torch.Tensor:
    ids = llm.tokenizer(context, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return llm.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_value_head_reads_the_last_context_token_in_both_modes(config_args, model_paths, kind: str) -> None:
    values = {}
    for pre in (True, False):
        torch.manual_seed(0)  # the same head weights in both servers
        lm_server = _caller(
            config_args,
            pre,
            model_paths[kind],
            minibatch_size=2,
            custom_module_functions={"value": ValueHeadModuleFn("causal", pre)},
        )
        values[pre] = lm_server.custom_module_fns(["value"], contexts=CONTEXTS, candidates=CANDIDATES)
        head = lm_server._llm_module.module._module_functions["value"]
        with torch.no_grad():
            expected = [head.value_head_op(_last_context_hidden(lm_server.llm, c)) for c in CONTEXTS]
        for out, exp, cands in zip(values[pre], expected, CANDIDATES):
            assert out["value"].shape == (len(cands), 1)
            assert torch.allclose(out["value"], exp.expand(len(cands), 1), atol=1e-5)
        lm_server.close()


class Recorder(BaseModuleFunction):
    """Keeps what each call receives; returns one zero per row."""

    def initialize(self):
        self.calls = []

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):
        self.calls.append((forward_outputs, minibatch, tokenized_contexts))
        return torch.zeros(minibatch["input_ids"].shape[0])


@PRE_ENCODE
def test_rows_minibatch_and_tokenized_contexts_are_lamorels(
    config_args, model_paths, pre_encode_inputs: bool
) -> None:
    recorder = Recorder()
    lm_server = _caller(
        config_args,
        pre_encode_inputs,
        model_paths["llama"],
        minibatch_size=2,
        custom_module_functions={"rec": recorder},
    )
    out = lm_server.custom_module_fns(
        ["rec"], contexts=CONTEXTS[1:], candidates=[[" drop", " toggle the yellow door"], [" yes"]]
    )
    assert [o["rec"].shape for o in out] == [(2,), (1,)]
    tok = lm_server.llm.tokenizer
    ctx = [tok(c, add_special_tokens=False)["input_ids"] for c in CONTEXTS[1:]]
    cands = [
        tok(c, add_special_tokens=False)["input_ids"] for c in (" drop", " toggle the yellow door", " yes")
    ]
    owners = [0, 0, 1]
    width = max(len(c) for c in ctx) - 1
    heads = [
        [0] * (width - len(ctx[o]) + 1) + ctx[o][:-1] for o in owners
    ]  # left-padded context less its last token
    tails = [[ctx[o][-1]] + c for o, c in zip(owners, cands)]  # last context token, then the candidate
    assert [len(call[2]) for call in recorder.calls] == [2, 1]  # minibatches of 2 rows across contexts
    for step, (forward_outputs, minibatch, tokenized_contexts) in enumerate(recorder.calls):
        rows = range(2 * step, min(2 * step + 2, 3))
        tail_width = max(len(tails[r]) for r in rows)
        padded_tails = [tails[r] + [0] * (tail_width - len(tails[r])) for r in rows]
        assert tokenized_contexts == [
            {"input_ids": heads[r], "attention_mask": [int(t != 0) for t in heads[r]]} for r in rows
        ]
        expected_ids = (
            padded_tails if pre_encode_inputs else [heads[r] + t for r, t in zip(rows, padded_tails)]
        )
        assert minibatch["input_ids"].tolist() == expected_ids
        masks = [
            [int(t != 0) for t in heads[r]] + [1] * len(tails[r]) + [0] * (tail_width - len(tails[r]))
            for r in rows
        ]
        assert minibatch["attention_mask"].tolist() == masks
        assert set(minibatch) == {"input_ids", "attention_mask", "output_hidden_states"} | (
            {"past_key_values"} if pre_encode_inputs else set()
        )
        assert forward_outputs["logits"].shape[:2] == minibatch["input_ids"].shape
        assert forward_outputs["hidden_states"][-1].shape[:2] == minibatch["input_ids"].shape
        if pre_encode_inputs:
            keys, values = minibatch["past_key_values"][0]
            assert (
                len(minibatch["past_key_values"]) == 2
                and keys.shape[0] == len(rows)
                and keys.shape[2] == width
            )
    lm_server.close()


@pytest.fixture(scope="module")
def feature_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama whose hidden states have a pre-trained model's scale (embeddings x50), for head training."""
    model, tokenizer = tiny_causal_lm("llama")
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(50.0)
    path = tmp_path_factory.mktemp("lamorel_features") / "llama"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@PRE_ENCODE
def test_causal_lm_training_test(config_args, feature_model_path, pre_encode_inputs: bool) -> None:
    """Lamorel's tests/causal_lms/causal_lm_training.py: 100 BCE updates of a head on the last token."""
    # changed: "true"/"false" -> "dog"/"cat", single tokens of the tiny tokenizer (it splits true and false
    # into pieces ending alike, and the random tiny model barely mixes earlier tokens into the last one)
    train_dataset = {
        "x": [
            "This sentence is dog",
            "This is just dog",
            "Yet another dog",
            "A sentence that is dog",
            "This sentence is cat",
            "This is just cat",
            "Yet another cat",
            "Don't focus on cat",
        ],
        "y": [[1], [1], [1], [1], [0], [0], [0], [0]],
    }
    test_dataset = {
        "x": [
            "What about this dog",
            "Or a dog like this",
            "And another cat",
            "Here is a sentence that is cat",
        ],
        "y": [1, 1, 0, 0],
    }
    lm_server = _caller(
        config_args,
        pre_encode_inputs,
        feature_model_path,
        custom_updater=BCEUpdater("causal", 4, 2, None, True),
        custom_module_functions={"sigmoid_output": SigmoidOutputModuleFn("causal")},
    )
    for _ in range(100):
        lm_server.update(
            contexts=train_dataset["x"],
            candidates=None,
            labels=torch.tensor(train_dataset["y"], dtype=torch.float32),
        )
    tests = lm_server.custom_module_fns(module_function_keys=["sigmoid_output"], contexts=test_dataset["x"])
    # changed: decimal=2 with OPT-125m; "Or a dog like this" ends in "this", which the tiny model scores 0.9
    np.testing.assert_array_almost_equal(
        [_r["sigmoid_output"].item() for _r in tests], test_dataset["y"], decimal=1
    )
    lm_server.close()


@PRE_ENCODE
def test_gradients_reach_the_llm_through_the_rows(config_args, model_paths, pre_encode_inputs: bool) -> None:
    lm_server = _caller(
        config_args,
        pre_encode_inputs,
        model_paths["gpt2"],
        minibatch_size=2,
        custom_module_functions={"score": LogScoringModuleFn("causal", pre_encode_inputs)},
    )
    output = lm_server._llm_module(["score"], contexts=CONTEXTS, candidates=CANDIDATES, require_grad=True)
    torch.cat([o["score"] for o in output]).sum().backward()
    embeddings = lm_server.llm.model.get_input_embeddings().weight
    context_only = lm_server.llm.tokenizer("Goal", add_special_tokens=False)["input_ids"][0]
    assert embeddings.grad is not None and bool(embeddings.grad[context_only].abs().sum() > 0)
    lm_server.close()


def test_model_initializer_and_plain_dict_config(config_args) -> None:
    class Freeze(BaseModelInitializer):
        def initialize_model(self, model):
            for param in model._modules["_LLM_model"].parameters():
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
        ({"distributed_setup_args": {"n_rl_processes": 2}}, r"n_rl_processes=2 is not supported"),
        ({"accelerate_args": {"machine_rank": 1}}, r"machine_rank=1: .* `ray start --address"),
        ({"llm_args": {"model_type": "encoder"}}, r"model_type='encoder' must be 'causal' or 'seq2seq'"),
        ({"llm_args": {"model_type": "seq2seq"}}, r"model_type='seq2seq' but .* is a causal model"),
        ({"llm_args": {"minibatch_size": 0}}, r"minibatch_size=0 must be a positive integer"),
        ({"log_level": "loud"}, r"log_level='loud'"),
        ({"vllm_args": {}}, r"lamorel_args\.vllm_args is not supported"),
    ],
)
def test_unsupported_keys_raise_config_error(config_args, override: dict, message: str) -> None:
    merged = (
        OmegaConf.merge(config_args.lamorel_args, OmegaConf.create(override))
        if "vllm_args" not in override
        else None
    )
    config = (
        merged if merged is not None else {**OmegaConf.to_container(config_args.lamorel_args), **override}
    )
    with pytest.raises(ConfigError, match=message):
        Caller(config)


def test_several_servers_and_machines_map_onto_ray_servers(config_args) -> None:
    settings = parse_lamorel_args(config_args.lamorel_args)
    assert settings.distributed is None  # one server on one machine: the LLM runs in the RL process
    more = OmegaConf.merge(
        config_args.lamorel_args,
        OmegaConf.create(
            {
                "gloo_timeout": 120,
                "allow_subgraph_use_whith_gradient": True,
                "distributed_setup_args": {"n_llm_processes": 4},
                "accelerate_args": {"num_machines": 2, "machine_rank": 0},
                "llm_args": {"parallelism": {"use_gpu": False, "model_parallelism_size": 2}},
            }
        ),
    )
    settings = parse_lamorel_args(more)
    assert settings.distributed == DistributedConfig(
        llm_processes=4, model_parallelism_size=2, gpus_per_server=0.0, ray_address="auto", timeout_s=120.0
    )
    assert settings.find_unused_parameters


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
