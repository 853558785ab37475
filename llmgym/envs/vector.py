"""Vectorised text envs: N envs stepped together into batched prompts and candidates.

:class:`TextVectorEnv` returns Python lists of observations and infos (text does not batch into
arrays) and NumPy arrays of rewards and flags. It handles autoreset itself with SAME_STEP
semantics, so no LLM call is spent on a reset step: when episode ``i`` ends, ``observations[i]``
is already the first observation of the next episode, and ``infos[i]`` (the new episode's info)
also holds ``"final_observation"``, ``"final_info"`` and ``"episode"`` =
``{"return", "length", "success"}`` (``success`` is ``None`` where the env does not define it; the
return is the task's, without the ``info["shaping_reward"]`` parts of the step rewards).

``"sync"`` mode steps the envs in this process; ``"async"`` mode spreads them over worker
processes (contiguous chunks, one pipe each, no shared memory) running the very same per-env code,
so both modes give identical trajectories under the same seeds. Env ``i`` is seeded with
``seed + i``.

Actions are checked before any env steps: if one env of a process rejects its action with
:class:`~llmgym.errors.InvalidActionError`, no env of that process steps (sync mode: none at all).
In async mode other workers may have stepped already, and any other error of an env may come after
other envs stepped; the vector env then requires a :meth:`TextVectorEnv.reset` before the next step,
and the error of a step before it names the failure.

Rewards are checked as they leave each env (:mod:`llmgym.envs.reward_checks`): a reward that is not
a finite number of magnitude at most ``1e9`` is an :class:`~llmgym.errors.InputError` naming the
env, the value and the step, unless ``reward_clip`` asks for clipping. Exact duplicates in an env's
``info["valid_actions"]`` are merged, first occurrence kept (a warning names them once per env), so a
scoring agent never gives one action the probability of several candidates.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from llmgym.envs.core import TextEnv, is_int, observation_text
from llmgym.envs.registration import check_env_id, register_envs
from llmgym.envs.reward_checks import check_reward, check_reward_clip, reward_number
from llmgym.errors import BackendError, ConfigError, InputError, InvalidActionError
from llmgym.lifetime import exit_with_parent, watch_parent

__all__ = ["TextVectorEnv", "make_vec", "PromptBuilder", "worker_start_method"]

#: ``builder(observation, info) -> prompt``.
PromptBuilder = Callable[[Any, dict[str, Any]], str]

_StepResult = tuple[Any, float, bool, bool, dict[str, Any]]


class _Slot:
    """One env with SAME_STEP autoreset and episode statistics (the code both modes run).

    Rewards are checked as they come out of the env (:func:`~llmgym.envs.reward_checks.check_reward`),
    and exact duplicates in ``info["valid_actions"]`` are merged (first occurrence kept, with a
    warning), so that no action gets the probability mass of several candidates.
    """

    def __init__(self, env: gym.Env, index: int, reward_clip: float | None) -> None:
        self.env = env
        unwrapped = env.unwrapped
        self.text_env = unwrapped if isinstance(unwrapped, TextEnv) else None
        spec = unwrapped.spec
        self.name = (
            f"env {index} ({spec.id!r})" if spec is not None else f"env {index} ({type(unwrapped).__name__})"
        )
        self.reward_clip = reward_clip
        self.episode_return = 0.0
        self.episode_length = 0
        self.total_steps = 0
        self._warned: set[str] = set()

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
        self.episode_return, self.episode_length = 0.0, 0
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, self._dedupe_actions(info)

    def check(self, action: Any) -> None:
        if self.text_env is not None:
            self.text_env.parse_action(action)

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"{message} (reported once per env)", RuntimeWarning, stacklevel=3)

    def _dedupe_actions(self, info: dict[str, Any]) -> dict[str, Any]:
        valid = info.get("valid_actions")
        if not isinstance(valid, list) or len(set(valid)) == len(valid):
            return info
        unique = list(dict.fromkeys(valid))
        repeated = sorted({a for a in valid if valid.count(a) > 1})
        self._warn_once(
            "duplicates",
            f"{self.name} lists the valid actions {repeated!r:.200} more than once; each is kept once",
        )
        return {**info, "valid_actions": unique}

    def _checked_reward(self, reward: Any, info: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        step = f"step {self.total_steps} (step {self.episode_length} of its episode)"
        original = reward_number(reward, self.name, step)
        value = check_reward(original, source=self.name, step=step, reward_clip=self.reward_clip, warn=False)
        if value == original:
            return value, info
        self._warn_once("clip", f"reward={original!r} from {self.name} at {step} clipped to {value!r}")
        return value, {**info, "reward_clipped_from": original}

    def step(self, action: Any) -> _StepResult:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total_steps += 1
        self.episode_length += 1
        reward, info = self._checked_reward(reward, self._dedupe_actions(info))
        self.episode_return += reward - float(info.get("shaping_reward", 0.0))
        if terminated or truncated:
            episode = {
                "return": self.episode_return,
                "length": self.episode_length,
                "success": info.get("success"),
            }
            final = {"final_observation": obs, "final_info": info, "episode": episode}
            obs, new_info = self.reset(None, None)
            info = {**new_info, **final}
        return obs, reward, bool(terminated), bool(truncated), info


def _step_slots(slots: Sequence[_Slot], actions: Sequence[Any], offset: int) -> list[_StepResult]:
    for i, (slot, action) in enumerate(zip(slots, actions)):
        try:
            slot.check(action)
        except InvalidActionError as exc:
            raise InvalidActionError(f"env {offset + i}: {exc}") from None
    return [slot.step(action) for slot, action in zip(slots, actions)]


def _run_command(slots: list[_Slot], offset: int, command: str, data: Any) -> Any:
    if command == "reset":
        seeds, options = data
        return [slot.reset(seed, options) for slot, seed in zip(slots, seeds)]
    if command == "step":
        return _step_slots(slots, data, offset)
    if command == "get_attr":
        return [getattr(slot.env.unwrapped, data) for slot in slots]
    if command == "spaces":
        return slots[0].env.observation_space, slots[0].env.action_space
    raise InputError(f"unknown vector env command={command!r}")


def _worker(
    conn: Connection,
    payload: bytes,
    offset: int,
    reward_clip: float | None,
    parent: tuple[int | None, bool],
    inherited: list[Connection],
) -> None:
    """Worker process: build its envs, then answer commands until "close".

    It never outlives its parent (see :func:`_follow_parent`, called with ``parent``);
    ``inherited`` are the parent's ends of the pipes, which a forked worker holds copies of and
    closes, so that it sees an EOF on its pipe when the parent closes or loses its end.
    """
    for end in inherited:
        end.close()
    # Ctrl-C in a terminal reaches the whole process group: the training process decides what it stops
    # (it writes a checkpoint first), and the worker ends when that process closes it or dies.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _follow_parent(*parent)
    slots: list[_Slot] = []
    try:
        slots = [_Slot(fn(), offset + i, reward_clip) for i, fn in enumerate(cloudpickle.loads(payload))]
        conn.send(("ok", None))
        while True:
            command, data = conn.recv()
            if command == "close":
                break
            try:
                conn.send(("ok", _run_command(slots, offset, command, data)))
            except Exception as exc:  # sent back and raised in the parent
                _send_error(conn, exc)
    except Exception as exc:
        _send_error(conn, exc)
    finally:
        for slot in slots:
            slot.env.close()
        conn.close()


def _follow_parent(parent_pid: int | None, death_signal: bool) -> None:
    """End this worker when its parent dies, however it dies (even ``SIGKILL``).

    A thread watches the parent's pid; with ``death_signal`` the kernel also kills the worker at
    once (it sends that signal when the *thread* that started the worker ends, so only a parent
    that started it from its main thread, or a forkserver, asks for it). The worker's own children
    end with it (ScienceWorld's JVM exits at the EOF of its stdin).

    Args:
        parent_pid: The pid of the process that started the worker (``None``: this process's
            parent now, e.g. a forkserver).
        death_signal: Whether to ask for the kernel's ``SIGKILL`` on the parent's death.
    """
    parent = os.getppid() if parent_pid is None else parent_pid
    if death_signal:
        exit_with_parent(parent, signal.SIGKILL)
    watch_parent(parent)


def _send_error(conn: Connection, exc: Exception) -> None:
    trace = traceback.format_exc()
    try:
        conn.send(("error", (exc, trace)))
    except Exception:  # the exception itself does not pickle
        conn.send(("error", (BackendError(f"{type(exc).__name__}: {exc}"), trace)))


class _RemoteTraceback(Exception):
    def __init__(self, trace: str) -> None:
        super().__init__(trace)

    def __str__(self) -> str:
        return f"\n\nTraceback in the env worker process:\n{self.args[0]}"


class _SyncBackend:
    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], reward_clip: float | None) -> None:
        self.slots = [_Slot(fn(), i, reward_clip) for i, fn in enumerate(env_fns)]

    def run(self, command: str, per_env: Sequence[Any] | None, shared: Any = None) -> list[Any]:
        if command == "reset":
            return _run_command(self.slots, 0, command, (per_env, shared))
        if command == "spaces":
            return [_run_command(self.slots, 0, command, None)]
        return _run_command(self.slots, 0, command, per_env if per_env is not None else shared)

    def close(self) -> None:
        for slot in self.slots:
            slot.env.close()


def worker_start_method(context: str | None) -> str | None:
    """The start method of async env workers: ``context`` when given, else ``"spawn"`` after CUDA is initialised.

    A process forked from one that has initialised CUDA cannot use CUDA and may deadlock on its
    locks; the trainer loads the LLM (on the GPU) before it starts the env workers. Otherwise
    ``None``: the platform's default. Torch is not imported here for the check (envs do not need it).
    """
    if context is not None:
        return context
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "spawn"
    return None


class _AsyncBackend:
    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int,
        context: str | None,
        reward_clip: float | None,
    ) -> None:
        ctx: Any = mp.get_context(worker_start_method(context))
        bounds = np.linspace(0, len(env_fns), num_workers + 1).round().astype(int).tolist()
        self.chunks = [(start, stop) for start, stop in zip(bounds[:-1], bounds[1:]) if stop > start]
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        method = ctx.get_start_method()
        # A forkserver starts the workers from its one thread; fork and spawn from this thread.
        parent = (
            (None, True)
            if method == "forkserver"
            else (os.getpid(), threading.current_thread() is threading.main_thread())
        )
        for start, stop in self.chunks:
            parent_end, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker,
                args=(
                    child,
                    cloudpickle.dumps(list(env_fns[start:stop])),
                    start,
                    reward_clip,
                    parent,
                    [*self.conns, parent_end] if method == "fork" else [],
                ),
                daemon=True,
            )
            proc.start()
            child.close()
            self.conns.append(parent_end)
            self.processes.append(proc)
        self.broken = False
        self._gather(list(range(len(self.conns))))

    def _gather(self, workers: list[int]) -> list[Any]:
        results, error = [], None
        for k in workers:
            try:
                status, value = self.conns[k].recv()
            except (EOFError, OSError) as exc:
                self.broken = True
                raise BackendError(
                    f"env worker {k} (pid {self.processes[k].pid}) exited unexpectedly; "
                    "the vector env is unusable. Fix: check the env for crashes and build a new vector env."
                ) from exc
            if status == "error" and error is None:
                error = value
            results.append(value)
        if error is not None:
            remote, trace = error
            raise remote from _RemoteTraceback(trace)
        return results

    def run(self, command: str, per_env: Sequence[Any] | None, shared: Any = None) -> list[Any]:
        if command == "spaces":
            self.conns[0].send(("spaces", None))
            return self._gather([0])
        for conn, (start, stop) in zip(self.conns, self.chunks):
            chunk = per_env[start:stop] if per_env is not None else shared
            conn.send((command, (chunk, shared) if command == "reset" else chunk))
        return [item for result in self._gather(list(range(len(self.conns)))) for item in result]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.processes:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        for conn in self.conns:
            conn.close()


class TextVectorEnv:
    """N text envs stepped together, with SAME_STEP autoreset and batched prompts.

    See the module docstring for the autoreset, seeding and invalid-action contracts.

    Args:
        env_fns: One callable per env, each returning a new env.
        vectorization_mode: ``"sync"`` (this process) or ``"async"`` (worker processes).
        seed: Seed of the first :meth:`reset` when it is called without one (env ``i`` gets
            ``seed + i``).
        prompt_builder: ``builder(observation, info) -> str`` giving :attr:`prompts`; default
            :func:`~llmgym.envs.core.observation_text`. Runs in this process.
        num_workers: Worker processes in async mode (default ``min(num_envs, os.cpu_count())``).
        context: Multiprocessing start method of the workers (default: Python's).
        reward_clip: ``None``: a reward that is not finite or exceeds
            :data:`~llmgym.envs.reward_checks.MAX_ABS_REWARD` raises an :class:`~llmgym.errors.InputError`
            naming the env, the reward and the step; a bound: such rewards are clipped into
            ``[-reward_clip, reward_clip]`` (``nan`` to 0), with a warning once per env and the
            original value in the step's ``info["reward_clipped_from"]``.

    Raises:
        ConfigError: On an unknown mode, a bad worker count, a seed that is not an int or a bad
            ``reward_clip``.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        vectorization_mode: str = "sync",
        *,
        seed: int | None = None,
        prompt_builder: PromptBuilder | None = None,
        num_workers: int | None = None,
        context: str | None = None,
        reward_clip: float | None = None,
    ) -> None:
        reward_clip = check_reward_clip(reward_clip)
        if not env_fns:
            raise ConfigError("env_fns is empty; expected at least one env factory.")
        if seed is not None and not is_int(seed):
            raise ConfigError(
                f"seed={seed!r:.100} is invalid; expected an int or None. Fix: pass e.g. seed=0."
            )
        self.num_envs = len(env_fns)
        self.vectorization_mode = vectorization_mode
        self.prompt_builder = prompt_builder
        self._seed = seed
        self._backend: _SyncBackend | _AsyncBackend
        if vectorization_mode == "sync":
            self._backend = _SyncBackend(env_fns, reward_clip)
        elif vectorization_mode == "async":
            workers = min(self.num_envs, os.cpu_count() or 1) if num_workers is None else num_workers
            if not isinstance(workers, int) or workers < 1:
                raise ConfigError(f"num_workers={num_workers!r} is invalid; expected an int >= 1 or None.")
            self._backend = _AsyncBackend(env_fns, min(workers, self.num_envs), context, reward_clip)
        else:
            raise ConfigError(
                f"vectorization_mode={vectorization_mode!r} is invalid; expected 'sync' or 'async'."
            )
        (self.single_observation_space, self.single_action_space) = self._backend.run("spaces", None)[0]
        self._reset_reason: str | None = "step() called before reset()"
        self._closed = False
        self.observations: list[Any] = []
        self.infos: list[dict[str, Any]] = []

    @property
    def prompts(self) -> list[str]:
        """Per env, the current observation as text (``prompt_builder``'s, else its text); built when read.

        Training renders its prompts in the agent (its history and template), so nothing is built per step.
        """
        build = self.prompt_builder
        if build is not None:
            return [build(o, i) for o, i in zip(self.observations, self.infos)]
        return [observation_text(o) for o in self.observations]

    @property
    def candidates(self) -> list[list[str] | None]:
        """Per env, the valid actions of the current step (``None`` where the set is not finite)."""
        return [info.get("valid_actions") for info in self.infos]

    def _record(self, observations: list[Any], infos: list[dict[str, Any]]) -> None:
        self.observations, self.infos = observations, infos

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Reset every env.

        Args:
            seed: ``s`` seeds env ``i`` with ``s + i``; a list gives one seed per env; ``None``
                uses the constructor's ``seed`` on the first reset, and no seed afterwards.
            options: Passed to every env's ``reset``.

        Returns:
            ``(observations, infos)``, one entry per env.

        Raises:
            InputError: If the seed is neither an int, ``None`` nor a list of one int or ``None``
                per env.
        """
        self._check_open()
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        results = self._backend.run("reset", self._seeds(seed), options)
        observations = [obs for obs, _ in results]
        infos = [info for _, info in results]
        self._reset_reason = None
        self._record(observations, infos)
        return observations, infos

    def _seeds(self, seed: Any) -> list[int | None]:
        """One seed per env from ``reset``'s ``seed`` argument."""
        if seed is None:
            return [None] * self.num_envs
        if is_int(seed):
            return [int(seed) + i for i in range(self.num_envs)]
        if isinstance(seed, (str, bytes)) or not isinstance(seed, Sequence):
            raise InputError(
                f"seed={seed!r:.100} is invalid; expected an int, None or a list of {self.num_envs} ints or Nones."
            )
        if len(seed) != self.num_envs:
            raise InputError(f"seed has {len(seed)} entries; expected one per env ({self.num_envs}).")
        bad = [s for s in seed if s is not None and not is_int(s)]
        if bad:
            raise InputError(
                f"seed={list(seed)!r:.200} holds {bad[0]!r:.50}; expected an int or None per env."
            )
        return [None if s is None else int(s) for s in seed]

    def step(
        self, actions: Sequence[Any]
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every env with its action, autoresetting finished episodes (SAME_STEP).

        Args:
            actions: One action per env (a string or, for Discrete action spaces, an index).

        Returns:
            ``(observations, rewards float32[N], terminated bool[N], truncated bool[N], infos)``.

        Raises:
            InputError: If ``actions`` is not a sequence of one action per env, or :meth:`reset` is
                needed (before the first one, or after a step that failed part way).
            InvalidActionError: If an env rejects its action (the message names the env).
        """
        self._check_open()
        if self._reset_reason is not None:
            raise InputError(f"{self._reset_reason}; expected reset() first. Fix: call envs.reset().")
        if (
            isinstance(actions, (str, bytes))
            or not hasattr(actions, "__len__")
            or len(actions) != self.num_envs
        ):
            raise InputError(
                f"actions={actions!r:.200} is invalid; expected a sequence of {self.num_envs} actions, one per env."
            )
        try:
            results = self._backend.run("step", list(actions))
        except Exception as exc:
            if self._partly_stepped(exc):
                cause = f"{type(exc).__name__}: {exc!s:.300}"
                self._reset_reason = f"the previous step failed ({cause}), maybe after some envs had stepped"
            raise
        observations = [r[0] for r in results]
        rewards = np.fromiter((r[1] for r in results), dtype=np.float32, count=self.num_envs)
        terminated = np.fromiter((r[2] for r in results), dtype=bool, count=self.num_envs)
        truncated = np.fromiter((r[3] for r in results), dtype=bool, count=self.num_envs)
        infos = [r[4] for r in results]
        self._record(observations, infos)
        return observations, rewards, terminated, truncated, infos

    def _partly_stepped(self, exc: Exception) -> bool:
        """Whether a failed step may have stepped some envs but not others.

        An invalid action is caught before any env of its process steps, so it leaves a sync vector
        env (and a single worker) as it was; any other error, or several workers, may not.
        """
        several_workers = isinstance(self._backend, _AsyncBackend) and len(self._backend.conns) > 1
        return several_workers or not isinstance(exc, InvalidActionError)

    def get_attr(self, name: str) -> list[Any]:
        """Return attribute ``name`` of every (unwrapped) env, e.g. ``"instructions"``."""
        self._check_open()
        return self._backend.run("get_attr", None, name)

    def _check_open(self) -> None:
        if self._closed:
            raise InputError("this TextVectorEnv is closed. Fix: build a new one with make_vec.")
        if isinstance(self._backend, _AsyncBackend) and self._backend.broken:
            raise BackendError(
                "an env worker of this TextVectorEnv died. Fix: build a new one with make_vec."
            )

    def close(self) -> None:
        """Close every env (and stop the workers); calling it again does nothing."""
        if not self._closed:
            self._closed = True
            self._backend.close()

    def __enter__(self) -> TextVectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TextVectorEnv(num_envs={self.num_envs}, mode={self.vectorization_mode!r})"


def _make_registered(env_id: str, max_episode_steps: int | None, kwargs: Mapping[str, Any]) -> gym.Env:
    register_envs()
    return gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)


def _with_time_limit(fn: Callable[[], gym.Env], max_episode_steps: int) -> gym.Env:
    return TimeLimit(fn(), max_episode_steps=max_episode_steps)


def make_vec(
    env_id: str | Sequence[Callable[[], gym.Env]],
    num_envs: int | None = None,
    vectorization_mode: str = "sync",
    seed: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_episode_steps: int | None = None,
    *,
    prompt_builder: PromptBuilder | None = None,
    num_workers: int | None = None,
    context: str | None = None,
    reward_clip: float | None = None,
) -> TextVectorEnv:
    """Build a :class:`TextVectorEnv`.

    Args:
        env_id: A registered id (``"llmgym/BabyAI-Text-GoToLocal-v0"``) or one env factory per env.
        num_envs: Number of envs (required with an id; with factories, ``None`` or their count).
        vectorization_mode: ``"sync"`` or ``"async"``.
        seed: Seed of the first reset (env ``i`` gets ``seed + i``).
        env_kwargs: Constructor arguments of the env (with an id only).
        max_episode_steps: Time limit of each env's episodes.
        prompt_builder: ``builder(observation, info) -> str`` for :attr:`TextVectorEnv.prompts`.
        num_workers: Worker processes in async mode.
        context: Multiprocessing start method in async mode (``None``: the platform's, or
            ``"spawn"`` once this process has initialised CUDA, see :func:`worker_start_method`).
        reward_clip: ``None`` (bad rewards are errors) or the bound rewards are clipped to (see
            :class:`TextVectorEnv`).

    Returns:
        The vector env (call :meth:`TextVectorEnv.reset` first).

    Raises:
        ConfigError: On an unknown id, a bad ``num_envs``, ``max_episode_steps`` or ``seed``, or
            ``env_kwargs`` given with factories.
    """
    if max_episode_steps is not None and (not is_int(max_episode_steps) or max_episode_steps < 1):
        raise ConfigError(
            f"max_episode_steps={max_episode_steps!r:.100} is invalid; expected an int >= 1, or None to keep "
            "the env's own time limit."
        )
    if isinstance(env_id, str):
        if not is_int(num_envs) or num_envs < 1:
            raise ConfigError(f"num_envs={num_envs!r} is invalid; expected an int >= 1 with an env id.")
        check_env_id(env_id)
        factory = functools.partial(_make_registered, env_id, max_episode_steps, dict(env_kwargs or {}))
        env_fns: list[Callable[[], gym.Env]] = [factory] * num_envs
    else:
        env_fns = list(env_id)
        if num_envs is not None and num_envs != len(env_fns):
            raise ConfigError(
                f"num_envs={num_envs!r} does not match the {len(env_fns)} env factories given; "
                "expected None or the same count."
            )
        if env_kwargs:
            raise ConfigError("env_kwargs is only used with an env id; bind arguments in your env factories.")
        if max_episode_steps is not None:
            env_fns = [functools.partial(_with_time_limit, fn, max_episode_steps) for fn in env_fns]
    return TextVectorEnv(
        env_fns,
        vectorization_mode,
        seed=seed,
        prompt_builder=prompt_builder,
        num_workers=num_workers,
        context=context,
        reward_clip=reward_clip,
    )
