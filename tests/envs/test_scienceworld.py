"""ScienceWorld adapter: ids, splits, valid and free-text actions, scores, determinism, the JVM.

Each env starts a JVM (a few seconds), so the tests share two module-scoped envs where they can.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("scienceworld")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld needs Java on PATH", allow_module_level=True)

from llmgym.envs import check_text_env, make_vec  # noqa: E402
from llmgym.envs._scienceworld_tasks import SCIENCEWORLD_TASKS, task_id_name  # noqa: E402
from llmgym.envs.registration import check_env_id  # noqa: E402
from llmgym.envs.scienceworld_env import ALWAYS_VALID, ScienceWorldTextEnv  # noqa: E402
from llmgym.errors import ConfigError, InputError, InvalidActionError, MissingDependencyError  # noqa: E402

# A seeded random walk over the valid actions, printing a digest of what it saw: run in a fresh
# process (a fresh JVM) and, as _walk_digest, on this process's env.
_WALK = """
import hashlib, json
import gymnasium as gym, numpy as np, llmgym
env = gym.make("llmgym/ScienceWorld-Boil-v0")
print(walk_digest(env))
env.close()
"""


def _walk_digest(env) -> str:
    obs, info = env.reset(seed=5)
    rng, seen = np.random.default_rng(0), [obs, info["valid_actions"]]
    for _ in range(6):
        obs, reward, terminated, _, info = env.step(
            info["valid_actions"][int(rng.integers(len(info["valid_actions"])))]
        )
        seen += [obs, reward, terminated, info["valid_actions"]]
        if terminated:
            obs, info = env.reset()
    return hashlib.sha1(json.dumps(seen).encode()).hexdigest()


def _java_children() -> int:
    out = subprocess.run(["pgrep", "-P", str(os.getpid()), "java"], capture_output=True, text=True)
    return len(out.stdout.split())


@pytest.fixture(scope="module")
def boil():
    env = gym.make("llmgym/ScienceWorld-Boil-v0")
    yield env
    env.close()


@pytest.fixture(scope="module")
def free():
    env = gym.make("llmgym/ScienceWorld-v0", task="find-living-thing", split="dev", free_text_actions=True)
    yield env
    env.close()


def test_the_task_table_matches_scienceworld_and_every_task_has_an_id():
    from scienceworld.constants import ID2TASK

    assert list(SCIENCEWORLD_TASKS) == list(ID2TASK.values())
    for task in SCIENCEWORLD_TASKS:
        spec = gym.spec(f"llmgym/ScienceWorld-{task_id_name(task)}-v0")
        assert spec.kwargs == {"task": task} and spec.max_episode_steps == 100
    assert task_id_name("find-living-thing") == "FindLivingThing"
    assert gym.spec("llmgym/ScienceWorld-v0").kwargs == {}


def test_missing_scienceworld_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "scienceworld", None)
    fix = r"pip install 'llmgym\[scienceworld\]'"
    with pytest.raises(MissingDependencyError, match=rf"ScienceWorld-Melt-v0.*{fix}"):
        check_env_id("llmgym/ScienceWorld-Melt-v0")
    with pytest.raises(MissingDependencyError, match=fix):
        gym.make("llmgym/ScienceWorld-Melt-v0")


def test_missing_java_names_the_fix(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r"no `java` executable is on PATH.*install Java"):
        gym.make("llmgym/ScienceWorld-v0")


def test_bad_arguments_are_config_errors_and_leave_no_jvm():
    before = _java_children()
    with pytest.raises(ConfigError, match=r"task='boiling' is not a ScienceWorld task.*'boil'"):
        ScienceWorldTextEnv("boiling")
    with pytest.raises(ConfigError, match=r"split='validation'.*\['train', 'dev', 'test'\]"):
        ScienceWorldTextEnv(split="validation")
    with pytest.raises(ConfigError, match=r"simplifications='teleport'.*noElectricalAction"):
        ScienceWorldTextEnv(simplifications="teleport")
    assert _java_children() == before


def test_reset_gives_the_task_and_the_room_with_sorted_valid_actions(boil):
    obs, info = boil.reset(seed=3)
    task, _, room = obs.partition("\n\n")
    assert task.startswith("Your task is to boil") and room.startswith("This room is called the")
    assert not any(line != line.rstrip() for line in obs.splitlines())
    valid = info["valid_actions"]
    assert valid == sorted(set(valid))
    assert set(ALWAYS_VALID) <= set(valid)
    assert (
        0 <= info["score"] < 100
        and info["success"] is False
        and info["variation"] in boil.unwrapped.variations
    )
    assert boil.unwrapped.valid_actions() == valid


def test_seeded_resets_and_steps_are_deterministic(boil):
    def walk():
        obs, info = boil.reset(seed=7)
        rng, seen = np.random.default_rng(1), [obs, info]
        for _ in range(4):
            seen.append(boil.step(info["valid_actions"][int(rng.integers(len(info["valid_actions"])))]))
            info = seen[-1][-1]
            if seen[-1][2]:
                break
        return seen

    assert walk() == walk()
    variations = {boil.reset(seed=s)[1]["variation"] for s in range(4)}
    assert len(variations) > 1 and variations <= set(boil.unwrapped.variations)


def test_a_fresh_process_plays_the_same_trajectory(boil):
    code = inspect.getsource(_walk_digest).replace("_walk_digest", "walk_digest") + _WALK
    fresh = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert fresh == _walk_digest(boil)


def test_an_invalid_command_raises_naming_the_valid_ones_and_changes_nothing(boil):
    obs, info = boil.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"'fly to the moon'.*'look around'.*free_text_actions=True"):
        boil.step("fly to the moon")
    with pytest.raises(InvalidActionError, match="are strings"):
        boil.step(3)
    after, reward, terminated, _, step_info = boil.step("  LOOK   Around ")  # case and blanks do not matter
    assert after == obs.partition("\n\n")[2] and reward == 0.0 and not terminated
    assert step_info["valid_actions"] == info["valid_actions"]


def test_an_invalid_command_error_is_bounded_and_says_the_lengths(boil):
    boil.reset(seed=0)
    long_action = "pour " + "x" * 100_000
    with pytest.raises(InvalidActionError) as info:
        boil.step(long_action)
    message = str(info.value)
    assert len(message) < 3000, f"a {len(message)}-character error"
    assert "100005 characters" in message and "'look around'" in message
    assert f"{len(boil.unwrapped.valid_actions())} valid actions" in message
    with pytest.raises(InvalidActionError, match=r"closest.*'look around'"):
        boil.step("look arond")


@pytest.mark.parametrize("mode", ["valid", "free"])
def test_a_lone_surrogate_in_the_action_is_an_invalid_action(boil, free, mode):
    env = boil if mode == "valid" else free
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"not valid Unicode.*position 5"):
        env.step("look \ud800around")
    assert env.step("look around")[0]  # the env still plays


def test_action_space_samples_commands_valid_everywhere_and_gymnasium_check_env_passes(boil):
    from gymnasium.utils.env_checker import check_env

    boil.action_space.seed(0)
    assert {boil.action_space.sample() for _ in range(20)} == set(ALWAYS_VALID)
    check_env(boil.unwrapped, skip_render_check=True, skip_close_check=True)


def test_the_gold_path_in_free_text_succeeds_with_score_100(free):
    env = free.unwrapped
    _, info = free.reset(seed=0)
    assert "valid_actions" not in info and info["variation"] in env.variations
    env.simulator.load(env.task, info["variation"], "", generateGoldPath=True)
    gold = env.simulator.get_gold_action_sequence()
    free.reset(seed=0)
    obs, reward, terminated, _, info = free.step("dance wildly")
    assert obs == "No known action matches that input." and reward == 0.0 and not terminated
    total = 0.0
    for action in gold:
        obs, reward, terminated, truncated, info = free.step(action)
        total += reward
        assert not truncated and (not terminated or action == gold[-1])
    assert terminated and info["success"] is True and info["score"] == 100 and total == pytest.approx(1.0)


def test_focusing_on_a_wrong_object_fails_the_task(free):
    free.reset(seed=0)
    _, reward, terminated, _, info = free.step("focus on air")
    assert terminated and info["score"] == -100 and info["success"] is False and reward == -1.0


def test_the_jvm_refuses_a_connection_without_its_token(boil):
    from py4j.java_gateway import GatewayParameters, JavaGateway
    from py4j.protocol import Py4JError

    sim = boil.unwrapped._sim
    port = sim._gateway.gateway_parameters.port
    assert sim._gateway.gateway_parameters.auth_token  # the env's own connection authenticates
    intruder = JavaGateway(gateway_parameters=GatewayParameters(port=port))
    try:
        with pytest.raises(Py4JError):
            intruder.jvm.java.lang.System.getProperty("user.home")
    finally:
        intruder.close()
    assert sim._gateway.jvm.java.lang.System.getProperty("user.home")  # while the token opens it


def test_splits_select_disjoint_variation_sets(boil, free):
    env = free.unwrapped
    dev = set(env.variations)
    env.simulator.load(env.task, 0, "")
    train, test = set(env.simulator.get_variations_train()), set(env.simulator.get_variations_test())
    assert dev == set(env.simulator.get_variations_dev())
    assert train and dev and test and not (train & dev or train & test or dev & test)
    assert {free.reset(seed=s)[1]["variation"] for s in range(6)} <= dev
    assert set(boil.unwrapped.variations).isdisjoint(
        json.loads(str(boil.unwrapped.simulator.server.getVariationsDev()))
    )


def test_envs_share_a_simulator_one_after_another_and_play_as_on_their_own(boil):
    sim = boil.unwrapped.simulator
    process = sim._gateway.java_process
    boil.reset(seed=0)
    before = _java_children()
    own = gym.make("llmgym/ScienceWorld-Freeze-v0")
    try:
        alone = _walk_digest(own)
    finally:
        own.close()
    shared = gym.make("llmgym/ScienceWorld-Freeze-v0", simulator=sim)
    assert shared.unwrapped.simulator is sim and _java_children() == before  # no JVM of its own
    with pytest.raises(InputError, match=r"step\(\) on the .*another env has loaded its task into since"):
        boil.step("look around")  # building the Freeze env loaded its task into the shared simulator
    boil.reset(seed=0)
    assert _walk_digest(shared) == alone  # the same trajectory as on a fresh JVM
    # Each reset loads its env's task: the other env must reset before it steps or lists actions again
    for stale in (boil, shared):  # boil, then the Freeze env once boil has reset
        with pytest.raises(
            InputError, match=r"step\(\) on the .*another env has loaded its task into since.*Fix: reset this"
        ):
            stale.step("look around")
        with pytest.raises(
            InputError, match=r"valid_actions\(\) on the .*another env has loaded its task into since"
        ):
            stale.unwrapped.valid_actions()
        stale.reset(seed=0)
        stale.step("look around")
    shared.close()  # leaves the simulator it did not start running
    assert process.poll() is None and _java_children() == before
    assert boil.reset(seed=0)[1]["valid_actions"]


def _vec_trace(mode: str) -> list:
    # Free text keeps the steps cheap; "focus on air" fails the task, so the env autoresets.
    actions = ["look around", "focus on air", "open door to kitchen", "go to kitchen", "inventory"]
    kwargs = {"free_text_actions": True}
    with make_vec(
        "llmgym/ScienceWorld-FindPlant-v0", 1, mode, seed=3, env_kwargs=kwargs, num_workers=1
    ) as envs:
        envs.reset()
        trace = [list(envs.prompts)]
        for action in actions:
            _, rewards, terminated, _, infos = envs.step([action])
            trace.append(
                (list(envs.prompts), rewards.tolist(), terminated.tolist(), [i.get("episode") for i in infos])
            )
    return trace


def test_make_vec_sync_and_async_play_the_same_trajectories():
    sync = _vec_trace("sync")
    assert sync == _vec_trace("async")
    assert sync[2][2] == [True]  # the failed episode ended and the env autoreset


def test_check_text_env_in_free_text_mode_and_its_close_ends_the_jvm(free):  # last: it closes `free`
    process = free.unwrapped.simulator._gateway.java_process
    before = _java_children()
    check_text_env(free.unwrapped, num_steps=10, check_gymnasium=False)  # closes the env at the end
    assert process.poll() is not None and _java_children() == before - 1
    free.close()  # idempotent


def test_ansi_render_mode_renders_the_last_observation():
    env = gym.make("llmgym/ScienceWorld-Boil-v0", render_mode="ansi")
    try:
        assert env.metadata["render_modes"] == ["ansi"]
        obs, info = env.reset(seed=0)
        assert env.render() == obs
        obs, *_ = env.step("look around")
        assert env.render() == obs
    finally:
        env.close()
    with pytest.raises(ConfigError, match="render_mode='human'"):
        gym.make("llmgym/ScienceWorld-Boil-v0", render_mode="human")
