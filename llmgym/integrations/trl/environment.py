"""llmgym envs as TRL ``GRPOTrainer(environment_factory=...)`` environments: the env is a tool.

TRL's GRPOTrainer calls ``environment_factory()`` once per rollout (instances are pooled and
reused), ``reset(**row)`` with the dataset row (its text is appended to the row's last user
message), exposes every public method but ``reset`` and ``get_reward`` as a tool the model calls
with the chat template's tool-call syntax, and ``get_reward()`` once the rollout is over. Here the
one tool is :meth:`ToolEnvironment.act`, which steps the env; ``get_reward`` is the episode return.
A ``seed`` column seeds ``reset``: GRPO repeats each row ``num_generations`` times, so a group
starts from one state and its advantages compare actions, not start states.

Usage::

    from trl import GRPOConfig, GRPOTrainer
    from llmgym.integrations.trl import EnvFactory, environment_dataset

    factory = EnvFactory("llmgym/EchoWord-v0")
    trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=environment_dataset(factory, range(64)),
                          environment_factory=factory)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from llmgym.errors import InvalidActionError

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["EnvFactory", "ToolEnvironment", "environment_dataset", "TOOL_INSTRUCTIONS"]

#: Appended to the env's instructions in the first user message of :func:`environment_dataset`.
TOOL_INSTRUCTIONS = (
    "Act by calling the act tool with one of the valid actions, once per turn, until the episode is over."
)


def describe(text: str, valid_actions: Optional[Iterable[str]]) -> str:
    """An observation's text followed by its valid actions (when the env lists them)."""
    if valid_actions is None:
        return text
    return f"{text}\nValid actions: {', '.join(valid_actions)}."


def make_env(env_id: str, env_kwargs: Mapping[str, Any], max_episode_steps: Optional[int]) -> Any:
    """``gymnasium.make`` of an llmgym id (or ``module:id``), with its guard and time limit."""
    import gymnasium as gym

    from llmgym.envs.registration import import_env_module, register_envs

    register_envs()
    kwargs = dict(env_kwargs)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    return gym.make(import_env_module(env_id), **kwargs)


class ToolEnvironment:
    """One llmgym env seen by TRL: ``reset(**row) -> str``, the ``act`` tool, ``get_reward()``.

    Args:
        env_id: A registered id (``llmgym/EchoWord-v0``) or ``module:id``.
        env_kwargs: Keyword arguments of ``gymnasium.make``.
        max_episode_steps: Time limit; ``None`` keeps the env's.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: Optional[Mapping[str, Any]] = None,
        max_episode_steps: Optional[int] = None,
    ) -> None:
        self._env = make_env(env_id, env_kwargs or {}, max_episode_steps)
        self._actions: list[str] = []
        self._return = 0.0
        self._over = True

    @property
    def actions(self) -> list[str]:
        """The actions the env accepted in the current episode, in order (a copy)."""
        return list(self._actions)

    @property
    def over(self) -> bool:
        """Whether the current episode has ended (terminated or truncated)."""
        return self._over

    def reset(self, seed: Optional[int] = None, **row: Any) -> str:
        """Start an episode; TRL calls it with the dataset row before each rollout.

        Args:
            seed: The row's ``seed`` column: the env's reset seed (``None``: a random start).
            **row: The row's other columns (``prompt``...), unused.

        Returns:
            The first observation and the valid actions, appended to the row's last user message.
        """
        from llmgym.envs.core import observation_text

        obs, info = self._env.reset(seed=None if seed is None else int(seed))
        self._actions = []
        self._return = 0.0
        self._over = False
        return describe(observation_text(obs), info.get("valid_actions"))

    def act(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: The action to take, one of the valid actions listed in the last observation.

        Returns:
            The reward of the action and the next observation with its valid actions, or that the episode is over.
        """
        from llmgym.envs.core import observation_text

        if self._over:
            raise InvalidActionError(
                f"act({action!r}): the episode is over; no action is taken after its end."
            )
        obs, reward, terminated, truncated, info = self._env.step(action)
        self._actions.append(action)
        self._return += float(reward)
        self._over = bool(terminated or truncated)
        if self._over:
            return f"Reward: {float(reward):g}. The episode is over; its return is {self._return:g}."
        return f"Reward: {float(reward):g}.\n" + describe(observation_text(obs), info.get("valid_actions"))

    def get_reward(self) -> float:
        """The episode's return so far (the sum of its rewards): TRL's reward of the rollout."""
        return self._return


@dataclass(frozen=True)
class EnvFactory:
    """A picklable ``environment_factory``: each call makes a new :class:`ToolEnvironment`.

    Attributes:
        env_id: A registered id (``llmgym/EchoWord-v0``) or ``module:id``.
        env_kwargs: Keyword arguments of ``gymnasium.make``.
        max_episode_steps: Time limit; ``None`` keeps the env's.
    """

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_episode_steps: Optional[int] = None

    def __call__(self) -> ToolEnvironment:
        """A new environment (TRL calls the factory once per concurrent rollout)."""
        return ToolEnvironment(self.env_id, self.env_kwargs, self.max_episode_steps)

    def instructions(self) -> str:
        """The env's own instructions (its ``instructions`` property), or ``""``."""
        env = make_env(self.env_id, self.env_kwargs, self.max_episode_steps)
        try:
            text = getattr(env.unwrapped, "instructions", "")
        finally:
            env.close()
        return text if isinstance(text, str) else ""


def environment_dataset(
    factory: EnvFactory, seeds: Iterable[int], instructions: Optional[str] = None
) -> Dataset:
    """A GRPO training set for ``factory``: one row per seed, with a ``prompt`` and a ``seed`` column.

    Args:
        factory: The environment factory the trainer gets.
        seeds: Reset seeds, one row each (GRPO repeats a row ``num_generations`` times: one start state per group).
        instructions: First user message; ``None``: the env's instructions and :data:`TOOL_INSTRUCTIONS`.

    Returns:
        A ``datasets.Dataset`` with conversational prompts (the observation of ``reset`` is appended to them).
    """
    from datasets import Dataset

    text = (
        instructions if instructions is not None else f"{factory.instructions()} {TOOL_INSTRUCTIONS}".strip()
    )
    seeds = [int(s) for s in seeds]
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": text + "\n"}] for _ in seeds], "seed": seeds}
    )
