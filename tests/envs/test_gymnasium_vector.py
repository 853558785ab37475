"""Gymnasium's own vector envs (SyncVectorEnv, AsyncVectorEnv with shared memory) on llmgym's envs."""

from __future__ import annotations

import copy
import pickle
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Dict, Discrete, Text
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from llmgym.envs import TextSpace
from llmgym.envs.shared_memory import SharedTextView
from llmgym.errors import InputError
from tests.envs._registered import LLMGYM_IDS, require_extras

SEED, NUM_STEPS = 3, 6
TEXTGEN_ACTIONS = ("a great day", "so bad", "")


def _actions(env: gym.Env, num_envs: int) -> list[list]:
    """``NUM_STEPS`` steps of one action per env, drawn with a fixed seed."""
    rng = np.random.default_rng(SEED)
    space = env.action_space
    if isinstance(space, Discrete):
        return [[int(a) for a in rng.integers(space.n, size=num_envs)] for _ in range(NUM_STEPS)]
    if env.reset(seed=SEED)[1].get(
        "valid_actions"
    ):  # commands that change with the state: a fraction of their list
        return [[float(u) for u in rng.random(size=num_envs)] for _ in range(NUM_STEPS)]
    return [
        [TEXTGEN_ACTIONS[int(i)] for i in rng.integers(len(TEXTGEN_ACTIONS), size=num_envs)]
        for _ in range(NUM_STEPS)
    ]


def _resolve(action, valid):
    """The action itself, or for a fraction the valid action at that place of the current list.

    An episode's last info may list no action (a finished TextArena game): the vector env's next
    step is then its autoreset, which ignores the action.
    """
    if not isinstance(action, float):
        return action
    return valid[int(action * len(valid))] if valid else ""


def _single_trace(env_id: str, seed: int, actions: list) -> list:
    """What one env gives for ``actions``, with Gymnasium's default NEXT_STEP autoreset."""
    env = gym.make(env_id)
    obs, info = env.reset(seed=seed)
    trace, done = [_plain(obs)], False
    for action in actions:
        if done:
            (obs, info), reward, terminated, truncated = env.reset(), 0.0, False, False
        else:
            obs, reward, terminated, truncated, info = env.step(_resolve(action, info.get("valid_actions")))
        done = terminated or truncated
        trace.append((_plain(obs), float(reward), bool(terminated), bool(truncated)))
    env.close()
    return trace


def _plain(obs):
    return dict(obs) if isinstance(obs, dict) else obs


def _unbatch(batch, i: int):
    if isinstance(batch, dict):
        return {key: _unbatch(value, i) for key, value in batch.items()}
    return batch[i]


def _text_fields(batch) -> list:
    if isinstance(batch, dict):
        return [field for value in batch.values() for field in _text_fields(value)]
    return [batch] if isinstance(batch, tuple) else []


def _vector_traces(envs: gym.vector.VectorEnv, actions: list) -> list[list]:
    obs, infos = envs.reset(seed=SEED)
    traces = [[_unbatch(obs, i)] for i in range(envs.num_envs)]
    for step_actions in actions:
        valid = infos.get("valid_actions", [None] * envs.num_envs)
        obs, rewards, terminated, truncated, infos = envs.step(
            [_resolve(a, v) for a, v in zip(step_actions, valid)]
        )
        for field in _text_fields(obs):
            assert all(isinstance(text, str) for text in field)
        for i, trace in enumerate(traces):
            trace.append((_unbatch(obs, i), float(rewards[i]), bool(terminated[i]), bool(truncated[i])))
    envs.close()
    return traces


VECTOR_ENVS = {
    "make_vec sync": lambda env_id, n: gym.make_vec(env_id, num_envs=n, vectorization_mode="sync"),
    "make_vec async": lambda env_id, n: gym.make_vec(env_id, num_envs=n, vectorization_mode="async"),
    "SyncVectorEnv": lambda env_id, n: SyncVectorEnv([partial(gym.make, env_id)] * n),
    "AsyncVectorEnv shared": lambda env_id, n: AsyncVectorEnv(
        [partial(gym.make, env_id)] * n, shared_memory=True
    ),
    "AsyncVectorEnv pipes": lambda env_id, n: AsyncVectorEnv(
        [partial(gym.make, env_id)] * n, shared_memory=False
    ),
}


@pytest.mark.parametrize("env_id", LLMGYM_IDS)
@pytest.mark.parametrize("vector_env", list(VECTOR_ENVS))
def test_gymnasium_vector_envs_return_what_single_envs_return(env_id, vector_env):
    require_extras(env_id)
    actions = _actions(gym.make(env_id), 2)
    expected = [_single_trace(env_id, SEED + i, [a[i] for a in actions]) for i in range(2)]
    envs = VECTOR_ENVS[vector_env](env_id, 2)
    assert isinstance(envs, AsyncVectorEnv if "async" in vector_env.lower() else SyncVectorEnv)
    assert _vector_traces(envs, actions) == expected


def test_async_vector_env_with_spawned_workers_returns_real_text():
    expected = SyncVectorEnv([partial(gym.make, "llmgym/EchoWord-v0")] * 2).reset(seed=SEED)[0]
    # A spawned worker starts without llmgym imported: "llmgym:" imports it before the id is looked up
    # (make_vec passes the spec itself, whose entry point imports llmgym).
    fns = [partial(gym.make, "llmgym:llmgym/EchoWord-v0")] * 2
    for envs in (
        AsyncVectorEnv(fns, shared_memory=True, context="spawn"),
        gym.make_vec("llmgym/EchoWord-v0", 2, vectorization_mode="async", vector_kwargs={"context": "spawn"}),
    ):
        try:
            assert envs.reset(seed=SEED)[0] == expected
        finally:
            envs.close()


class _Shows(gym.Env):
    """Shows ``texts`` one per step in a ``TextSpace(8, strict=False)``; any action."""

    def __init__(self, texts):
        self.texts = texts
        self.observation_space = Dict({"text": TextSpace(8, strict=False), "step": Discrete(len(texts))})
        self.action_space = Discrete(1)
        self._t = 0

    def _obs(self):
        return {"text": self.texts[self._t], "step": self._t}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        return self._obs(), 0.0, self._t == len(self.texts) - 1, False, {}


# Empty, non-ASCII, astral characters exactly at max_length, a lone surrogate, then shorter again.
TEXTS = ("", "caf\u00e9 \u2615", "\U0001f984" * 8, "a\ud800b", "x" * 8, "ok")


def test_async_shared_memory_passes_unicode_and_max_length_text_and_follows_each_step():
    envs = AsyncVectorEnv([partial(_Shows, TEXTS)] * 2, shared_memory=True, copy=False)
    try:
        obs, _ = envs.reset(seed=0)
        view = obs["text"]
        assert isinstance(view, SharedTextView) and view == ("", "")
        seen = [copy.deepcopy(view)]
        for _ in TEXTS[1:]:
            obs, *_ = envs.step(np.zeros(2, dtype=np.int64))
            assert obs["text"] is view  # copy=False: the same view, which reads each step's text
            seen.append(copy.deepcopy(view))
        assert seen == [(text, text) for text in TEXTS]
        assert all(type(s) is tuple for s in seen)
    finally:
        envs.close()


@pytest.mark.filterwarnings("ignore::UserWarning")  # AsyncVectorEnv logs the worker's error as warnings
def test_a_text_longer_than_max_length_is_an_error_not_a_truncation():
    envs = AsyncVectorEnv([partial(_Shows, ("fits", "x" * 9))] * 2, shared_memory=True)
    try:
        envs.reset(seed=0)
        with pytest.raises(InputError, match=r"9 characters .* max_length=8.*shared_memory=False"):
            envs.step(np.zeros(2, dtype=np.int64))
    finally:
        envs.close(terminate=True)


def test_shared_text_view_reads_the_buffer_and_copies_as_tuples():
    space = TextSpace(5, strict=False)
    memory = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, memory, n=3)
    assert isinstance(view, SharedTextView) and len(view) == 3 and view == ("", "", "")
    write_to_shared_memory(space, 1, "h\u00e9llo", memory)
    write_to_shared_memory(space, 2, "\U0001f984", memory)
    assert view[1] == "h\u00e9llo" and view[-1] == "\U0001f984" and view[:2] == ("", "h\u00e9llo")
    assert list(view) == ["", "h\u00e9llo", "\U0001f984"] and view != ["", "h\u00e9llo", "\U0001f984"]
    snapshot = copy.copy(view)
    write_to_shared_memory(space, 1, "bye", memory)
    assert snapshot == ("", "h\u00e9llo", "\U0001f984") and view[1] == "bye"
    assert pickle.loads(pickle.dumps(view)) == ("", "bye", "\U0001f984")
    assert repr(view) == "SharedTextView(('', 'bye', '\U0001f984'))"
    with pytest.raises(IndexError):
        view[3]
    with pytest.raises(TypeError):
        hash(view)


def test_writing_what_does_not_fit_is_an_input_error():
    space = TextSpace(4)
    memory = create_shared_memory(space, n=1)
    with pytest.raises(InputError, match=r"5 characters .* max_length=4"):
        write_to_shared_memory(space, 0, "hello", memory)
    with pytest.raises(InputError, match="is a int; expected a str"):
        write_to_shared_memory(space, 0, 3, memory)
    assert read_from_shared_memory(space, memory, n=1) == ("",)


def test_plain_gymnasium_text_spaces_keep_gymnasium_handlers():
    for dispatcher in (create_shared_memory, read_from_shared_memory, write_to_shared_memory):
        assert dispatcher.dispatch(Text).__module__ == "gymnasium.vector.utils.shared_memory"
        assert dispatcher.dispatch(TextSpace).__module__ == "llmgym.envs.shared_memory"
