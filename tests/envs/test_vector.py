from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from llmgym.envs import make_vec
from llmgym.envs.synthetic import ConstantRewardEnv, EchoWordEnv
from llmgym.errors import ConfigError, InputError, InvalidActionError


def _rollout(envs, steps, seed=0):
    rng = np.random.default_rng(seed)
    trace = [(list(envs.prompts), [c for c in envs.candidates])]
    for _ in range(steps):
        actions = [c[int(rng.integers(len(c)))] for c in envs.candidates]
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        finals = [(i.get("episode"), i.get("final_observation") is not None) for i in infos]
        trace.append((list(envs.prompts), rewards.tolist(), terminated.tolist(), truncated.tolist(), finals))
    return trace


def test_sync_equals_async_for_200_steps():
    traces = []
    for mode in ("sync", "async"):
        with make_vec("llmgym/BabyAI-Text-GoToRedBall-v0", 4, mode, seed=11, num_workers=2) as envs:
            envs.reset()
            traces.append(_rollout(envs, 200))
    assert traces[0] == traces[1]
    assert any(any(t[2]) for t in traces[0][1:])  # some episodes ended and were autoreset


def test_step_returns_arrays_and_lists():
    with make_vec("llmgym/EchoWord-v0", 3, seed=0) as envs:
        obs, infos = envs.reset()
        assert len(obs) == len(infos) == 3 and envs.prompts == obs
        out = envs.step([0, 1, 2])
        assert out[1].dtype == np.float32 and out[2].dtype == bool and out[3].dtype == bool
        assert isinstance(out[0], list) and isinstance(out[4], list)


def test_seeds_are_seed_plus_index():
    with make_vec("llmgym/EchoWord-v0", 3) as envs:
        obs, _ = envs.reset(seed=5)
    expected = [EchoWordEnv().reset(seed=5 + i)[0] for i in range(3)]
    assert obs == expected


def test_same_step_autoreset_loses_no_step():
    horizon = 3
    with make_vec([lambda: ConstantRewardEnv(horizon)] * 2, seed=0) as envs:
        envs.reset()
        lengths, steps_seen = [], 0
        for t in range(1, 10):
            obs, rewards, terminated, truncated, infos = envs.step(["go", "wait"])
            steps_seen += 2
            assert rewards.tolist() == [1.0, 1.0]  # every step is a real step: no reset step
            assert truncated.tolist() == [t % horizon == 0] * 2
            for info in infos:
                if "episode" in info:
                    lengths.append(info["episode"]["length"])
                    assert info["episode"] == {"return": float(horizon), "length": horizon, "success": None}
                    assert info["final_observation"] == "Every step earns one point."
                    assert info["valid_actions"] == ["wait", "go"]
        assert sum(lengths) == steps_seen - 2 * (9 % horizon)


def test_autoreset_returns_the_next_episode_first_observation():
    with make_vec("llmgym/EchoWord-v0", 2, seed=3) as envs:
        first, _ = envs.reset()
        # env i restarted unseeded after its episode: compare with a fresh env seeded seed+i
        solo = [EchoWordEnv(), EchoWordEnv()]
        for i, env in enumerate(solo):
            assert env.reset(seed=3 + i)[0] == first[i]
        words = [o.removeprefix("Say the word: ") for o in first]
        obs, rewards, terminated, _, infos = envs.step(words)
        assert rewards.tolist() == [1.0, 1.0] and terminated.all()
        for i, env in enumerate(solo):
            env.step(words[i])
            assert obs[i] == env.reset()[0]  # already the next episode
            assert infos[i]["final_observation"] == first[i]
            assert infos[i]["final_info"]["success"] is True
            assert infos[i]["episode"] == {"return": 1.0, "length": 1, "success": True}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_invalid_action_names_env_and_steps_nothing(mode):
    with make_vec("llmgym/Countdown-v0", 2, mode, seed=0, num_workers=1) as envs:
        envs.reset()
        before = list(envs.prompts)
        with pytest.raises(InvalidActionError, match="env 1: .*'fly'.*'left'"):
            envs.step(["left", "fly"])
        assert envs.prompts == before
        envs.step(["left", "left"])  # still usable: nothing stepped


def test_worker_errors_are_raised_in_parent():
    class Boom(EchoWordEnv):
        def step(self, action):
            raise RuntimeError("kaboom")

    with make_vec([Boom, Boom], vectorization_mode="async", seed=0) as envs:
        envs.reset()
        with pytest.raises(RuntimeError, match="kaboom") as info:
            envs.step([0, 0])
        assert "Traceback in the env worker process" in str(info.value.__cause__)


def test_prompt_builder_and_get_attr():
    def builder(obs, info):
        return f"{obs}\nActions: {', '.join(info['valid_actions'])}\nAction:"

    with make_vec("llmgym/Countdown-v0", 2, seed=0, prompt_builder=builder) as envs:
        envs.reset()
        assert all(p.endswith("Actions: left, right\nAction:") for p in envs.prompts)
        assert envs.candidates == [["left", "right"]] * 2
        assert envs.get_attr("length") == [3, 3]


def test_max_episode_steps_and_env_kwargs():
    with make_vec(
        "llmgym/ConstantReward-v0", 1, env_kwargs={"horizon": 100}, max_episode_steps=2, seed=0
    ) as envs:
        envs.reset()
        assert envs.step([0])[3].tolist() == [False]
        assert envs.step([0])[3].tolist() == [True]
    with make_vec([lambda: ConstantRewardEnv(100)], max_episode_steps=1, seed=0) as envs:
        envs.reset()
        assert envs.step(["go"])[3].tolist() == [True]


def test_make_vec_errors():
    with pytest.raises(ConfigError, match="Did you mean.*EchoWord"):
        make_vec("llmgym/EchoWrd-v0", 2)
    with pytest.raises(ConfigError, match="num_envs"):
        make_vec("llmgym/EchoWord-v0", 0)
    with pytest.raises(ConfigError, match="vectorization_mode"):
        make_vec("llmgym/EchoWord-v0", 1, "threads")
    with pytest.raises(ConfigError, match="env_kwargs"):
        make_vec([EchoWordEnv], env_kwargs={"words": ["a", "b"]})
    envs = make_vec("llmgym/EchoWord-v0", 2)
    with pytest.raises(InputError, match="reset"):
        envs.step([0, 0])
    envs.reset()
    with pytest.raises(InputError, match="2 actions"):
        envs.step([0])
    envs.close()
    with pytest.raises(InputError, match="closed"):
        envs.reset()


def test_plain_gymnasium_envs_work_too():
    with make_vec(
        [lambda: gym.make("CartPole-v1")] * 2, seed=0, prompt_builder=lambda o, i: str(o.round(2))
    ) as envs:
        envs.reset()
        _, rewards, *_ = envs.step([0, 1])
        assert rewards.tolist() == [1.0, 1.0] and envs.candidates == [None, None]


def test_episode_return_leaves_out_shaping_but_step_rewards_keep_it():
    pytest.importorskip("minigrid")
    envs = make_vec(
        "llmgym/BabyAI-Text-GoToRedBallNoDists-v0",
        num_envs=1,
        seed=0,
        max_episode_steps=4,
        env_kwargs={"reward_shaping": 0.5},
    )
    envs.reset()
    rewards = []
    for action in ["turn left", "go forward", "turn right", "turn right"]:
        _, reward, _, truncated, infos = envs.step([action])
        rewards.append(float(reward[0]))
    assert truncated[0] and any(rewards)
    assert infos[0]["episode"]["return"] == 0.0  # no success: the task's return is 0
    envs.close()


@pytest.mark.parametrize("actions", [None, 3, "ab", b"ab"])
def test_step_with_a_non_sequence_is_an_input_error(actions):
    with make_vec("llmgym/EchoWord-v0", 2, seed=0) as envs:
        envs.reset()
        with pytest.raises(InputError, match=r"actions=.* is invalid; expected a sequence of 2 actions"):
            envs.step(actions)
        envs.step(np.array([0, 1]))  # an array of indices is a sequence of actions


@pytest.mark.parametrize("steps", [-1, 0, 2.5, "10", True])
def test_make_vec_refuses_bad_max_episode_steps(steps):
    with pytest.raises(ConfigError, match=r"max_episode_steps=.* is invalid; expected an int >= 1"):
        make_vec("llmgym/EchoWord-v0", 1, max_episode_steps=steps)
    with pytest.raises(ConfigError, match=r"max_episode_steps="):
        make_vec([EchoWordEnv], max_episode_steps=steps)


def test_seeds_that_are_not_ints_are_typed_errors():
    with pytest.raises(ConfigError, match=r"seed='x' is invalid; expected an int or None"):
        make_vec("llmgym/EchoWord-v0", 2, seed="x")
    with make_vec("llmgym/EchoWord-v0", 2) as envs:
        for bad in ("x", 1.5, True, ["a", 1]):
            with pytest.raises(InputError, match=r"seed=.*expected an int"):
                envs.reset(seed=bad)
        obs, _ = envs.reset(seed=[np.int64(5), None])
        assert obs[0] == EchoWordEnv().reset(seed=5)[0]


@pytest.mark.parametrize("failure", ["invalid", "crash"])
def test_a_step_that_failed_part_way_names_its_cause_on_the_next_step(failure):
    class Crash(EchoWordEnv):
        def step(self, action):
            raise RuntimeError("kaboom")

    if failure == "invalid":
        envs = make_vec("llmgym/Countdown-v0", 2, "async", seed=0, num_workers=2)
        actions, cause = ["left", "fly"], r"InvalidActionError: env 1: .*'fly'"
    else:
        envs = make_vec([EchoWordEnv, Crash], seed=0)
        actions, cause = [0, 0], r"RuntimeError: kaboom"
    with envs:
        envs.reset()
        with pytest.raises(Exception, match="fly|kaboom"):
            envs.step(actions)
        with pytest.raises(
            InputError,
            match=rf"the previous step failed \({cause}.*\), maybe after some envs had stepped.*reset\(\)",
        ) as info:
            envs.step(actions)
        assert "before reset" not in str(info.value)
        envs.reset()
        if failure == "invalid":
            envs.step(["left", "left"])


def test_async_workers_are_spawned_not_forked_once_cuda_is_initialised(monkeypatch):
    import multiprocessing as mp

    import torch

    from llmgym.envs import vector

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert vector.worker_start_method(None) is None  # the platform default (fork on Linux)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # the trainer put the LLM on the GPU
    assert vector.worker_start_method(None) == "spawn"
    assert vector.worker_start_method("forkserver") == "forkserver"  # an explicit choice wins
    methods = []
    real = mp.get_context
    monkeypatch.setattr(vector.mp, "get_context", lambda method=None: methods.append(method) or real(method))
    with make_vec("llmgym/EchoWord-v0", 2, "async", seed=0, num_workers=1) as envs:
        observations, _ = envs.reset()
    assert len(observations) == 2 and methods == ["spawn"]
