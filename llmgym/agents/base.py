"""The Agent: prompt and action hooks over an LLM, with LlamaGym's loop API and a vectorised API.

An agent turns observations into prompts (:meth:`Agent.get_system_prompt`,
:meth:`Agent.format_observation` and the per-env :class:`~llmgym.agents.history.History`), asks the
LLM for a decision (subclasses: :class:`~llmgym.agents.scoring.ScoringAgent` scores the candidate
actions, :class:`~llmgym.agents.generative.GenerativeAgent` generates text parsed by
:meth:`Agent.extract_action`), and keeps for every env and step what training needs
(:class:`Decision`: prompt, its exact token ids, the action, its log-prob and the value). The
distribution decisions are drawn from is the agent's :attr:`~BaseAgent.policy`
(:mod:`llmgym.agents.policies`), which the algorithm re-scores the decisions under.

Two ways to drive it:

* LlamaGym's loop, one env: ``action = agent.act(obs)``, ``agent.assign_reward(r)``,
  ``stats = agent.terminate_episode()`` (trains when ``episodes_per_update`` episodes are stored).
* Vectorised, for :class:`~llmgym.envs.vector.TextVectorEnv`: ``actions = agent.act_batch(obs, infos)``
  then ``rewards, truncation_values = agent.observe(rewards, terminated, truncated, infos)``.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch

from llmgym.agents.actions import Decision
from llmgym.agents.history import History, Prompt
from llmgym.agents.learning import Episode, EpisodeLearner
from llmgym.agents.policies import Policy, prompt_values
from llmgym.config import AgentConfig, AlgorithmConfig
from llmgym.errors import ConfigError, InputError
from llmgym.llm.modules import VALUE_KEY
from llmgym.llm.protocols import PolicyLLM

__all__ = ["Decision", "BaseAgent", "DEFAULT_SYSTEM_PROMPT", "VALUE_KEY"]

DEFAULT_SYSTEM_PROMPT = "You are an agent in a text environment. Reply with one action."


class BaseAgent(abc.ABC):
    """Base agent: hooks, per-env histories, decision bookkeeping.

    Subclasses implement :meth:`make_policy` (and may post-process its decisions in :meth:`_decide`);
    users override the hooks.

    Args:
        llm: An :class:`llmgym.LLM` (its ``tokenizer`` renders prompts; a ``"value"`` module
            function, when present, gives values).
        config: The ``agent`` section; defaults to :class:`~llmgym.config.AgentConfig`.
        num_envs: Number of envs driven at once (1 for the LlamaGym loop API).
        algorithm: What trains the agent in LlamaGym's loop (:meth:`terminate_episode`): an
            algorithm object such as ``llmgym.PPO(config=...)``; ``None``: the loop only records
            episodes (``terminate_episode`` then refuses to train).
        episodes_per_update: Episodes collected by the loop API before an update.
        seed: Seed of the agent's own sampling generator.

    Attributes:
        policy: The distribution the agent's actions are drawn from and trained under (NLPO
            replaces it by ``agent.policy.masked(top_p)``).
    """

    def __init__(
        self,
        llm: PolicyLLM,
        config: Optional[AgentConfig] = None,
        *,
        num_envs: int = 1,
        algorithm: Optional[EpisodeLearner] = None,
        episodes_per_update: int = 8,
        seed: int = 0,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
            raise InputError(f"num_envs={num_envs!r} must be a positive int (the vector env's num_envs).")
        if episodes_per_update <= 0:
            raise InputError(f"episodes_per_update={episodes_per_update!r} must be a positive int.")
        self.llm = llm
        self.config = config if config is not None else AgentConfig()
        if isinstance(algorithm, AlgorithmConfig):
            raise ConfigError(
                f"algorithm= got the {algorithm.name!r} config section; an agent is trained by an algorithm object. "
                f"Fix: algorithm=llmgym.{algorithm.name.upper()}(config=...), and build the LLM with its "
                "updater() (see the README's LlamaGym example)."
            )
        if algorithm is not None and not isinstance(algorithm, EpisodeLearner):
            raise ConfigError(
                f"algorithm={algorithm!r:.80} has no learn_from_episodes(agent, episodes); pass an algorithm "
                "such as llmgym.PPO(config=...)."
            )
        self.algorithm = algorithm
        self.episodes_per_update = episodes_per_update
        self.generator = torch.Generator().manual_seed(seed)
        self.histories: list[History] = []
        self.last_decisions: list[Decision] = []
        self._episode = Episode()
        self._finished: list[Episode] = []
        self.num_envs = 0
        self.set_num_envs(num_envs)
        self.policy: Policy = self.make_policy()

    # ------------------------------------------------------------------ hooks (LlamaGym's)
    def get_system_prompt(self) -> str:
        """The system prompt (hook). Default: ``agent.system_prompt`` or a generic instruction."""
        return self.config.system_prompt if self.config.system_prompt is not None else DEFAULT_SYSTEM_PROMPT

    def format_observation(self, observation: Any) -> str:
        """Turn an env observation into the text the LLM sees (hook). Default: the observation's text."""
        from llmgym.envs.core import observation_text

        return observation_text(observation)

    def extract_action(self, response: str) -> Any:
        """Turn the LLM's response into an env action (hook). Default: the stripped text.

        Return ``None`` when the response cannot be parsed: the agent then applies the configured
        ``agent.invalid_action`` policy.
        """
        text = response.strip()
        return text or None

    def get_candidates(self, observation: Any, info: dict[str, Any]) -> Optional[list[str]]:
        """The candidate actions in this state (hook). Default: ``info["valid_actions"]``."""
        valid = info.get("valid_actions")
        return list(valid) if valid is not None else None

    # ------------------------------------------------------------------ policy
    @abc.abstractmethod
    def make_policy(self) -> Policy:
        """The policy this agent acts with, from its config (:mod:`llmgym.agents.policies`)."""

    def _decide(
        self, prompts: Sequence[Prompt], candidates: Sequence[Optional[list[str]]], greedy: bool
    ) -> list[Decision]:
        """One decision per prompt, drawn from :attr:`policy` with the agent's seeded generator."""
        return self.policy.act(self.llm, prompts, candidates, greedy=greedy, generator=self.generator)

    def set_num_envs(self, num_envs: int) -> None:
        """Reset the agent for ``num_envs`` envs (new, empty histories)."""
        self.num_envs = num_envs
        self.histories = [self.make_history() for _ in range(num_envs)]

    def make_history(self) -> History:
        """A new history of one env (prompt rendering with the agent config's template and budget)."""
        return History.from_config(
            self.llm.tokenizer, self.config, system_prompt=self.get_system_prompt(), overflow="truncate_left"
        )

    def act_batch(
        self,
        observations: Sequence[Any],
        infos: Optional[Sequence[dict[str, Any]]] = None,
        greedy: bool = False,
        env_indices: Optional[Sequence[int]] = None,
    ) -> list[Any]:
        """Choose one action per env.

        Args:
            observations: One observation per env (the vector env's batch).
            infos: One info dict per env (``valid_actions`` gives the candidates).
            greedy: Take the most likely action instead of sampling.
            env_indices: Which envs (histories) the observations belong to; default all
                ``num_envs`` in order. Evaluation passes the envs still running.

        Returns:
            One action per observation; the decisions are in :attr:`last_decisions`.
        """
        indices = list(range(self.num_envs)) if env_indices is None else [int(i) for i in env_indices]
        if len(observations) != len(indices) or any(not 0 <= i < self.num_envs for i in indices):
            raise InputError(
                f"act_batch got {len(observations)} observations for envs {indices} but the agent drives "
                f"num_envs={self.num_envs}; build the agent with num_envs equal to the vector env's."
            )
        infos = list(infos) if infos is not None else [{} for _ in observations]
        histories = [self.histories[i] for i in indices]
        prompts = []
        for history, obs in zip(histories, observations):
            history.add_observation(self.format_observation(obs))
            prompts.append(history.render())
        candidates = [self.get_candidates(obs, info) for obs, info in zip(observations, infos)]
        decisions = self._decide(prompts, candidates, greedy)
        for history, decision in zip(histories, decisions):
            self._record_decision(history, decision)
        self.last_decisions = decisions
        return [d.action for d in decisions]

    def _record_decision(self, history: History, decision: Decision) -> None:
        """Close the env's pending turn with the decision's response (its next prompt shows it)."""
        history.add_action(decision.response)

    def reset_env(self, index: int) -> None:
        """Forget the history of env ``index`` (its episode ended outside :meth:`observe`)."""
        self.histories[index].reset()

    def history_state(self) -> list[list[list[str]]]:
        """The (observation, action) turns of every env's current episode (JSON-able, for checkpoints)."""
        return [[[obs, act] for obs, act in h.turns] for h in self.histories]

    def load_history_state(self, state: Sequence[Sequence[Sequence[str]]]) -> None:
        """Restore what :meth:`history_state` returned."""
        if len(state) != self.num_envs:
            raise InputError(f"history state has {len(state)} envs but the agent drives {self.num_envs}.")
        for history, turns in zip(self.histories, state):
            history.reset()
            for obs, act in turns:
                history.add_observation(obs)
                history.add_action(act)

    def values_of(self, observations: dict[int, Any]) -> dict[int, float]:
        """``V`` of observations for some envs, given their current histories, without changing them.

        Used for the last observation of a rollout and the final observation of a truncated episode.
        """
        texts: dict[int, str] = {}
        for index, obs in observations.items():
            probe = copy.copy(self.histories[index])  # shares the turns, owns its pending observation
            probe.add_observation(self.format_observation(obs))
            texts[index] = probe.render().text
        values = prompt_values(self.llm, list(texts.values()))
        return dict(zip(texts.keys(), values))

    def observe(
        self,
        rewards: Sequence[float] | np.ndarray,
        terminated: Sequence[bool] | np.ndarray,
        truncated: Sequence[bool] | np.ndarray,
        infos: Optional[Sequence[dict[str, Any]]] = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Record the outcome of the last :meth:`act_batch`.

        Applies the invalid-action penalty, values the final observation of truncated episodes
        (for bootstrapping), and clears the history of every env whose episode ended.

        Args:
            rewards: ``[N]`` env rewards.
            terminated: ``[N]`` terminal flags.
            truncated: ``[N]`` time-limit flags.
            infos: ``N`` info dicts (``final_observation`` of ended episodes).

        Returns:
            ``(rewards, truncation_values)``, each float32 ``[N]``: rewards with penalties applied,
            and ``V(final observation)`` for truncated, non-terminated envs (0 elsewhere).
        """
        shaped = np.asarray(rewards, dtype=np.float32).copy()
        term = np.asarray(terminated, dtype=bool)
        trunc = np.asarray(truncated, dtype=bool)
        for i, decision in enumerate(self.last_decisions):
            if decision.parse_failed:
                shaped[i] += self.config.invalid_action_penalty
        truncation_values = np.zeros(len(shaped), dtype=np.float32)
        bootstrap: dict[int, Any] = {}
        for i in np.flatnonzero(trunc & ~term).tolist():
            final = infos[i].get("final_observation") if infos is not None else None
            if final is not None:
                bootstrap[i] = final
        if bootstrap:
            for i, value in self.values_of(bootstrap).items():
                truncation_values[i] = value
        for i in np.flatnonzero(term | trunc).tolist():
            self.histories[i].reset()
        return shaped, truncation_values

    # ------------------------------------------------------------------ LlamaGym loop API
    def act(self, observation: Any, info: Optional[dict[str, Any]] = None) -> Any:
        """Choose an action for one env (LlamaGym's ``act``); needs ``num_envs == 1``."""
        if self.num_envs != 1:
            raise InputError(
                f"act() drives one env but num_envs={self.num_envs}; use act_batch() for vector envs."
            )
        action = self.act_batch([observation], [info or {}])[0]
        self._episode.decisions.append(self.last_decisions[0])
        self._episode.rewards.append(
            self.config.invalid_action_penalty if self.last_decisions[0].parse_failed else 0.0
        )
        return action

    def assign_reward(self, reward: float) -> None:
        """Add ``reward`` to the last action taken by :meth:`act` (LlamaGym's ``assign_reward``)."""
        if not self._episode.decisions:
            raise InputError("assign_reward() was called before act(); call act(observation) first.")
        self._episode.rewards[-1] += float(reward)

    def terminate_episode(self, train: bool = True) -> dict[str, float]:
        """End the current episode (LlamaGym's ``terminate_episode``).

        When ``episodes_per_update`` episodes are stored and ``train`` is true, runs one update
        with the configured algorithm and returns its statistics; otherwise returns ``{}``.
        """
        if self._episode.decisions:
            self._finished.append(self._episode)
        self._episode = Episode()
        self.histories[0].reset()
        if not train or len(self._finished) < self.episodes_per_update:
            return {}
        if self.algorithm is None:
            raise ConfigError(
                "terminate_episode() would train but the agent has no algorithm; build it with "
                "algorithm=llmgym.PPO(config=...), or call terminate_episode(train=False)."
            )
        episodes, self._finished = self._finished, []
        return self.algorithm.learn_from_episodes(self, episodes)
