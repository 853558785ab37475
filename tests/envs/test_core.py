from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import llmgym.envs.babyai_text as babyai_text
from llmgym.envs import TextSpace, check_text_env, list_envs, observation_text, register_envs
from llmgym.envs.checker import LISTED_IN_FULL
from llmgym.envs.core import int_action, is_int
from llmgym.envs.registration import _BABYAI_LEVELS, _GLAM_TRAIN
from llmgym.envs.synthetic import EchoWordEnv
from llmgym.errors import InputError, InvalidActionError
from tests.envs._registered import TEXTWORLD_GENERIC_IDS, require_extras

ENV_IDS = [env_id for env_id, _ in list_envs()]


def _checker_case(env_id: str, make_kwargs: dict | None = None, **check_kwargs):
    """One id's check_text_env call: the heavy suites with fewer steps, marked slow, but run all the same."""
    make_kwargs = make_kwargs or {}
    if env_id.startswith("llmgym/ScienceWorld-") and make_kwargs.get("free_text_actions"):
        label = f"{env_id}-free-text"
    else:
        label = env_id
    heavy = env_id.startswith(("llmgym/ScienceWorld-", "llmgym/TextWorld-"))
    marks = [pytest.mark.slow] if heavy else []
    return pytest.param(env_id, make_kwargs, {"num_steps": 25, **check_kwargs}, id=label, marks=marks)


def _checker_cases() -> list:
    """Every registered id, each with its check_text_env arguments.

    ScienceWorld's ids start a JVM each (about 1-3 s) and list about 2,800 valid actions per state, so
    beyond ScienceWorld-v0 (the whole check, in the default valid-action mode and in free-text mode)
    the other tasks skip gymnasium's own checker, whose render check starts a JVM per render mode,
    render in "ansi" mode on the env itself (no second JVM), take one step and one valid action, and
    play on one JVM in turn (``simulator=``, see :func:`_shared_jvm`): five resets remain. TextWorld's
    generated families compile their games at first use (12-15 s each; then cached): 2 steps, 3 valid
    actions, no gymnasium checker (whose resets with other seeds compile more games).
    """
    cases = []
    for env_id in ENV_IDS:
        if env_id == "llmgym/ScienceWorld-v0":
            cases.append(_checker_case(env_id, num_steps=5, max_valid_actions=5))
            cases.append(_checker_case(env_id, {"free_text_actions": True}))
        elif _shares_the_jvm(env_id):
            cases.append(
                _checker_case(
                    env_id, {"render_mode": "ansi"}, num_steps=1, max_valid_actions=1, check_gymnasium=False
                )
            )
        elif env_id.startswith("llmgym/TextWorld-") and env_id not in TEXTWORLD_GENERIC_IDS:
            cases.append(
                _checker_case(
                    env_id, {"render_mode": "ansi"}, num_steps=2, max_valid_actions=3, check_gymnasium=False
                )
            )
        else:
            cases.append(_checker_case(env_id))
    return cases


def _shares_the_jvm(env_id: str) -> bool:
    """Whether an id's check plays on the module's shared ScienceWorld JVM (every task id but ScienceWorld-v0)."""
    return env_id.startswith("llmgym/ScienceWorld-") and env_id != "llmgym/ScienceWorld-v0"


@pytest.fixture(scope="module")
def _shared_jvm():
    """One ScienceWorld simulator (a JVM) that the task ids' checks load their tasks into in turn."""
    require_extras("llmgym/ScienceWorld-v0")
    owner = gym.make("llmgym/ScienceWorld-v0")
    yield owner.unwrapped.simulator
    owner.close()


@pytest.mark.parametrize(("env_id", "make_kwargs", "check_kwargs"), _checker_cases())
def test_every_registered_env_passes_check_text_env(env_id, make_kwargs, check_kwargs, request):
    require_extras(env_id)
    if _shares_the_jvm(env_id):
        make_kwargs = {**make_kwargs, "simulator": request.getfixturevalue("_shared_jvm")}
    check_text_env(gym.make(env_id, **make_kwargs), **check_kwargs)


def test_the_checker_cases_cover_every_registered_id():
    checked = {case.values[0] for case in _checker_cases()}
    assert checked == {env_id for env_id in gym.registry if env_id.startswith("llmgym/")}


class _ManyWords(EchoWordEnv):
    """An env with more valid actions than an error message lists in full."""

    stepped: list = []

    def __init__(self, message: str) -> None:
        super().__init__([f"word{i}" for i in range(LISTED_IN_FULL + 30)])
        self.message = message

    def step(self, action):
        type(self).stepped.append(action)
        return super().step(action)

    def invalid_action(self, action):
        return InvalidActionError(self.message.format(n=len(self.action_names)))


def test_check_text_env_accepts_a_bounded_error_that_counts_the_valid_actions_and_names_the_list():
    _ManyWords.stepped = []
    env = _ManyWords("action not valid here ({n} valid actions); pick one of info['valid_actions'].")
    check_text_env(env, check_gymnasium=False, num_steps=0, max_valid_actions=7)
    assert len([a for a in _ManyWords.stepped if isinstance(a, str) and a.startswith("word")]) == 7


def test_check_text_env_rejects_an_error_that_neither_lists_nor_counts_the_valid_actions():
    with pytest.raises(AssertionError, match="neither lists the 80 valid actions"):
        check_text_env(_ManyWords("not a valid action"), check_gymnasium=False, num_steps=0)
    few = EchoWordEnv(["apple", "banana"])
    few.invalid_action = lambda action: InvalidActionError(
        "not valid (2 valid actions): info['valid_actions']"
    )
    with pytest.raises(AssertionError, match=r"does not list the valid actions \['apple', 'banana'\]"):
        check_text_env(few, check_gymnasium=False, num_steps=0)


def test_list_envs_has_one_line_descriptions():
    assert len(ENV_IDS) == len(set(ENV_IDS))
    for env_id, description in list_envs():
        assert env_id.startswith("llmgym/") and env_id.endswith("-v0")
        assert description and "\n" not in description


def test_registration_is_idempotent_and_both_make_forms_work():
    register_envs()
    register_envs()
    assert gym.make("llmgym/EchoWord-v0").unwrapped.__class__.__name__ == "EchoWordEnv"
    assert gym.make("llmgym:llmgym/EchoWord-v0").unwrapped.__class__.__name__ == "EchoWordEnv"


def test_registration_table_matches_babyai_module():
    assert tuple(_BABYAI_LEVELS) == babyai_text.LEVELS
    assert _GLAM_TRAIN == babyai_text.GLAM_TRAIN_LEVELS


def test_import_llmgym_registers_without_heavy_imports():
    code = (
        "import sys, gymnasium as gym, llmgym; "
        "assert 'llmgym/BabyAI-Text-GoToLocal-v0' in gym.registry; "
        "assert 'minigrid' not in sys.modules and 'torch' not in sys.modules, "
        "[m for m in ('minigrid', 'torch') if m in sys.modules]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_text_space_admits_prose():
    space = TextSpace(32)
    assert "Go to the red ball, now!\n" in space
    assert "" in space
    assert "x" * 33 not in space
    assert "caf\u00e9" not in space
    assert "caf\u00e9" in TextSpace(32, strict=False)
    assert 3 not in space
    assert space.sample() in space


def test_observation_text():
    assert observation_text("hello") == "hello"
    assert observation_text({"text": "hi", "mission": "m"}) == "hi"
    with pytest.raises(InputError, match="text observation"):
        observation_text({"mission": "m"})


def test_invalid_action_lists_valid_actions():
    env = gym.make("llmgym/Countdown-v0")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError) as info:
        env.step("jump")
    assert "'jump'" in str(info.value) and "'left'" in str(info.value) and "'right'" in str(info.value)
    with pytest.raises(ValueError):
        env.step(7)
    with pytest.raises(InvalidActionError):
        env.step(True)
    obs, *_ = env.step("  LEFT ")  # case and blanks do not matter
    assert isinstance(obs, str)


def test_an_int_action_is_an_int_or_numpy_int_in_range_never_a_bool():
    assert [int_action(a, 3) for a in (0, 2, np.int64(1), np.uint8(2))] == [0, 2, 1, 2]
    assert [int_action(a, 3) for a in (3, -1, True, False, 1.0, "1", None)] == [None] * 7
    assert is_int(np.int32(5)) and not is_int(np.bool_(True)) and not is_int(True)
    env = EchoWordEnv(words=("a", "b"))
    env.reset(seed=0)
    assert env.parse_action(np.int64(1)) == 1
    with pytest.raises(InvalidActionError):
        env.parse_action(False)


def test_check_text_env_catches_nondeterminism():
    from llmgym.envs.synthetic import EchoWordEnv

    class Flaky(EchoWordEnv):
        calls = 0

        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=None if seed is None else seed + Flaky.calls)
            Flaky.calls += 1
            return obs, info

    with pytest.raises(AssertionError, match="not deterministic"):
        check_text_env(Flaky(), check_gymnasium=False)


@pytest.mark.parametrize("env_id", ["llmgym/EchoWord-v0", "llmgym/Countdown-v0"])
def test_a_made_env_refuses_to_step_before_reset_and_after_its_episode_ended(env_id):
    env = gym.make(env_id)
    with pytest.raises(InputError, match=rf"step\(\) called before reset\(\): '{env_id}' must be reset"):
        env.step(0)
    env.reset(seed=0)
    terminated = False
    while not terminated:
        *_, terminated, _, _ = env.step(0)
    with pytest.raises(
        InputError, match=r"after the episode ended \(terminated=True\).*Fix: call env\.reset\(\)"
    ):
        env.step(0)
    env.reset()
    env.step(0)


def test_a_truncated_episode_has_ended_too():
    env = gym.make("llmgym/ConstantReward-v0", max_episode_steps=2)
    env.reset(seed=0)
    assert not env.step(0)[3] and env.step(0)[3]
    with pytest.raises(InputError, match=r"truncated=True"):
        env.step(0)


def test_an_env_that_always_needs_an_extra_names_it(monkeypatch):
    from llmgym.envs import registration
    from llmgym.envs.registration import EnvEntry, EnvExtra, check_env_id, extras_note
    from llmgym.errors import MissingDependencyError

    entry = EnvEntry(
        "llmgym/EchoWord-v0",
        "llmgym.envs.synthetic:EchoWordEnv",
        "test double",
        extras=(
            EnvExtra("llmgym_no_such_module", "suite"),
            EnvExtra("sacrebleu", "metrics", "reward", ("bleu",)),
        ),
    )
    assert (
        extras_note(entry)
        == "needs pip install 'llmgym[suite]'; pip install 'llmgym[metrics]' for reward=bleu"
    )
    monkeypatch.setattr(registration, "ENV_SPECS", (entry,))
    with pytest.raises(MissingDependencyError, match=r"llmgym/EchoWord-v0.*pip install 'llmgym\[suite\]'"):
        check_env_id("llmgym/EchoWord-v0")
