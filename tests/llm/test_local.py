"""LocalLLM / LLM: module functions, updaters, LoRA, reference, save/load, validation."""

from __future__ import annotations

import pytest
import torch

from llmgym.config import LoRAConfig, ModelConfig
from llmgym.errors import BackendError, CheckpointError, ConfigError, InputError
from llmgym.llm.client import LLM
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import LogitsHead, ValueHead
from llmgym.llm.updater import Updater
from llmgym.testing import tiny_causal_lm

CONTEXTS = ["You see a red ball. Action:", "You see a wall. Action:", "Goal: go to the key. Action:"]
CANDIDATES = [[" go forward", " turn left"], [" toggle"], [" pick up", " drop", " turn right"]]


def _llm(lora: bool = False, **kwargs):
    model, tok = tiny_causal_lm("llama", seed=1)
    config = ModelConfig(name="tiny", lora=LoRAConfig(r=4, alpha=8) if lora else None)
    return LLM(config, model=model, tokenizer=tok, **kwargs)


def test_forward_runs_heads_with_scores_in_one_pass(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(
        ModelConfig(name="tiny"), {"value": ValueHead(), "logits": LogitsHead(3)}, model=model, tokenizer=tok
    )
    out = llm.forward(["score", "value", "logits"], CONTEXTS, CANDIDATES)
    scores = llm.score(CONTEXTS, CANDIDATES)
    for o, s in zip(out, scores):
        assert torch.allclose(o["score"], s, atol=1e-5)
        assert o["value"].shape == () and o["logits"].shape == (3,)
    # the value of a context does not depend on its candidates or on the batch
    alone = llm.forward(["value"], CONTEXTS[1:2])
    assert torch.allclose(alone[0]["value"], out[1]["value"], atol=1e-5)


def test_heads_are_initialised_from_the_seed(tiny_llama):
    model, tok = tiny_llama
    first = LocalLLM(ModelConfig(name="tiny", seed=3), {"value": ValueHead()}, model=model, tokenizer=tok)
    torch.manual_seed(123)
    second = LocalLLM(ModelConfig(name="tiny", seed=3), {"value": ValueHead()}, model=model, tokenizer=tok)
    other = LocalLLM(ModelConfig(name="tiny", seed=4), {"value": ValueHead()}, model=model, tokenizer=tok)
    w = [m.module_functions["value"].net[0].weight for m in (first, second, other)]
    assert torch.equal(w[0], w[1]) and not torch.equal(w[0], w[2])


def test_heads_and_model_receive_gradients():
    llm = _llm(module_functions={"value": ValueHead()})
    out = llm.backend.forward(["value", "score"], CONTEXTS, CANDIDATES, require_grad=True)
    loss = sum(o["value"] ** 2 - o["score"].sum() for o in out)
    loss.backward()
    head = llm.backend.module_functions["value"]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())
    assert llm.model.get_output_embeddings().weight.grad.abs().sum() > 0


class LabelUpdater(Updater):
    """Trains a LogitsHead to label each context (toy task)."""

    def setup(self) -> None:
        self.optimizer = torch.optim.Adam(self.llm.module_functions.parameters(), lr=3e-2)

    def perform_update(self, contexts, candidates, _current_batch_ids, labels=None, **kwargs):
        out = self.llm.forward(["label"], contexts, require_grad=True)
        logits = torch.stack([o["label"] for o in out])
        target = torch.tensor([labels[i] for i in _current_batch_ids])
        loss = torch.nn.functional.cross_entropy(logits, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.llm.sync_gradients(len(contexts))
        self.optimizer.step()
        return {"loss": loss.item()}


def test_updater_trains_a_head_on_a_toy_labelling_task():
    llm = _llm(module_functions={"label": LogitsHead(2)}, updater=LabelUpdater)
    contexts = [
        "You see a red ball",
        "You see a blue key",
        "red red red",
        "blue blue",
        "a red box",
        "the blue door",
    ]
    labels = [0, 1, 0, 1, 0, 1]
    losses = [llm.update(contexts, labels=labels)[0]["loss"] for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    predicted = [int(o["label"].argmax()) for o in llm.forward(["label"], contexts)]
    assert predicted == labels


def test_lora_trains_only_adapters_and_reference_gives_the_base_model():
    base_model, tok = tiny_causal_lm("llama", seed=1)
    base_scores = LocalLLM(ModelConfig(name="tiny"), model=base_model, tokenizer=tok).score(
        CONTEXTS, CANDIDATES
    )
    llm = _llm(lora=True, module_functions={"value": ValueHead()})
    local = llm.backend
    names = [n for n, p in llm.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert {id(p) for p in local.trainable_parameters()} >= {
        id(p) for p in local.module_functions.parameters()
    }
    with torch.no_grad():  # make the adapter do something
        for n, p in llm.model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)
    tuned = llm.score(CONTEXTS, CANDIDATES)
    with local.reference():
        reference = llm.score(CONTEXTS, CANDIDATES)
    for t, r, b in zip(tuned, reference, base_scores):
        assert torch.allclose(r, b, atol=1e-5) and not torch.allclose(t, b, atol=1e-3)


def test_lora_gpt2_all_linear_excludes_lm_head():
    model, tok = tiny_causal_lm("gpt2", seed=1)
    llm = LLM(ModelConfig(name="tiny", lora=LoRAConfig(r=2)), model=model, tokenizer=tok)
    names = [n for n, p in llm.model.named_parameters() if p.requires_grad]
    assert names and not any("lm_head" in n for n in names)
    assert llm.score(CONTEXTS[:1], CANDIDATES[:1])[0].shape == (2,)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_lora_layers_adapt_only_the_chosen_blocks_and_stop_backward_there(arch):
    model, tok = tiny_causal_lm(arch, seed=1, num_layers=3)
    llm = LLM(ModelConfig(name="tiny", lora=LoRAConfig(r=2, layers=[-1])), model=model, tokenizer=tok)
    names = [n for n, p in llm.model.named_parameters() if p.requires_grad]
    block = "layers.2." if arch == "llama" else "h.2."
    assert names and all(block in n and "lora_" in n for n in names)
    out = llm.forward(["score"], CONTEXTS[:1], CANDIDATES[:1], require_grad=True)
    out[0]["score"].sum().backward()
    assert all(p.grad is not None for n, p in llm.model.named_parameters() if p.requires_grad)


def test_lora_layers_out_of_range_is_a_config_error():
    model, tok = tiny_causal_lm("llama", seed=1, num_layers=2)
    with pytest.raises(ConfigError, match=r"model.lora.layers contains 2.*\[-2, 1\]"):
        LLM(ModelConfig(name="tiny", lora=LoRAConfig(layers=[2])), model=model, tokenizer=tok)
    with pytest.raises(ConfigError, match="selects no linear module"):
        LLM(
            ModelConfig(name="tiny", lora=LoRAConfig(layers=[0], target_modules=["nope"])),
            model=model,
            tokenizer=tok,
        )


def test_reference_needs_an_adapter(tiny_llama):
    model, tok = tiny_llama
    with (
        pytest.raises(ConfigError, match="model.reference_copy=true .* or train LoRA adapters"),
        LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok).reference(),
    ):
        pass


def test_full_fine_tuning_keeps_a_frozen_copy_of_the_initial_weights_as_reference():
    model, tok = tiny_causal_lm("llama", seed=1)
    llm = LLM(ModelConfig(name="tiny", reference_copy=True), model=model, tokenizer=tok)
    local = llm.backend
    base_scores = llm.score(CONTEXTS, CANDIDATES)
    with torch.no_grad():  # full fine-tuning moved every weight
        for p in llm.model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    tuned = llm.score(CONTEXTS, CANDIDATES)
    with local.reference():
        reference = llm.score(CONTEXTS, CANDIDATES)
    assert llm.model is model  # the trained model is back after the block
    for t, r, b in zip(tuned, reference, base_scores):
        assert torch.allclose(r, b, atol=1e-5) and not torch.allclose(t, b, atol=1e-3)
    assert not any(p.requires_grad for p in local.reference_model.parameters())
    assert {id(p) for p in local.trainable_parameters()}.isdisjoint(
        id(p) for p in local.reference_model.parameters()
    )


@pytest.mark.parametrize("lora", [True, False])
def test_save_load_round_trip(tmp_path, lora):
    llm = _llm(lora=lora, module_functions={"value": ValueHead()}, updater=LabelUpdaterForSave)
    llm.update(CONTEXTS)
    before = llm.forward(["score", "value"], CONTEXTS, CANDIDATES)
    llm.save(tmp_path / "ckpt")
    llm.save(tmp_path / "ckpt")  # overwriting is atomic too
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "manifest.json",
        "meta.json",
        "modules.safetensors",
        "updater.pt",
        "weights.safetensors",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    fresh = _llm(lora=lora, module_functions={"value": ValueHead()}, updater=LabelUpdaterForSave)
    assert not torch.allclose(fresh.forward(["value"], CONTEXTS)[0]["value"], before[0]["value"])
    fresh.load(tmp_path / "ckpt")
    after = fresh.forward(["score", "value"], CONTEXTS, CANDIDATES)
    for a, b in zip(after, before):
        assert torch.allclose(a["score"], b["score"], atol=1e-6) and torch.allclose(
            a["value"], b["value"], atol=1e-6
        )
    assert fresh.backend.updater.optimizer.state_dict()["state"]


class LabelUpdaterForSave(Updater):
    """Moves every trainable weight a little (so a save holds something non-trivial)."""

    def setup(self) -> None:
        self.optimizer = torch.optim.SGD(self.llm.trainable_parameters(), lr=0.1, momentum=0.9)

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):
        out = self.llm.forward(["value"], contexts, require_grad=True)
        loss = sum((o["value"] - 1.0) ** 2 for o in out)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}


def test_load_rejects_mismatched_checkpoints(tmp_path):
    _llm(lora=True, module_functions={"value": ValueHead()}).save(tmp_path / "a")
    with pytest.raises(CheckpointError, match="lora"):
        _llm(lora=False, module_functions={"value": ValueHead()}).load(tmp_path / "a")
    with pytest.raises(CheckpointError, match="module functions"):
        _llm(lora=True).load(tmp_path / "a")
    with pytest.raises(CheckpointError, match="meta.json"):
        _llm().load(tmp_path / "missing")


@pytest.mark.parametrize(
    ("name", "damage", "match"),
    [
        ("updater.pt", lambda p: p.unlink(), "updater.pt is missing"),
        (
            "weights.safetensors",
            lambda p: p.write_bytes(p.read_bytes()[:-8]),
            "weights.safetensors is corrupted",
        ),
        ("meta.json", lambda p: p.write_text("{"), "meta.json is corrupted"),
    ],
)
def test_load_names_a_missing_or_corrupted_file(tmp_path, name, damage, match):
    llm = _llm(lora=True, module_functions={"value": ValueHead()}, updater=LabelUpdaterForSave)
    llm.save(tmp_path / "a")
    damage(tmp_path / "a" / name)
    with pytest.raises(CheckpointError, match=match):
        llm.load(tmp_path / "a")


def test_load_into_a_differently_shaped_adapter_is_a_checkpoint_error(tmp_path):
    _llm(lora=True, module_functions={"value": ValueHead()}).save(tmp_path / "a")
    model, tok = tiny_causal_lm("llama", seed=1)  # the same base
    other = LocalLLM(
        ModelConfig(name="tiny", lora=LoRAConfig(r=2)), {"value": ValueHead()}, model=model, tokenizer=tok
    )
    with pytest.raises(CheckpointError, match="same model and model.lora settings"):
        other.load(tmp_path / "a")


def test_token_logprobs_with_value_per_token(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), {"value": ValueHead()}, model=model, tokenizer=tok)
    prompt = tok("Action:")["input_ids"]
    completion = tok(" go forward", add_special_tokens=False)["input_ids"]
    out = llm.token_logprobs(
        [prompt, prompt], [completion, completion[:1]], keys=["value"], require_grad=False
    )
    assert out[0]["logprobs"].shape == (len(completion),) and out[0]["value"].shape == (len(completion),)
    assert torch.allclose(
        out[0]["logprobs"].sum(), llm.score(["Action:"], [[" go forward"]])[0][0], atol=1e-5
    )
    assert torch.allclose(out[1]["value"], out[0]["value"][:1], atol=1e-5)
    # the value at the first completion token is the value of the prompt
    assert torch.allclose(out[0]["value"][0], llm.forward(["value"], ["Action:"])[0]["value"], atol=1e-5)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda llm: llm.score("one context", [["a"]]), "single string"),
        (lambda llm: llm.score([1], [["a"]]), r"contexts\[0\] must be a string"),
        (lambda llm: llm.score(["a", "b"], [["x"]]), "candidates has 1 entries but there are 2 contexts"),
        (lambda llm: llm.score(["a"], ["x"]), r"candidates\[0\] must be a list"),
        (lambda llm: llm.score(["a"], [[""]]), "empty string"),
        (lambda llm: llm.score(["a"], [[3]]), r"candidates\[0\]\[0\] must be a string"),
        (lambda llm: llm.score(["a"], [["b"]], normalize="max"), "normalize"),
        (lambda llm: llm.score(["a"], [["b"]], minibatch_size=0), "minibatch_size"),
        (lambda llm: llm.score([""], [["b"]]), "empty"),
        (lambda llm: llm.forward(["nope"], ["a"]), "not a module function"),
        (lambda llm: llm.forward(["score"], ["a"]), "needs candidates"),
        (lambda llm: llm.forward("score", ["a"], [["b"]]), "list of module names"),
        (lambda llm: llm.backend.token_logprobs([[1]], [[]]), "empty"),
        (lambda llm: llm.backend.token_logprobs([[1]], [[2], [3]]), "one completion per prompt"),
        (lambda llm: llm.update(["a"]), "needs an updater"),
    ],
)
def test_input_validation(tiny_llama, call, match):
    model, tok = tiny_llama
    with pytest.raises((InputError, ConfigError), match=match):
        call(LLM(ModelConfig(name="tiny"), model=model, tokenizer=tok))


def test_context_overflow_truncates_left_or_raises(tiny_llama):
    model, tok = tiny_llama
    long_context = "You see a wall. " * 40 + "Action:"
    truncating = LLM(ModelConfig(name="tiny", max_context_tokens=16), model=model, tokenizer=tok)
    with pytest.warns(UserWarning, match="truncated from the left"):
        got = truncating.score([long_context], [[" go forward"]])[0]
    kept = long_context[-200:]
    ids = tok(kept, add_special_tokens=False, return_offsets_mapping=True)
    start = ids["offset_mapping"][len(ids["input_ids"]) - 16][0]
    assert torch.allclose(
        got,
        LLM(ModelConfig(name="tiny"), model=model, tokenizer=tok).score([kept[start:]], [[" go forward"]])[0],
        atol=1e-5,
    )
    strict = LLM(
        ModelConfig(name="tiny", max_context_tokens=16, context_overflow="error"), model=model, tokenizer=tok
    )
    with pytest.raises(InputError, match="max_context_tokens=16"):
        strict.score([long_context], [[" go"]])
    with pytest.raises(InputError, match="model window"):
        LLM(ModelConfig(name="tiny"), model=model, tokenizer=tok).score(["a"], [["x" * 3000]])


def test_client_config_and_lifecycle(tiny_llama):
    model, tok = tiny_llama
    with LLM(ModelConfig(name="tiny"), model=model, tokenizer=tok) as llm:
        assert llm.model is model and llm.tokenizer is tok and llm.config.name == "tiny"
        assert llm.generate(["a"], max_new_tokens=2)[0][0].token_ids
    with pytest.raises(BackendError, match="closed"):
        llm.score(["a"], [["b"]])
    with pytest.raises(InputError, match="together"):
        LLM(ModelConfig(name="tiny"), model=model)
    with pytest.raises(ConfigError, match="not a model config"):
        LLM(3, model=model, tokenizer=tok)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reserved|built in"):
        LLM(ModelConfig(name="tiny"), {"score": ValueHead()}, model=model, tokenizer=tok)


def test_load_in_4bit_without_cuda_is_a_config_error(tiny_llama):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    model, tok = tiny_llama
    with pytest.raises(ConfigError, match="load_in_4bit"):
        LLM(ModelConfig(name="tiny", load_in_4bit=True, lora=LoRAConfig()), model=model, tokenizer=tok)


def test_forward_batch_tokens_splits_passes_and_keeps_the_scores():

    model, tok = tiny_causal_lm()
    contexts = ["go to the red ball " * 3, "open the door", "pick up the key " * 2, "x"]
    candidates = [[" left", " right"], [" toggle"], [" pick up", " drop"], [" y"]]
    calls = []
    model.model.register_forward_hook(lambda *_: calls.append(1))
    whole = LocalLLM(ModelConfig(trunk_cache_mb=0, row_tokens=0), model=model, tokenizer=tok).score(
        contexts, candidates
    )
    passes_whole = len(calls)
    budget = LocalLLM(
        ModelConfig(trunk_cache_mb=0, row_tokens=0, forward_batch_tokens=1), model=model, tokenizer=tok
    )
    split = budget.score(contexts, candidates)
    assert passes_whole == 1 and len(calls) - passes_whole == 4  # every item over the budget: one pass each
    for a, b in zip(whole, split):
        assert torch.allclose(a, b, atol=1e-5)
