"""ScienceWorld (Wang et al., 2022): 30 elementary-science tasks in a simulated house, as text envs.

Ids: ``llmgym/ScienceWorld-<Task>-v0``, one per task, ``<Task>`` being the suite's task name in
CamelCase (``ScienceWorld-Boil-v0`` for ``boil``, ``ScienceWorld-FindLivingThing-v0`` for
``find-living-thing``), and ``llmgym/ScienceWorld-v0``, whose ``task`` argument takes the suite's name
(``"boil"`` by default).

- **Variations**: each task has variations (objects, substances, rooms); ``split`` (``"train"``,
  ``"dev"`` or ``"test"``) selects the suite's variation set, and ``reset(seed=s)`` draws one of it
  with the env's seeded RNG (``info["variation"]`` names it).
- **Observation**: a string: on reset the task description, a blank line and the answer to
  ``look around`` (which the suite's reset plays as the first move); after a step the game's answer.
  Trailing blanks are stripped from every line.
- **Actions**: by default one of ``info["valid_actions"]`` (the suite's valid action-object
  combinations in the current state, deduplicated and sorted), matched case- and
  blank-insensitively; anything else raises :class:`~llmgym.errors.InvalidActionError`. With
  ``free_text_actions=True`` any string goes to the game's own parser (which answers e.g. "No known
  action matches that input."), and ``info`` carries no ``"valid_actions"``, which makes a step
  about ten times cheaper. The valid list is a subset of what the parser accepts: the suite's gold
  paths use commands outside it.
- **Reward**: the increments of the suite's score (0..100) divided by 100, so that an episode's
  return is its final score over 100. ``info["score"]`` is the suite's score; ``info["success"]`` is
  ``True`` once the task is completed (score 100). Focusing on a wrong object fails the task: the
  score is -100 and the episode terminates with ``success=False``.
- **Simulator**: each env runs ScienceWorld on its own JVM (Java 11+), started with
  :data:`JAVA_OPTS` so that trajectories are the same across processes; :meth:`close` shuts it down.
  Envs used one after another (e.g. every task in turn) can share one: pass ``simulator=`` the
  :attr:`~ScienceWorldTextEnv.simulator` of another env (or :func:`start_simulator`'s); each reset
  loads its env's task into it, an env whose task another env has loaded since must be reset before
  it steps, and closing an env that did not start its simulator leaves the simulator running.
"""

from __future__ import annotations

import difflib
import importlib
import json
import shutil
import subprocess
import threading
import weakref
from typing import Any

from llmgym.envs._scienceworld_tasks import SCIENCEWORLD_TASKS
from llmgym.envs.core import ANSI_METADATA, TextEnv, TextSpace, normalize_action_text
from llmgym.errors import (
    BackendError,
    ConfigError,
    InputError,
    InvalidActionError,
    MissingDependencyError,
    require,
)

__all__ = ["ALWAYS_VALID", "JAVA_OPTS", "SPLITS", "CommandSpace", "ScienceWorldTextEnv", "start_simulator"]

#: Options of the simulator's JVM. Constant identity hash codes (``hashCode=2``) make the game's
#: hash-ordered collections (the order of objects in its descriptions, of candidates in its
#: parser) independent of the JVM's thread timing, hence the same in every process.
JAVA_OPTS: tuple[str, ...] = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")
#: Commands valid in every state: look, inventory, task description, wait one tick.
ALWAYS_VALID: tuple[str, ...] = ("inventory", "look around", "task", "wait1")
#: The suite's variation sets.
SPLITS: tuple[str, ...] = ("train", "dev", "test")

#: Characters of a rejected action shown in its error, and valid actions shown as the closest.
_SHOWN_CHARS = 200
_SHOWN_CLOSEST = 10

_LAUNCH_LOCK = threading.Lock()
#: (task, split) -> the split's variations; the suite's fixed data, shared by the envs of a process.
_VARIATIONS: dict[tuple[str, str], tuple[int, ...]] = {}
#: simulator -> the mark of the env whose task it holds (set by that env's reset).
_LOADED_BY: weakref.WeakKeyDictionary[Any, object] = weakref.WeakKeyDictionary()


def _preview(action: Any) -> str:
    """The repr of an action, cut to its first ``_SHOWN_CHARS`` characters (saying its length) when longer."""
    if isinstance(action, str) and len(action) > _SHOWN_CHARS:
        return f"{action[:_SHOWN_CHARS]!r}... ({len(action)} characters)"
    return f"{action!r:.{_SHOWN_CHARS}}"


def start_simulator() -> Any:
    """Start a ``scienceworld.ScienceWorldEnv`` on a JVM of its own, launched with :data:`JAVA_OPTS`.

    Returns:
        The simulator, no task loaded yet.

    Raises:
        MissingDependencyError: If scienceworld is not installed, or no ``java`` is on ``PATH``.
        BackendError: If the JVM did not start.
    """
    require("scienceworld", "scienceworld", "ScienceWorld")
    module: Any = importlib.import_module("scienceworld.scienceworld")
    if shutil.which("java") is None:
        raise MissingDependencyError(
            "ScienceWorld runs its simulator on a Java virtual machine, and no `java` executable is on PATH. "
            "Fix: install Java 11 or newer (e.g. `apt-get install openjdk-17-jre-headless`, or "
            "`conda install -c conda-forge openjdk=17`) and put its bin/ folder on PATH."
        )
    # ScienceWorldEnv launches its JVM through its module's launch_gateway and connects with its
    # GatewayParameters / CallbackServerParameters, looked up at call time: for the duration of the
    # call, add our java options and py4j's authentication (a fresh token per JVM), so no other
    # process on this machine can drive the JVM (py4j's gateway can run any Java code) or the
    # Python callback server through their loopback ports.
    names = ("launch_gateway", "GatewayParameters", "CallbackServerParameters")
    originals = {name: getattr(module, name) for name in names}
    token: list[str] = []

    def launch_with_auth(*args: Any, **kwargs: Any) -> Any:
        port, auth_token, *rest = originals["launch_gateway"](
            *args, **{**kwargs, "javaopts": list(JAVA_OPTS), "enable_auth": True}
        )
        token.append(auth_token)
        return (port, *rest) if rest else port

    with _LAUNCH_LOCK:
        module.launch_gateway = launch_with_auth
        module.GatewayParameters = lambda **kw: originals["GatewayParameters"](**kw, auth_token=token[-1])
        module.CallbackServerParameters = lambda **kw: originals["CallbackServerParameters"](
            **kw, auth_token=token[-1]
        )
        try:
            return module.ScienceWorldEnv()
        except ValueError as exc:  # py4j read no port number from the JVM
            raise BackendError(
                f"the ScienceWorld JVM did not start (java options {list(JAVA_OPTS)}). Fix: check that "
                "`java -version` runs and reports version 11 or newer."
            ) from exc
        finally:
            for name, original in originals.items():
                setattr(module, name, original)


class CommandSpace(TextSpace):
    """The action space of a ScienceWorld env: any string, sampled among :data:`ALWAYS_VALID`.

    The valid actions change with the state, while gymnasium's checker (and code written for it)
    steps ``action_space.sample()`` in any state: samples are the commands valid in every state.
    A random agent over the current valid actions draws from ``info["valid_actions"]`` instead.

    Args:
        max_length: Longest admissible action string.
    """

    def __init__(self, max_length: int = 256) -> None:
        super().__init__(max_length, strict=False)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Return one of :data:`ALWAYS_VALID` (a random string with a mask or probability)."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        return ALWAYS_VALID[int(self.np_random.integers(len(ALWAYS_VALID)))]


def _clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


class ScienceWorldTextEnv(TextEnv[str]):
    """One ScienceWorld task, its variations drawn from a split.

    See the module docstring for the observation, action, reward and seeding conventions.

    Args:
        task: The suite's task name, e.g. ``"boil"`` or ``"find-living-thing"``.
        split: ``"train"``, ``"dev"`` or ``"test"``: the variation set episodes are drawn from.
        simplifications: The suite's simplification string, comma-separated without spaces, e.g.
            ``"noElectricalAction"`` or ``"easy"`` (all of them); ``""`` for none.
        free_text_actions: Whether any string goes to the game's parser (no ``"valid_actions"`` in
            ``info``) rather than only the valid actions.
        render_mode: ``"ansi"`` (:meth:`render` returns the last observation text) or ``None``.
        simulator: A running ``scienceworld.ScienceWorldEnv`` to play on (another env's
            :attr:`simulator`, or :func:`start_simulator`'s) instead of starting a JVM of its own:
            envs used one after another can share one. Each :meth:`reset` loads this env's task into
            it; :meth:`close` leaves it running (its starter closes it).

    Raises:
        ConfigError: If the task, split or simplifications are unknown.
        MissingDependencyError: If scienceworld (``pip install 'llmgym[scienceworld]'``) or Java is missing.
        BackendError: If the simulator's JVM does not start.
    """

    description = "ScienceWorld: an elementary-science task in a simulated house, played with typed commands."
    metadata = ANSI_METADATA

    def __init__(
        self,
        task: str = "boil",
        split: str = "train",
        *,
        simplifications: str = "",
        free_text_actions: bool = False,
        render_mode: str | None = None,
        simulator: Any = None,
    ) -> None:
        self._init_render_mode(render_mode)
        self._last_text: str | None = None
        if task not in SCIENCEWORLD_TASKS:
            raise ConfigError(
                f"task={task!r} is not a ScienceWorld task; expected one of {list(SCIENCEWORLD_TASKS)}. "
                "Fix: pass the suite's task name, e.g. task='find-living-thing'."
            )
        if split not in SPLITS:
            raise ConfigError(f"split={split!r} is not a ScienceWorld split; expected one of {list(SPLITS)}.")
        self.task = task
        self.split = split
        self.simplifications = simplifications
        self.free_text_actions = bool(free_text_actions)
        self.observation_space = TextSpace(1 << 16, strict=False)
        self.action_space = CommandSpace()
        self._owns_sim = simulator is None
        self._sim: Any = start_simulator() if simulator is None else simulator
        #: What each reset records in _LOADED_BY for the simulator: while it is there, it holds this env's episode.
        self._mark = object()
        try:
            self._sim.load(task, 0, simplifications)
        except ValueError as exc:
            self.close()
            raise ConfigError(
                f"simplifications={simplifications!r} are not valid for ScienceWorld's {task!r}: {exc}. Fix: pass "
                "'' or a comma-separated list without spaces, e.g. 'noElectricalAction'."
            ) from exc
        _LOADED_BY.pop(self._sim, None)  # loading the task replaced any episode a sharing env was playing
        self._server: Any = self._sim.server
        self._variations = self._split_variations()
        self._variation: int | None = None
        self._score = 0
        #: normalised action -> action, of the current state; None until someone needs it.
        self._actions: dict[str, str] | None = None
        #: variation -> the actions of its first state (the same in every episode).
        self._first_actions: dict[int, dict[str, str]] = {}

    @property
    def simulator(self) -> Any:
        """The underlying ``scienceworld.ScienceWorldEnv``: read it freely, step it only through this env."""
        return self._sim

    @property
    def variations(self) -> tuple[int, ...]:
        """The variations of :attr:`split`, sorted; ``reset`` draws one uniformly."""
        return self._variations

    @property
    def instructions(self) -> str:
        """How to play: the kind of commands the game understands."""
        return (
            "You are an agent in ScienceWorld, a simulated house with rooms, objects, substances, plants and "
            "animals. Complete the task you are given by typing one command per step, e.g. 'look around', "
            "'open door to kitchen', 'go to kitchen', 'pick up thermometer', 'use thermometer on water', "
            "'wait1'. 'focus on X' tells the game that X is the object of the task: focusing on a wrong "
            "object fails it."
        )

    def _split_variations(self) -> tuple[int, ...]:
        key = (self.task, self.split)
        if key not in _VARIATIONS:
            getter = {"train": "getVariationsTrain", "dev": "getVariationsDev", "test": "getVariationsTest"}
            # One call for the whole list: iterating a py4j list costs a round trip per element.
            listed = str(getattr(self._server, getter[self.split])())
            _VARIATIONS[key] = tuple(sorted(json.loads(listed)))
        return _VARIATIONS[key]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on a variation of the split drawn with the env's RNG. See :meth:`gymnasium.Env.reset`."""
        super().reset(seed=seed)
        variation = self._variations[int(self.np_random.integers(len(self._variations)))]
        self._server.load(self.task, variation, self.simplifications, False)
        _LOADED_BY[self._sim] = self._mark
        look = self._server.step("look around")
        self._variation = variation
        self._score = int(round(100 * self._server.getScore()))
        self._actions = self._first_actions.get(variation)
        text = f"{_clean(self._server.getTaskDescription())}\n\n{_clean(look)}"
        info = self._info(completed=False)
        if self._actions is not None:
            self._first_actions[variation] = self._actions
        self._last_text = text
        return text, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one command. See :meth:`gymnasium.Env.step` and the module docstring.

        Raises:
            InputError: Before the first :meth:`reset`, or when an env sharing the simulator has loaded
                its task into it (by a reset or by being built) since this env's last reset.
            InvalidActionError: If the action is not a string, or (without ``free_text_actions``)
                not one of the valid actions; the env's state is left unchanged.
        """
        command = self.parse_action(action)
        answer = self._server.step(command)
        self._actions = None
        score = int(round(100 * self._server.getScore()))
        reward, self._score = (score - self._score) / 100, score
        completed = bool(self._server.getCompleted())
        info = self._info(completed)
        self._last_text = _clean(answer)
        return self._last_text, reward, completed or score < 0, False, info

    def _render_text(self) -> str | None:
        return self._last_text

    def _info(self, completed: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "score": self._score,
            "success": completed and self._score >= 0,
            "variation": self._variation,
        }
        if not self.free_text_actions:
            info["valid_actions"] = self.valid_actions()
        return info

    def parse_action(self, action: Any) -> str:  # type: ignore[override]
        """Turn an action into the command sent to the game, without changing the env's state.

        Args:
            action: One of :meth:`valid_actions` (matched case- and blank-insensitively), or any
                string with ``free_text_actions``.

        Returns:
            The command: the valid action as listed, or the string itself in free-text mode.

        Raises:
            InputError: Before the first :meth:`reset`, or when an env sharing the simulator has loaded
                its task into it (by a reset or by being built) since this env's last reset.
            InvalidActionError: If the action is not a string, or not a valid action.
        """
        if self._variation is None:
            raise InputError(f"step() called before reset() on {type(self).__name__}. Fix: call env.reset().")
        self._check_loaded("step()")
        if not isinstance(action, str):
            raise InvalidActionError(
                f"action={action!r} is a {type(action).__name__}; ScienceWorld actions are strings, e.g. "
                "'look around'. Fix: pass one of info['valid_actions']."
            )
        try:
            action.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidActionError(
                f"action={_preview(action)} is not valid Unicode: it holds a lone surrogate "
                f"({action[exc.start]!r}) at position {exc.start}, which the game cannot receive. Fix: decode the "
                "agent's output with errors='replace' (or drop the surrogates) before stepping."
            ) from None
        if self.free_text_actions:
            return action
        command = self._valid_index().get(normalize_action_text(action))
        if command is None:
            raise self.invalid_action(action)
        return command

    def _valid_index(self) -> dict[str, str]:
        """The current state's actions, normalised -> as listed; listed once per state, on demand."""
        if self._actions is None:
            # One call for the whole list: iterating a py4j list costs a round trip per element.
            joined = self._sim._gateway.jvm.java.lang.String.join(
                "\n", self._server.getValidActionObjectCombinations()
            )
            self._actions = {normalize_action_text(a): a for a in sorted(set(joined.split("\n"))) if a}
        return self._actions

    def valid_actions(self) -> list[str]:
        """Return the valid actions of the current state, sorted (listed on the first call per state).

        Raises:
            InputError: Before the first :meth:`reset`, or when an env sharing the simulator has loaded
                its task into it (by a reset or by being built) since this env's last reset.
        """
        if self._variation is None:
            raise InputError(
                f"valid_actions() called before reset() on {type(self).__name__}. Fix: call env.reset()."
            )
        self._check_loaded("valid_actions()")
        return list(self._valid_index().values())

    def _check_loaded(self, call: str) -> None:
        """Raise :class:`~llmgym.errors.InputError` if another env has loaded its task into the simulator since this one's reset."""
        if self._sim is not None and _LOADED_BY.get(self._sim) is not self._mark:
            raise InputError(
                f"{call} on the {self.task!r} env, whose simulator another env has loaded its task into since (it now holds that "
                "env's episode). Fix: reset this env before stepping it again, or give each env used at the same "
                "time a simulator of its own (leave simulator= out)."
            )

    def invalid_action(self, action: Any) -> InvalidActionError:
        """Build the error raised for an action outside the valid ones, listing them.

        Args:
            action: The rejected action.

        Returns:
            An :class:`InvalidActionError` naming the action (its first characters and its length
            when long), the number of valid ones, the closest of them and those valid in every
            state: bounded, however many actions are valid.
        """
        index = self._valid_index()
        typed = normalize_action_text(action[:_SHOWN_CHARS]) if isinstance(action, str) else ""
        closest = [
            index[key] for key in difflib.get_close_matches(typed, list(index), n=_SHOWN_CLOSEST, cutoff=0.6)
        ]
        return InvalidActionError(
            f"action={_preview(action)} is not a valid action in this state of ScienceWorld's {self.task!r} "
            f"({len(index)} valid actions); closest: {closest}; valid in every state: {list(ALWAYS_VALID)}. "
            "Fix: pick one of info['valid_actions'] (the full list), or make the env with free_text_actions=True "
            "to send any command to the game's parser."
        )

    def close(self) -> None:
        """Shut the simulator's JVM down if this env started it, else leave it running (idempotent)."""
        sim, self._sim = getattr(self, "_sim", None), None
        if sim is None or not getattr(self, "_owns_sim", True):
            return
        process = sim._gateway.java_process
        sim.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
