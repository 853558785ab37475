"""Episode records: what the agent read, weighed, chose and got, stored compactly with the run.

Each evaluation stores its first ``logging.record_episodes`` episodes in ``RUN_DIR/episodes.jsonl``
(one JSON object per episode), greedy and, with ``train.eval_sample``, sampled; training adds one
episode of its first env after each evaluation (:class:`TrainingEpisodeSampler`), sampled sparsely. A step holds the observation text the agent saw (its history is
the episode's earlier steps), the chosen action, the reward, the value estimate and the advantage,
and either the candidates with their probabilities (scoring agents) or the generated text with its
per-token log-probs and whether parsing failed and the fallback action was taken (generative
agents). Texts, steps, candidates and tokens are capped (``MAX_*``), so a record stays small
whatever the env; the file is rewritten atomically (a temporary file and a rename) like the rest
of the run files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from llmgym.agents.actions import CandidateChoice, Decision, TokenChoice
from llmgym.algorithms.callbacks import Callback
from llmgym.atomic_io import write_text_atomic
from llmgym.errors import InputError
from llmgym.jsonl import keep_records, read_jsonl

if TYPE_CHECKING:
    from llmgym.algorithms.on_policy import OnPolicyAlgorithm, RolloutStep

logger = logging.getLogger(__name__)

__all__ = [
    "EPISODES_NAME",
    "StepRecord",
    "EpisodeRecord",
    "EpisodeRecorder",
    "TrainingEpisodeSampler",
    "append_episode_records",
    "read_episode_records",
    "trim_episode_records",
    "episode_markdown",
    "episode_rows",
]

#: File name of the episode records in a run directory.
EPISODES_NAME = "episodes.jsonl"
#: Characters kept of an observation or a generated text (the rest is replaced by an ellipsis).
MAX_TEXT_CHARS = 1000
#: Steps kept per episode (the episode's return and length still count every step).
MAX_STEPS = 64
#: Candidates kept per step (the most probable ones, the chosen one always among them).
MAX_CANDIDATES = 32
#: Generated tokens kept per step.
MAX_TOKENS = 64
#: Bytes of records kept per evaluation: episodes past it are not stored (the first always is), so
#: ``episodes.jsonl`` grows by at most this much per evaluation whatever ``logging.record_episodes``.
MAX_EVALUATION_BYTES = 256_000


def _clip(text: str, limit: Optional[int] = None) -> str:
    limit = MAX_TEXT_CHARS if limit is None else limit
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _num(value: float) -> Optional[float]:
    """A float rounded to 4 significant digits (compact JSON); ``None`` when not finite."""
    value = float(value)
    return float(f"{value:.4g}") if math.isfinite(value) else None


@dataclass
class StepRecord:
    """One step of a recorded episode.

    Attributes:
        observation: The observation text the agent saw at this step (capped).
        action: The action sent to the env, as text.
        reward: The reward of the step (invalid-action penalty included, shaping left out as in evaluation).
        value: The value estimate ``V(prompt)``.
        advantage: GAE advantage of the step (``algorithm.gamma`` and ``algorithm.gae_lambda``; a
            time-limited episode is bootstrapped with the value of its last step).
        log_prob: Log-prob of the decision under the policy that took it.
        candidates: Candidate actions (scoring agents), the most probable ``MAX_CANDIDATES``.
        probs: Probability of each candidate (same order).
        chosen: Index of the chosen candidate in ``candidates``.
        text: The generated text (generative agents), capped.
        tokens: The generated tokens' texts, the first ``MAX_TOKENS``.
        token_log_probs: Their log-probs.
        parse_failed: The generated text could not be parsed and the fallback action was taken.
    """

    observation: str
    action: str
    reward: Optional[float]
    value: Optional[float]
    log_prob: Optional[float]
    advantage: Optional[float] = None
    candidates: Optional[list[str]] = None
    probs: Optional[list[Optional[float]]] = None
    chosen: Optional[int] = None
    text: Optional[str] = None
    tokens: Optional[list[str]] = None
    token_log_probs: Optional[list[Optional[float]]] = None
    parse_failed: bool = False


@dataclass
class EpisodeRecord:
    """One recorded evaluation episode.

    Attributes:
        env_steps: Training env steps when the evaluation ran (a training episode: when it ended).
        label: The evaluation's label (``before``, ``periodic``, ``after``, or ``eval`` for ``llmgym eval``);
            ``train`` for a training episode.
        evaluation: Index of the evaluation in the run (0, 1, ...); a training episode has the index of
            the evaluation before it.
        episode: Index of the episode in the evaluation.
        seed: The env seed of the episode (-1 for a training episode: its env reset itself).
        policy: ``greedy`` or ``sampled`` (evaluations), ``training`` (the behaviour policy in training).
        episode_return: Return of the episode (every step counted).
        success: Whether the episode succeeded.
        length: Number of steps (every step counted).
        steps: The first ``MAX_STEPS`` steps.
    """

    env_steps: int
    label: str
    evaluation: int
    episode: int
    seed: int
    policy: str
    episode_return: float
    success: bool
    length: int
    steps: list[StepRecord] = field(default_factory=list)

    def to_json(self) -> str:
        """One compact JSON line (``None`` fields of the steps left out)."""
        data = asdict(self)
        data["steps"] = [
            {k: v for k, v in step.items() if v is not None and v is not False} for step in data["steps"]
        ]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        """The record of one parsed JSON line, every field checked against its type.

        Raises:
            ValueError: When a field is missing, unknown or of another type (the message names it).
        """
        steps = data.get("steps", [])
        if not isinstance(steps, list) or not all(isinstance(step, dict) for step in steps):
            raise ValueError("'steps' must be a list of objects")
        checked = _checked(cls, {**data, "steps": []})
        checked["steps"] = [StepRecord(**_checked(StepRecord, step)) for step in steps]
        return cls(**checked)


#: The JSON types each field of a record may hold (``None``: null; a list: a list of those types).
_NUMBER = (int, float)
_FIELD_TYPES: dict[str, tuple[Any, ...]] = {
    "env_steps": (int,),
    "label": (str,),
    "evaluation": (int,),
    "episode": (int,),
    "seed": (int,),
    "policy": (str,),
    "episode_return": _NUMBER,
    "success": (bool,),
    "length": (int,),
    "steps": (list,),
    "observation": (str,),
    "action": (str,),
    "reward": (*_NUMBER, type(None)),
    "value": (*_NUMBER, type(None)),
    "log_prob": (*_NUMBER, type(None)),
    "advantage": (*_NUMBER, type(None)),
    "candidates": ([str], type(None)),
    "probs": ([*_NUMBER, type(None)], type(None)),
    "chosen": (int, type(None)),
    "text": (str, type(None)),
    "tokens": ([str], type(None)),
    "token_log_probs": ([*_NUMBER, type(None)], type(None)),
    "parse_failed": (bool,),
}


def _is(value: Any, kinds: Sequence[Any]) -> bool:
    """Whether a JSON value has one of ``kinds`` (a bool is no number; a list kind checks every item)."""
    for kind in kinds:
        if isinstance(kind, list):
            if isinstance(value, list) and all(_is(item, kind) for item in value):
                return True
        elif isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool):
            if not isinstance(value, float) or math.isfinite(value):
                return True
    return False


def _checked(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` when its keys are fields of the dataclass ``cls`` (the required ones present) of their JSON types."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown} of {cls.__name__}")
    missing = [
        name
        for name, f in fields.items()
        if name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"missing field(s) {missing} of {cls.__name__}")
    for key, value in data.items():
        if not _is(value, _FIELD_TYPES[key]):
            raise ValueError(f"field {key!r} is {value!r:.80}, not of its type")
    return data


def _scoring_fields(choice: CandidateChoice) -> dict[str, Any]:
    candidates, log_probs = choice.candidates, choice.log_probs
    if len(log_probs) != len(candidates):
        return {}
    order = sorted(range(len(candidates)), key=lambda i: -log_probs[i])[:MAX_CANDIDATES]
    if choice.index not in order:
        order[-1] = choice.index
    return {
        "candidates": [_clip(candidates[i].strip(), 200) for i in order],
        "probs": [_num(math.exp(log_probs[i])) for i in order],
        "chosen": order.index(choice.index),
    }


def _generative_fields(decision: Decision, choice: TokenChoice, tokenizer: Any) -> dict[str, Any]:
    ids = choice.token_ids[:MAX_TOKENS]
    fields: dict[str, Any] = {"text": _clip(decision.response), "parse_failed": bool(decision.parse_failed)}
    if ids and tokenizer is not None:
        fields["tokens"] = [tokenizer.decode([i]) for i in ids]
    if choice.token_log_probs:
        fields["token_log_probs"] = [_num(v) for v in choice.token_log_probs[: len(ids)]]
    return fields


class EpisodeRecorder:
    """Records the first ``max_episodes`` episodes of one evaluation from the agent's decisions.

    :func:`llmgym.run.evaluation.evaluate` calls :meth:`add_step` after each env step and
    :meth:`end_episode` when an episode ends; :meth:`records` then gives the finished episodes.

    Args:
        max_episodes: Episodes to record (the first ones, by episode index).
        tokenizer: Decodes generated token ids into their texts (generative agents); optional.
        gamma: Discount of the advantages.
        gae_lambda: GAE lambda of the advantages.
    """

    def __init__(
        self, max_episodes: int, tokenizer: Any = None, gamma: float = 0.99, gae_lambda: float = 0.95
    ) -> None:
        if max_episodes < 0:
            raise InputError(f"max_episodes={max_episodes} must be >= 0 (0 records nothing).")
        self.max_episodes = max_episodes
        self.tokenizer = tokenizer
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self._steps: dict[int, list[StepRecord]] = {}
        self._counts: dict[int, tuple[float, int]] = {}
        self._finished: list[tuple[int, int, bool, bool]] = []

    def wants(self, episode: int) -> bool:
        """Whether episode ``episode`` (its index in the evaluation) is recorded."""
        return episode < self.max_episodes

    def add_step(self, episode: int, observation: str, decision: Decision, reward: float) -> None:
        """Record one step of a recorded episode.

        Args:
            episode: The episode's index in the evaluation.
            observation: The observation text the agent saw.
            decision: The agent's decision (``agent.last_decisions`` entry).
            reward: The step's reward, penalties included.
        """
        total, length = self._counts.get(episode, (0.0, 0))
        self._counts[episode] = (total + float(reward), length + 1)
        steps = self._steps.setdefault(episode, [])
        if len(steps) >= MAX_STEPS:
            return
        choice = decision.choice
        extra = (
            _scoring_fields(choice)
            if isinstance(choice, CandidateChoice)
            else _generative_fields(decision, choice, self.tokenizer)
        )
        steps.append(
            StepRecord(
                observation=_clip(observation),
                action=_clip(str(decision.action), 500),
                reward=_num(reward),
                value=_num(decision.value),
                log_prob=_num(decision.log_prob),
                **extra,
            )
        )

    def end_episode(self, episode: int, seed: int, success: bool, terminated: bool) -> None:
        """Close a recorded episode (its advantages are computed here).

        Args:
            episode: The episode's index in the evaluation.
            seed: Its env seed.
            success: Whether it succeeded.
            terminated: It reached a terminal state (else a time limit cut it).
        """
        import torch

        from llmgym.algorithms.advantages import compute_gae  # torch: only when a run records

        steps = self._steps.get(episode, [])
        if steps:
            values = torch.tensor([[s.value or 0.0] for s in steps], dtype=torch.float64)
            rewards = torch.tensor([[s.reward or 0.0] for s in steps], dtype=torch.float64)
            done = torch.zeros_like(values, dtype=torch.bool)
            done[-1] = True
            advantages, _ = compute_gae(
                rewards,
                values,
                done if terminated else torch.zeros_like(done),
                done,
                last_values=values[-1],
                gamma=self.gamma,
                gae_lambda=self.gae_lambda,
                truncation_values=values[-1:].expand_as(values),
            )
            for step, advantage in zip(steps, advantages[:, 0].tolist()):
                step.advantage = _num(advantage)
        self._finished.append((episode, seed, success, terminated))

    def records(
        self, env_steps: int, label: str, evaluation: int, policy: str = "greedy"
    ) -> list[EpisodeRecord]:
        """The finished recorded episodes, by episode index, within ``MAX_EVALUATION_BYTES``.

        Args:
            env_steps: Training env steps of the evaluation.
            label: Its label.
            evaluation: Its index in the run.
            policy: ``greedy`` or ``sampled``.
        """
        result: list[EpisodeRecord] = []
        size = 0
        for episode, seed, success, _ in sorted(self._finished):
            total, length = self._counts.get(episode, (0.0, 0))
            record = EpisodeRecord(
                env_steps=int(env_steps),
                label=label,
                evaluation=evaluation,
                episode=episode,
                seed=seed,
                policy=policy,
                episode_return=float(_num(total) or 0.0),
                success=bool(success),
                length=length,
                steps=self._steps.get(episode, []),
            )
            size += len(record.to_json().encode()) + 1
            if result and size > MAX_EVALUATION_BYTES:
                logger.warning(
                    "Recorded %d of the %d episodes of evaluation %d: the others would pass %d bytes (episodes.jsonl's "
                    "bound per evaluation).",
                    len(result),
                    len(self._finished),
                    evaluation,
                    MAX_EVALUATION_BYTES,
                )
                break
            result.append(record)
        return result


class TrainingEpisodeSampler(Callback):
    """Records one training episode after each :meth:`arm`: the next episode the first env starts.

    Training runs many envs for many steps; the report needs only a glimpse of what the behaviour
    policy does between evaluations. After :meth:`arm` (the trainer arms it after each evaluation),
    the sampler waits until env 0's current episode ends, records the next one whole, and holds it
    in :attr:`finished` until the trainer writes it. It is a callback of the training loop
    (:meth:`~llmgym.algorithms.callbacks.Callback.on_step`), so it sees every algorithm's rollouts,
    GRPO's and RLOO's rounds included (there env 0's next episode starts with the next round; an
    episode a round cuts short is dropped and the round's next one recorded instead). It only reads
    what the rollout already computed (no forward pass, no random draw), so training is the same
    with or without it. The reward of a step is the one training uses (the agent's shaping and
    penalties included, the KL penalty not).

    Args:
        format_observation: The agent's ``format_observation`` (the text it saw).
        tokenizer: Decodes generated token ids (generative agents); optional.
        gamma: Discount of the advantages.
        gae_lambda: GAE lambda of the advantages.
    """

    def __init__(
        self,
        format_observation: Callable[[Any], str],
        tokenizer: Any = None,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
    ) -> None:
        self.format_observation = format_observation
        self.tokenizer = tokenizer
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        #: Recorded training episodes not yet written.
        self.finished: list[EpisodeRecord] = []
        self._evaluation: Optional[int] = None
        self._ready = False  # armed, and env 0's episode running at the arming has ended
        self._recorder: Optional[EpisodeRecorder] = None

    def arm(self, evaluation: int) -> None:
        """Record the next episode env 0 starts, filed under evaluation ``evaluation``."""
        self._evaluation = evaluation

    def on_step(self, algorithm: OnPolicyAlgorithm, step: RolloutStep) -> None:
        """See one vector step: record env 0's step when its episode is recorded.

        Args:
            algorithm: The algorithm collecting the rollout.
            step: The step (the observations the agent acted on, its decisions, what came back).
        """
        if not step.live[0]:
            return
        if step.episode_starts[0] and (self._ready or self._recorder is not None):
            self._recorder = EpisodeRecorder(1, self.tokenizer, self.gamma, self.gae_lambda)
            self._ready = False
        done = bool(step.terminated[0]) or bool(step.truncated[0])
        recorder = self._recorder
        if recorder is not None:
            reward = float(step.rewards[0])
            recorder.add_step(0, self.format_observation(step.observations[0]), step.decisions[0], reward)
            if done:
                success = step.infos[0].get("success")
                recorder.end_episode(
                    0, -1, bool(success if success is not None else reward > 0), bool(step.terminated[0])
                )
                self.finished.extend(
                    recorder.records(step.env_steps, "train", self._evaluation or 0, "training")
                )
                self._recorder, self._evaluation = None, None
        elif self._evaluation is not None and done:  # env 0 starts a new episode at its next step
            self._ready = True

    def take(self) -> list[EpisodeRecord]:
        """The finished records, handed over once."""
        records, self.finished = self.finished, []
        return records


def read_episode_records(path: str | Path) -> list[EpisodeRecord]:
    """The records of an ``episodes.jsonl`` file (empty when it does not exist), in order.

    Lines are split on LF (newline) only (recorded texts may hold U+2028 and the like), see :mod:`llmgym.jsonl`.

    Raises:
        RunFileError: When a line is not an episode record (the file and the line are named).
    """
    target = Path(path)
    if not target.is_file():
        return []
    return read_jsonl(target, EpisodeRecord.from_dict, "an episode record")


def append_episode_records(path: str | Path, records: Sequence[EpisodeRecord]) -> Path:
    """Add records to an ``episodes.jsonl`` file, rewriting it atomically.

    Args:
        path: The file (created when absent).
        records: Records to append.

    Returns:
        ``path``.
    """
    target = Path(path)
    old = target.read_text(encoding="utf-8") if target.is_file() else ""
    return write_text_atomic(target, old + "".join(record.to_json() + "\n" for record in records))


def trim_episode_records(path: str | Path, max_env_steps: int) -> int:
    """:func:`llmgym.metrics.trim_metrics` for an ``episodes.jsonl``: the same arguments and result.

    A resumed run records the evaluations after its checkpoint again. Unlike a metrics line, a line
    that is not an episode record raises (the file is rewritten whole, so a crash leaves none).
    """
    records = read_episode_records(path)
    return keep_records(
        path, records, lambda record: record.env_steps <= max_env_steps, EpisodeRecord.to_json
    )


def _step_markdown(index: int, step: StepRecord) -> Iterable[str]:
    yield f"**step {index}** reward {step.reward} · value {step.value} · advantage {step.advantage}"
    yield "```\n" + step.observation.replace("```", "'''") + "\n```"
    if step.candidates is not None and step.probs is not None:
        for i, (candidate, prob) in enumerate(zip(step.candidates, step.probs)):
            mark = "**→**" if i == step.chosen else "·"
            yield f"- {mark} `{candidate}` {prob}"
    if step.text is not None:
        flag = " (**parse failed: fallback action**)" if step.parse_failed else ""
        yield f"generated: `{step.text}` → action `{step.action}`{flag}"
    else:
        yield f"action: `{step.action}`"


def episode_markdown(record: EpisodeRecord) -> str:
    """An episode as Markdown (TensorBoard's text plugin renders it)."""
    head = (
        f"### {record.label} evaluation at {record.env_steps} env steps, episode {record.episode} (seed {record.seed})\n"
        f"return {record.episode_return} · {'success' if record.success else 'failure'} · {record.length} steps"
    )
    body = [line for i, step in enumerate(record.steps) for line in _step_markdown(i, step)]
    return "\n\n".join([head, *body])


#: Columns of :func:`episode_rows`.
ROW_COLUMNS = [
    "env_steps",
    "label",
    "episode",
    "step",
    "observation",
    "action",
    "reward",
    "value",
    "advantage",
    "probabilities",
    "generated",
    "parse_failed",
    "episode_return",
    "success",
]


def episode_rows(records: Sequence[EpisodeRecord]) -> tuple[list[str], list[list[Any]]]:
    """The steps of recorded episodes as table rows (a W&B table), one row per step.

    Returns:
        ``(columns, rows)``; ``probabilities`` reads ``candidate: p`` per candidate, ``generated``
        the generated text.
    """
    rows = []
    for record in records:
        for index, step in enumerate(record.steps):
            probs = (
                "; ".join(f"{c}: {p}" for c, p in zip(step.candidates, step.probs))
                if step.candidates is not None and step.probs is not None
                else ""
            )
            rows.append(
                [
                    record.env_steps,
                    record.label,
                    record.episode,
                    index,
                    step.observation,
                    step.action,
                    step.reward,
                    step.value,
                    step.advantage,
                    probs,
                    step.text or "",
                    step.parse_failed,
                    record.episode_return,
                    record.success,
                ]
            )
    return list(ROW_COLUMNS), rows
