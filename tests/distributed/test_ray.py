"""The Ray backend on a real private local Ray instance (one per module; `make test` runs the ray tests in one process).

Two Ray servers running the real LocalLLM on a tiny model answer like one in-process LocalLLM
(scores and heads to float32 rounding, greedy generations token for token), every algorithm's
update (NLPO's with its mask refreshed on every server) leaves both servers' weights equal to the
in-process update, a checkpoint written on two servers resumes bit-identically on two new ones,
two ``llmgym train`` runs of one LoRA config on two servers are identical (and equal one in-process
run to float32 rounding), and a Lamorel ``Caller`` with ``n_llm_processes: 2`` answers and trains like the in-process one.
Faults are ``BackendError``s naming the server; a call that hangs is one after ``call_timeout_s``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from llmgym import cli
from llmgym.agents import GenerativeAgent, ScoringAgent
from llmgym.agents.learning import Episode
from llmgym.agents.policies import CandidateActions, CandidatePolicy, TokenActions, TokenPolicy
from llmgym.algorithms import GRPO, NLPO, PPO, RLOO, UpdateBatch
from llmgym.checkpoint import latest_checkpoint
from llmgym.compat.lamorel import BaseModelInitializer, BaseUpdater, Caller
from llmgym.config import AgentConfig, AlgorithmConfig, DistributedConfig, ModelConfig
from llmgym.errors import BackendError, BackendTimeoutError, PlacementError
from llmgym.llm.distributed.backend import make_backend
from llmgym.llm.distributed.ray_backend import RayLLM
from llmgym.llm.distributed.ray_runtime import cluster_requires_token, start_ray
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ModuleFunction, ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.report.runs import read_metrics
from llmgym.testing import save_tiny_model, tiny_causal_lm
from tests.algorithms.helpers import FAST
from tests.compat.test_lamorel import ValueHeadModuleFn
from tests.distributed.helpers import CANDIDATES, CONTEXTS, OPTIMIZER, batches, common, generated

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]
TOL = 1e-4
ROOT = Path(__file__).resolve().parents[2]


class Boom(ModuleFunction):
    """A head that always raises (a bug in a user's module function)."""

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyError("boom: this head found a bad context")


class Stall(ModuleFunction):
    """A head that never returns in time (a hung user module function)."""

    def forward(self, forward_outputs, minibatch, tokenized_contexts, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(600)


def _build(llm_processes: int, **distributed):
    model, tokenizer = tiny_causal_lm("llama", seed=0)
    heads = {"value": ValueHead(hidden_sizes=(8,)), "boom": Boom(), "stall": Stall()}
    return make_backend(
        ModelConfig(name="tiny", forward_batch_size=4),
        heads,
        PPO(config=OPTIMIZER).updater(),
        model=model,
        tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=llm_processes, **{"timeout_s": 30.0, **distributed}),
    )


@pytest.fixture(scope="module")
def runtime():
    started = start_ray(DistributedConfig(llm_processes=4))
    yield started
    started.shutdown()


@pytest.fixture(scope="module")
def pair(runtime):
    local = _build(1)
    remote = _build(2, check_weights=True)
    assert isinstance(local, LocalLLM) and isinstance(remote, RayLLM)
    yield local, remote
    remote.close()
    local.close()


def test_scores_heads_and_greedy_generations_equal_in_process(pair):
    local, remote = pair
    for got, want in zip(remote.score(CONTEXTS, CANDIDATES), local.score(CONTEXTS, CANDIDATES)):
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)
    for got, want in zip(
        remote.forward(["value", "score"], CONTEXTS, CANDIDATES),
        local.forward(["value", "score"], CONTEXTS, CANDIDATES),
    ):
        torch.testing.assert_close(got["value"], want["value"], atol=TOL, rtol=0)
        torch.testing.assert_close(got["score"], want["score"], atol=TOL, rtol=0)
    got_gen = remote.generate(CONTEXTS, max_new_tokens=5, do_sample=False)
    want_gen = local.generate(CONTEXTS, max_new_tokens=5, do_sample=False)
    assert [[s.token_ids for s in g] for g in got_gen] == [[s.token_ids for s in g] for g in want_gen]
    assert len({s.node_id for s in remote.servers}) == 1 and sorted(s.rank for s in remote.servers) == [0, 1]


def test_each_algorithms_update_equals_in_process(pair):
    local, remote = pair
    updates = list(batches(local.tokenizer))
    for algorithm in (
        GRPO(),
        RLOO(config=AlgorithmConfig(name="rloo")),
    ):  # PPO's server side, their own coefficients
        updates.append(
            (
                ("loss", "policy_loss"),
                CANDIDATES,
                UpdateBatch(
                    objective=algorithm.objective(),
                    policy=CandidatePolicy(temperature=0.7),
                    actions=CandidateActions(CANDIDATES, torch.zeros(len(CONTEXTS), dtype=torch.long)),
                    **common(),
                ),
            )
        )
    for keys, candidates, batch in updates:
        want = local.update(CONTEXTS, candidates, batch=batch)[0]
        results = remote.update(CONTEXTS, candidates, batch=batch)  # check_weights: the servers agree
        assert sorted(r["num_samples"] for r in results) == [2, 3]
        assert want.get("step_fraction", 1.0) > 0, want  # TRPO took a step (not the kept old policy)
        for key in keys:
            merged = sum(r[key] * r["num_samples"] for r in results) / len(CONTEXTS)
            assert merged == pytest.approx(want[key], rel=TOL, abs=TOL), key
        _assert_same_weights(local, remote)
    # more servers than contexts: one server has an empty share and still joins the all-reduce, with weight 0
    keys, candidates, batch = updates[0]
    one = UpdateBatch(
        objective=batch.objective,
        policy=batch.policy,
        minibatches=[[0]],
        actions=CandidateActions(CANDIDATES[:1], torch.zeros(1, dtype=torch.long)),
        **{k: v[:1] for k, v in common().items() if k != "minibatches"},
    )
    local.update(CONTEXTS[:1], CANDIDATES[:1], batch=one)
    assert sorted(r["num_samples"] for r in remote.update(CONTEXTS[:1], CANDIDATES[:1], batch=one)) == [0, 1]
    _assert_same_weights(local, remote)


def test_nlpo_mask_refresh_reaches_every_server_and_its_updates_equal_in_process(pair):
    local, remote = pair
    sampling = Sampling(temperature=0.8, mask_top_p=0.5)
    prompt_ids, action_ids = generated(local.tokenizer)
    batch = UpdateBatch(
        objective=NLPO().objective(),
        policy=TokenPolicy(sampling),
        actions=TokenActions(prompt_ids, action_ids),
        **common(),
    )
    stale = None
    for _ in range(2):  # the second refresh snapshots the weights the first update moved
        local.refresh_mask_policy()
        remote.refresh_mask_policy()
        # token_logprobs splits the samples over both servers: each server's masked log-probs equal the local ones
        want = local.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
        got = remote.token_logprobs(prompt_ids, action_ids, require_grad=False, sampling=sampling)
        for w, g in zip(want, got):
            torch.testing.assert_close(g["logprobs"], w["logprobs"], atol=TOL, rtol=0)
        if (
            stale is not None
        ):  # a server that missed the refresh would have answered these: the check can fail
            assert any((s["logprobs"] - w["logprobs"]).abs().max() > 10 * TOL for s, w in zip(stale, want))
        want_stats = local.update(CONTEXTS, None, batch=batch)[0]
        results = remote.update(CONTEXTS, None, batch=batch)
        for key in ("loss", "policy_loss", "ratio_mean"):
            merged = sum(r[key] * r["num_samples"] for r in results) / len(CONTEXTS)
            assert merged == pytest.approx(want_stats[key], abs=TOL), key
        _assert_same_weights(local, remote)
        stale = local.token_logprobs(
            prompt_ids, action_ids, require_grad=False, sampling=sampling
        )  # old snapshot


def _assert_same_weights(local, remote):
    for p0, p1, w in zip(remote.parameters_of(0), remote.parameters_of(1), local.trainable_parameters()):
        assert torch.equal(p0, p1)
        torch.testing.assert_close(p0, w.detach(), atol=TOL, rtol=0)


def test_module_function_exception_names_the_server_and_cause(pair):
    _, remote = pair
    with pytest.raises(
        BackendError, match=r"LLM server rank \d \(node .* pid \d+\) raised during forward\(\): KeyError"
    ) as info:
        remote.forward(["boom"], CONTEXTS, CANDIDATES)
    assert "boom: this head found a bad context" in str(info.value) and "test_ray.py" in str(info.value)
    assert len(remote.score(CONTEXTS[:2], CANDIDATES[:2])) == 2  # not a collective: the servers keep serving


def test_checkpoint_resumes_bit_identically_on_two_new_servers_whose_hung_call_then_times_out(pair, tmp_path):
    _, remote = pair
    batch = next(batches(remote.tokenizer))[2]
    remote.save(str(tmp_path / "ckpt"))
    remote.update(CONTEXTS, CANDIDATES, batch=batch)
    resumed = _build(2, call_timeout_s=5.0)
    try:
        resumed.load(str(tmp_path / "ckpt"))
        resumed.update(CONTEXTS, CANDIDATES, batch=batch)
        for p, q in zip(remote.parameters_of(1), resumed.parameters_of(0)):
            assert torch.equal(p, q)
        start = time.monotonic()
        with pytest.raises(
            BackendTimeoutError,
            match=r"LLM server rank \d \(node .* did not answer forward\(\) within "
            r"distributed.call_timeout_s=5s",
        ):
            resumed.forward(["stall"], CONTEXTS, CANDIDATES)
        assert time.monotonic() - start < 15
        with pytest.raises(BackendError, match="cannot be used any more"):
            resumed.score(CONTEXTS, CANDIDATES)
    finally:
        resumed.close()


def test_both_policies_re_score_their_actions_on_two_servers(pair):
    """The first ratio of an update is 1: each policy re-scores on the servers what it drew there."""
    _, remote = pair
    one_step = AlgorithmConfig(epochs=1, minibatch_size=64)  # the statistics of the policy before its step

    def first_ratio(agent, infos):
        agent.act_batch(CONTEXTS, infos)
        episodes = [Episode([decision], [1.0]) for decision in agent.last_decisions]
        return PPO(config=one_step).learn_from_episodes(agent, episodes)

    scoring = ScoringAgent(
        remote, AgentConfig(use_chat_template=False, temperature=0.7), num_envs=len(CONTEXTS)
    )
    stats = first_ratio(scoring, [{"valid_actions": c} for c in CANDIDATES])
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and stats["approx_kl"] == pytest.approx(
        0.0, abs=1e-6
    )
    generative = GenerativeAgent(
        remote, AgentConfig(use_chat_template=False, max_new_tokens=3), num_envs=len(CONTEXTS)
    )
    generative.policy = TokenPolicy(Sampling(temperature=0.8, top_p=0.9), max_new_tokens=3).masked(0.5)
    remote.refresh_mask_policy()  # NLPO's mask, the same snapshot on both servers
    stats = first_ratio(generative, [{} for _ in CONTEXTS])
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["approx_kl"] == pytest.approx(
        0.0, abs=1e-5
    )


class RegressionUpdater(BaseUpdater):
    """One SGD step on the squared error of the value head over this server's share (Lamorel's updater API)."""

    def perform_update(self, contexts, candidates, _current_batch_ids, **kwargs):  # type: ignore[no-untyped-def]
        if not hasattr(self, "optimizer"):
            self.optimizer = torch.optim.SGD(self._llm_module.module._module_functions.parameters(), lr=0.1)
        self.optimizer.zero_grad()
        out = self._llm_module(["value"], contexts=contexts, candidates=candidates, require_grad=True)
        values = torch.stack([o["value"][0, 0] for o in out])
        loss = ((values - kwargs["labels"][_current_batch_ids]) ** 2).mean()
        loss.backward()  # on 2 servers: DistributedDataParallel averages the gradients, as in Lamorel
        self.optimizer.step()
        return {"loss": loss.detach(), "ids": list(_current_batch_ids)}


class FreezeLLM(BaseModelInitializer):
    """Train the heads only (every trainable parameter then gets a gradient, as DistributedDataParallel needs)."""

    def initialize_model(self, model):  # type: ignore[no-untyped-def]
        for param in model._modules["_LLM_model"].parameters():
            param.requires_grad = False


def test_a_lamorel_config_with_two_llm_processes_runs_on_two_ray_servers_like_one(runtime, tmp_path):
    path = save_tiny_model(tmp_path / "llama", "llama")
    contexts, candidates = CONTEXTS[:4], CANDIDATES[:4]
    labels = torch.tensor([1.0, -1.0, 0.5, 2.0])

    def caller(servers: int) -> Caller:
        args = {
            "distributed_setup_args": {"n_rl_processes": 1, "n_llm_processes": servers},
            "llm_args": {
                "model_type": "causal",
                "model_path": str(path),
                "minibatch_size": 4,
                "parallelism": {"use_gpu": False},
            },
        }
        return Caller(
            args,
            custom_updater=RegressionUpdater(),
            custom_model_initializer=FreezeLLM(),
            custom_module_functions={"value": ValueHeadModuleFn("causal", True)},
        )

    local, remote = caller(1), caller(2)
    try:
        assert isinstance(remote._backend, RayLLM) and remote._backend.num_servers == 2
        for got, want in zip(remote.score(contexts, candidates), local.score(contexts, candidates)):
            torch.testing.assert_close(got, want, atol=TOL, rtol=0)
        want = local.update(contexts, candidates, labels=labels)
        got = remote.update(contexts, candidates, labels=labels)
        assert [r["ids"] for r in got] == [[0, 1], [2, 3]]  # Lamorel's contiguous shares
        assert sum(float(r["loss"]) for r in got) / 2 == pytest.approx(float(want[0]["loss"]), abs=TOL)
        after_local = local.custom_module_fns(["value"], contexts=contexts, candidates=candidates)
        after_remote = remote.custom_module_fns(["value"], contexts=contexts, candidates=candidates)
        for g, w in zip(after_remote, after_local):  # the averaged gradients made the in-process step
            torch.testing.assert_close(g["value"], w["value"], atol=TOL, rtol=0)
        with pytest.raises(
            BackendError, match=r"LLM server rank \d .* raised during update\(\): KeyError: 'labels'"
        ):
            remote.update(contexts, candidates)  # an updater's exception names the server
    finally:
        remote.close()
        local.close()


def _train(model_dir: Path, out: Path, name: str, *extra: str) -> tuple[list[dict], dict]:
    """Two PPO updates of a LoRA run on Countdown: its metrics rows (timings left out) and its final adapter."""
    args = [
        *FAST,
        "env.id=llmgym/Countdown-v0",
        "env.kwargs.length=2",
        "env.num_envs=2",
        "algorithm.rollout_steps=4",
        "algorithm.minibatch_size=4",
        "model.lora.r=4",
        "train.total_env_steps=16",
        "train.checkpoint_every=null",
        f"model.name={model_dir}",
        f"train.output_dir={out}",
        f"train.run_name={name}",
        *extra,
    ]
    assert cli.main(["train", *args]) == 0
    timing = {"time_s", "collect_s", "update_s", "steps_per_s"}
    rows = [
        {k: v for k, v in r.items() if k not in timing} for r in read_metrics(out / name / "metrics.jsonl")
    ]
    folder = latest_checkpoint(out / name) / "llm"
    return rows, {
        f"{p.name}:{k}": t for p in sorted(folder.rglob("*.safetensors")) for k, t in load_file(p).items()
    }


def test_two_server_training_runs_are_identical_and_equal_the_in_process_run(
    runtime, tiny_model_dir, tmp_path
):
    """LoRA's adapters are drawn from torch's global generator while each server builds its LLM.

    The servers start from the driver's generator (seeded by ``train.seed``), not from the one Ray's
    worker seeded at random: before, two 2-server runs differed from the first update on.
    """
    servers = "distributed.llm_processes=2"
    first, first_weights = _train(tiny_model_dir, tmp_path, "first", servers)
    second, second_weights = _train(tiny_model_dir, tmp_path, "second", servers)
    assert [r["env_steps"] for r in first if r["kind"] == "train"] == [8, 16]
    assert first == second
    assert first_weights.keys() == second_weights.keys() and first_weights
    assert all(first_weights[key].equal(second_weights[key]) for key in first_weights)
    local, local_weights = _train(tiny_model_dir, tmp_path, "local")
    assert [r.keys() for r in local] == [r.keys() for r in first]
    # ratio_max and explained_variance are not means: each server's is of its own share, and the shares' are
    # averaged (one share's constant returns make its explained variance NaN, and so the mean's).
    per_share = {"ratio_max", "explained_variance"}
    for got, want in zip(first, local):
        assert {k: v for k, v in got.items() if k not in per_share} == {
            k: pytest.approx(v, abs=TOL) if isinstance(v, float) else v
            for k, v in want.items()
            if k not in per_share
        }
    assert local_weights.keys() == first_weights.keys()
    for key, want in local_weights.items():
        torch.testing.assert_close(first_weights[key], want, atol=TOL, rtol=0)


def test_a_killed_server_is_a_backend_error_in_seconds(pair):
    _, remote = pair
    ray.kill(remote._actors[1])
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"LLM server rank 1 .* died during score\(\)"):
        remote.score(CONTEXTS, CANDIDATES)
    assert time.monotonic() - start < 10
    with pytest.raises(BackendError, match="cannot be used any more"):
        remote.score(CONTEXTS, CANDIDATES)


def test_non_finite_weights_on_the_servers_stop_training_with_the_update_named(runtime):
    """The updater runs on the servers: each checks its weights there and reports it with the update's statistics."""
    from llmgym.algorithms.on_policy import weighted_mean
    from llmgym.errors import NonFiniteError

    model, tokenizer = tiny_causal_lm("llama", seed=0)
    diverging = PPO(config=AlgorithmConfig(learning_rate=1e6, head_learning_rate=1e6, max_grad_norm=None))
    remote = make_backend(
        ModelConfig(name="tiny", forward_batch_size=4),
        {"value": ValueHead(hidden_sizes=(8,))},
        diverging.updater(),
        model=model,
        tokenizer=tokenizer,
        distributed=DistributedConfig(llm_processes=2, timeout_s=30.0),
    )
    try:
        _, candidates, batch = next(iter(batches(tokenizer)))  # PPO's
        stats: dict[str, float] = {}
        for _ in range(3):  # a step or two until the weights overflow
            results = remote.update(CONTEXTS, candidates, batch=batch)
            stats = weighted_mean(results)
            if stats["nonfinite_weights"] > 0:
                break
        assert all(r["nonfinite_weights"] == 1.0 for r in results)
        with pytest.raises(NonFiniteError, match=r"update 1 .*algorithm\.learning_rate \(now 1e\+06\)"):
            diverging.check_finite(stats)
    finally:
        remote.close()


def test_gpus_on_a_cpu_only_instance_are_a_placement_error_naming_gpu(runtime):
    with pytest.raises(PlacementError, match=r"no node of the Ray cluster has enough GPU"):
        _build(2, gpus_per_server=1.0)
    with pytest.raises(PlacementError, match=r"model_parallelism_size=2 .* the Ray cluster has no GPU"):
        _build(1, model_parallelism_size=2)  # one server over 2 GPUs runs on Ray too
    with pytest.raises(PlacementError, match=r"could not be placed within distributed.timeout_s=1s"):
        _build(2, cpus_per_server=3, timeout_s=1.0)  # each fits a node, both do not
    assert all(group["state"] != "PENDING" for group in ray.util.placement_group_table().values())


def test_a_process_without_the_token_cannot_submit_work(runtime):
    assert cluster_requires_token(runtime.gcs_address)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    code = f"import ray; ray.init(address={runtime.gcs_address!r}); print('SUBMITTED', ray.get(ray.remote(lambda: 1).remote()))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=10
        )
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # Ray retries the refused connection for a while
        output = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()
    assert "InvalidAuthToken" in output and "SUBMITTED" not in output


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_driver_stops_every_server_and_ray_process(signum):
    """Ctrl-C, SIGTERM and SIGKILL alike leave no process of the instance (its agents included) after 20 s.

    Under SIGKILL no exit handler runs: Ray's dashboard and runtime-env agents then waited ~60 s on the dead
    GCS before exiting; llmgym's reaper kills them when the driver's end of its pipe closes.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.distributed.ray_driver"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = json.loads(driver.stdout.readline())["pids"]  # type: ignore[union-attr]
        assert len(pids) >= 6 and all(_alive(pid) for pid in pids)  # gcs, raylet, 2 agents, ..., 2 servers
        driver.send_signal(signum)
        driver.wait(timeout=60)
    finally:
        driver.kill()
    deadline = time.monotonic() + 20
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
