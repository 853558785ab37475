"""Config-driven training: collect, update, log, evaluate, checkpoint, resume.

``llmgym train CONFIG [overrides]`` calls :func:`run_training`; ``llmgym eval RUN_DIR`` calls
:func:`evaluate_run`. A run directory holds ``config.yaml`` (the resolved config),
``metrics.jsonl``, ``checkpoints/`` and, at the end, ``learning_curve.png``.
"""

from __future__ import annotations

import importlib
import json
import logging
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
import yaml

from llmgym.agents.base import BaseAgent
from llmgym.agents.policies import Decision
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.registry import algorithm_class
from llmgym.algorithms.updaters import PolicyUpdater
from llmgym.checkpoint import (
    capture_rng_state,
    check_resume_config,
    clean_crash_leftovers,
    latest_checkpoint,
    load_checkpoint_config,
    load_trainer_state,
    read_latest_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from llmgym.config import (
    AlgorithmConfig,
    Config,
    check_requirements,
    config_to_dict,
    load_config,
    save_config,
)
from llmgym.envs.registration import check_env_id
from llmgym.errors import CheckpointError, ConfigError
from llmgym.llm.updater import Updater
from llmgym.metrics import RunLogger, plot_learning_curve, trim_metrics
from llmgym.report.records import (
    EPISODES_NAME,
    EpisodeRecord,
    EpisodeRecorder,
    TrainingEpisodeSampler,
    append_episode_records,
    read_episode_records,
    trim_episode_records,
)
from llmgym.run_lock import RunLock, check_new_run_dir, default_run_stem, new_run_dir

if TYPE_CHECKING:
    from llmgym.llm.client import LLM
    from llmgym.llm.modules import ModuleFunction
    from llmgym.llm.protocols import PolicyLLM

__all__ = [
    "resolve_updater",
    "build_heads",
    "build_llm",
    "build_agent",
    "make_envs",
    "evaluate",
    "Trainer",
    "run_training",
    "evaluation_summary",
    "evaluate_run",
]

logger = logging.getLogger(__name__)


def resolve_updater(config: AlgorithmConfig) -> Updater:
    """The updater named by the config: the generic policy updater, or a user class ``'module:Class'``.

    A user class is instantiated with the algorithm config when its constructor accepts it,
    else without arguments.
    """
    if config.updater is None:
        return PolicyUpdater(config)
    module_name, _, class_name = config.updater.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"algorithm.updater={config.updater!r} could not be imported ({exc}); give 'package.module:ClassName' "
            "of an importable llmgym.Updater subclass."
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Updater)):
        raise ConfigError(f"algorithm.updater={config.updater!r} is not an llmgym.Updater subclass.")
    try:
        updater: Updater = cls(config)  # type: ignore[call-arg]  # user classes may take the config
    except TypeError:
        updater = cls()
    return updater


def build_heads(config: Config) -> dict[str, ModuleFunction]:
    """The module functions of a run: a value head, and the action head of scoring agents.

    Args:
        config: The run config (``agent``, ``algorithm``).

    Returns:
        Unbound heads by key (:data:`~llmgym.llm.modules.VALUE_KEY`, and
        :data:`~llmgym.llm.modules.POLICY_KEY` when ``agent.action_head`` applies).

    Raises:
        ConfigError: ``agent.action_head`` together with ``algorithm.kl.coef > 0``.
    """
    from llmgym.llm.modules import POLICY_KEY, VALUE_KEY, ActionHead, ValueHead

    heads: dict[str, ModuleFunction] = {VALUE_KEY: ValueHead(detach_input=config.algorithm.value_head == "detached")}
    if config.agent.type == "scoring" and config.agent.action_head:
        if config.algorithm.kl.coef > 0:
            raise ConfigError(
                f"algorithm.kl.coef={config.algorithm.kl.coef:g} penalises the KL to the LLM's own scoring policy, which "
                "agent.action_head replaces; set agent.action_head=false to keep the KL penalty, or algorithm.kl.coef=0."
            )
        heads[POLICY_KEY] = ActionHead(prior_weight=config.agent.prior_weight, normalize=config.agent.score_normalize)
    return heads


def build_llm(config: Config, *, model: Any = None, tokenizer: Any = None) -> LLM:
    """An :class:`llmgym.LLM` with the heads of :func:`build_heads` and the configured updater.

    Args:
        config: The run config (``model``, ``agent``, ``algorithm``, ``distributed``).
        model: Optional prebuilt transformers model (tests pass tiny models).
        tokenizer: Its tokenizer.

    Raises:
        ConfigError: A KL to the reference (``algorithm.kl.coef > 0``) with neither LoRA nor
            ``model.reference_copy``.
    """
    from llmgym.llm.client import LLM

    if config.algorithm.kl.coef > 0 and config.model.lora is None and not config.model.reference_copy:
        raise ConfigError(
            f"algorithm.kl.coef={config.algorithm.kl.coef:g} measures the KL to a reference model, but the full model "
            "trains (model.lora is null) and keeps no reference. Fix: model.reference_copy=true (a frozen copy of the "
            "initial weights on the same device: one more copy of the weights in memory), or model.lora (the "
            "reference is the model with its adapter disabled), or algorithm.kl.coef=0."
        )
    return LLM(
        config.model, module_functions=build_heads(config), updater=resolve_updater(config.algorithm),
        model=model, tokenizer=tokenizer, distributed=config.distributed,
    )


def build_agent(config: Config, llm: PolicyLLM, num_envs: int, system_prompt: Optional[str] = None) -> BaseAgent:
    """The agent named by ``agent.type`` (``scoring``, ``generative`` or ``token``) for ``num_envs`` envs."""
    from llmgym.agents.generative import GenerativeAgent, TokenAgent
    from llmgym.agents.scoring import ScoringAgent

    agent_config = config.agent
    if system_prompt is not None and agent_config.system_prompt is None:
        agent_config = type(agent_config)(**{**config_to_dict(agent_config), "system_prompt": system_prompt})
    if agent_config.type == "scoring":
        return ScoringAgent(llm, agent_config, num_envs=num_envs, seed=config.train.seed)
    cls = {"generative": GenerativeAgent, "token": TokenAgent}[agent_config.type]
    return cls(llm, agent_config, num_envs=num_envs, seed=config.train.seed)


def make_envs(config: Config, num_envs: Optional[int] = None) -> Any:
    """The vector env of the ``env`` section."""
    from llmgym.envs.vector import make_vec

    return make_vec(
        config.env.id,
        num_envs=num_envs or config.env.num_envs,
        vectorization_mode=config.env.vectorization_mode,
        env_kwargs=dict(config.env.kwargs),
        max_episode_steps=config.env.max_episode_steps,
        reward_clip=config.env.reward_clip,
    )


def _env_instructions(config: Config) -> Optional[str]:
    import gymnasium as gym

    env = gym.make(config.env.id, **dict(config.env.kwargs))
    try:
        text = getattr(env.unwrapped, "instructions", None)
    finally:
        env.close()
    return text if isinstance(text, str) else None


def evaluate(
    agent: BaseAgent, config: Config, episodes: int, seed: int, greedy: bool = True,
    recorder: Optional[EpisodeRecorder] = None,
) -> dict[str, float]:
    """Run ``episodes`` seeded episodes (episode ``j`` uses seed ``seed + j``) with the agent.

    Up to ``agent.num_envs`` episodes run side by side, and a slot starts the next pending episode
    as soon as its own ends, so every batched forward stays full. Each episode is reset with its
    own seed and a fresh history, so the result does not depend on the number of envs. With a
    ``recorder``, the steps of the episodes it wants are recorded (for the run report).

    Returns:
        ``success_rate``, ``episode_return`` (the task's return: ``info["shaping_reward"]`` is left
        out) and ``episode_length`` means; for a text-generation env (its episodes end with
        ``info["completion"]``) also the completions' fluency (:func:`~llmgym.algorithms.fluency.fluency_metrics`:
        ``perplexity_ref``, ``distinct-1``, ``distinct-2``, and ``kl_ref`` when sampled).
    """
    import gymnasium as gym

    kwargs: dict[str, Any] = dict(config.env.kwargs)
    if config.env.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.env.max_episode_steps
    width = max(1, min(agent.num_envs, episodes))
    envs = [gym.make(config.env.id, **kwargs) for _ in range(width)]
    returns: list[float] = [0.0] * episodes
    lengths: list[int] = [0] * episodes
    successes: list[float] = [0.0] * episodes
    completions: dict[int, str] = {}
    decisions: list[Decision] = []
    pending = iter(range(episodes))
    running: dict[int, int] = {}  # slot -> episode
    state: dict[int, tuple[Any, dict[str, Any]]] = {}

    def start_next(slot: int) -> None:
        episode = next(pending, None)
        if episode is None:
            running.pop(slot, None)
            state.pop(slot, None)
            return
        running[slot] = episode
        agent.reset_env(slot)
        state[slot] = envs[slot].reset(seed=seed + episode)

    try:
        for slot in range(width):
            start_next(slot)
        while state:
            active = sorted(state)
            actions = agent.act_batch(
                [state[i][0] for i in active], [state[i][1] for i in active], greedy=greedy, env_indices=active
            )
            failed = {i for i, d in zip(active, agent.last_decisions) if d.parse_failed}
            for slot, action, decision in zip(active, actions, agent.last_decisions):
                seen = state[slot][0]
                obs, raw_reward, terminated, truncated, info = envs[slot].step(action)
                reward = float(raw_reward) - float(info.get("shaping_reward", 0.0))
                episode = running[slot]
                penalised = reward + (agent.config.invalid_action_penalty if slot in failed else 0.0)
                returns[episode] += penalised
                lengths[episode] += 1
                decisions.append(decision)
                recorded = recorder is not None and recorder.wants(episode)
                if recorder is not None and recorded:
                    recorder.add_step(episode, agent.format_observation(seen), decision, penalised)
                if terminated or truncated:
                    if "completion" in info:
                        completions[episode] = str(info["completion"])
                    success = info.get("success")
                    successes[episode] = float(bool(success if success is not None else reward > 0))
                    if recorder is not None and recorded:
                        recorder.end_episode(episode, seed + episode, bool(successes[episode]), bool(terminated))
                    start_next(slot)
                else:
                    state[slot] = (obs, info)
    finally:
        for env in envs:
            env.close()
    n = max(1, episodes)
    result = {
        "success_rate": sum(successes) / n,
        "episode_return": sum(returns) / n,
        "episode_length": sum(lengths) / n,
        "episodes": float(episodes),
    }
    if completions:
        result.update(_fluency(agent, decisions, [completions[e] for e in sorted(completions)], sampled=not greedy))
    return result


def _fluency(agent: BaseAgent, decisions: list[Decision], completions: list[str], sampled: bool) -> dict[str, float]:
    """:func:`~llmgym.algorithms.fluency.fluency_metrics`, distinct-n only (with a warning) when the LLM has no reference."""
    from llmgym.algorithms.fluency import fluency_metrics

    try:
        return fluency_metrics(agent.llm, agent.policy, decisions, completions, sampled=sampled)
    except ConfigError as exc:
        logger.warning("perplexity and KL to the reference not measured: %s", exc)
        return fluency_metrics(agent.llm, agent.policy, [], completions, sampled=sampled)


def _eval_width(config: Config, episodes: int) -> int:
    """Envs evaluated side by side: ``train.eval_num_envs`` (default ``env.num_envs``), at most ``episodes``."""
    width = config.train.eval_num_envs or config.env.num_envs
    return max(1, min(width, episodes))


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class Trainer:
    """Runs a config: builds LLM, envs and agent, then trains with logging, evaluation and checkpoints.

    Args:
        config: The run config.
        run_dir: Run directory; default ``train.output_dir/train.run_name`` (or ``train.resume``).
        model: Optional prebuilt model (tests); loaded from ``config.model`` otherwise.
        tokenizer: Its tokenizer.

    Raises:
        ConfigError: If ``env.id`` is not registered (before the run directory or the model exist), or a
            new run (no ``train.resume``) would write into a folder that already holds a run.
        RunLockedError: If another live process writes the run folder (its pid is named).
        MissingDependencyError: If the env or a setting needs an optional package that is not installed.

    The run folder is locked (``.llmgym.lock``) from here to :meth:`close`; a default run name gets a
    ``-2``, ``-3``... suffix when that folder exists already.
    """

    def __init__(self, config: Config, run_dir: Optional[str | Path] = None, *, model: Any = None, tokenizer: Any = None) -> None:
        check_requirements(config)
        self.config = config
        train = config.train
        if run_dir is None and train.resume is None and not train.run_name:
            run_dir = new_run_dir(train.output_dir, default_run_stem(config.env.id, time.strftime("%Y%m%d-%H%M%S")))
        elif run_dir is None:
            run_dir = train.resume if train.resume is not None else Path(train.output_dir) / str(train.run_name)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = RunLock.acquire(self.run_dir)  # before anything is read or written there
        try:
            self._setup(config, model, tokenizer)
        except BaseException:
            self._lock.release()
            raise

    def _setup(self, config: Config, model: Any, tokenizer: Any) -> None:
        """Everything of ``__init__`` done under the run folder's lock."""
        train = config.train
        if train.resume is None:
            check_new_run_dir(self.run_dir)
        clean_crash_leftovers(self.run_dir)
        checkpoint = self._resume_checkpoint() if train.resume is not None else None
        save_config(config, self.run_dir / "config.yaml")
        _seed_everything(train.seed)
        self.llm = build_llm(config, model=model, tokenizer=tokenizer)
        self.system_prompt = _env_instructions(config)
        self.envs = make_envs(config)
        agent_config = self._fitted_budget()
        self.agent = build_agent(agent_config, self.llm, self.envs.num_envs, self.system_prompt)
        algorithm_cls = algorithm_class(config.algorithm.name)
        self.algorithm: OnPolicyAlgorithm = algorithm_cls(self.agent, self.envs, config.algorithm, seed=train.seed)
        self.algorithm.total_env_steps = train.total_env_steps
        self.eval_agent = build_agent(agent_config, self.llm, _eval_width(config, train.eval_episodes), self.system_prompt)
        self.evaluations: list[dict[str, float]] = []
        self.episode_records: list[EpisodeRecord] = []  # of the last evaluation
        algo = config.algorithm
        #: One training episode of env 0 after each evaluation, for the run report (None: recording off).
        self.training_sampler = (
            TrainingEpisodeSampler(self.agent.format_observation, self.llm.tokenizer, algo.gamma, algo.gae_lambda)
            if config.logging.record_episodes else None
        )
        self.algorithm.rollout_observer = self.training_sampler
        self._last_checkpoint_steps = 0
        self._last_eval_steps = 0
        if checkpoint is not None:
            self._resume(checkpoint)

    def _fitted_budget(self) -> Config:
        """The config the agents are built from: ``agent.max_prompt_tokens`` fitted to the model window."""
        from llmgym.budgets import fit_prompt_budget

        backend = self.llm.backend
        try:
            return fit_prompt_budget(
                self.config, getattr(backend, "window", None), self.llm.tokenizer, self.envs,
                bool(getattr(backend, "is_seq2seq", False)),
            )
        except ConfigError:
            self.envs.close()
            raise

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Write a checkpoint of everything resume needs (atomic)."""
        rng_json, rng_tensors = capture_rng_state()
        state = {
            "algorithm": self.algorithm.state_dict(),
            "rng": rng_json,
            "evaluations": self.evaluations,
            "last_eval_steps": self._last_eval_steps,
        }
        tensors = {**rng_tensors, **{f"gen_{k}": v for k, v in self.algorithm.generator_states().items()}}
        config_yaml = yaml.safe_dump(config_to_dict(self.config), sort_keys=False)
        folder = save_checkpoint(
            self.run_dir, self.algorithm.env_steps, self.llm.save, json.loads(json.dumps(state, default=_jsonable)),
            tensors, config_yaml,
        )
        self._last_checkpoint_steps = self.algorithm.env_steps
        return folder

    def _resume_checkpoint(self) -> Path:
        """The checkpoint to resume from (verified), once its config is checked against this one."""
        folder = latest_checkpoint(self.run_dir)
        current = yaml.safe_load(yaml.safe_dump(config_to_dict(self.config), sort_keys=False))
        check_resume_config(load_checkpoint_config(folder), current, folder)
        return folder

    def _resume(self, folder: Path) -> None:
        state, tensors = load_trainer_state(folder)
        self.llm.load(folder / "llm")
        generators = {k[len("gen_"):]: v for k, v in tensors.items() if k.startswith("gen_")}
        try:
            self.algorithm.load_state_dict(state["algorithm"], generators)
            self.evaluations = list(state["evaluations"])
            self._last_eval_steps = int(state["last_eval_steps"])
        except KeyError as exc:
            raise CheckpointError(
                f"{folder / 'trainer_state.json'} lacks {exc}: it was written by another llmgym version; resume "
                "with that version or start a new run."
            ) from exc
        self._last_checkpoint_steps = self.algorithm.env_steps
        restore_rng_state(state["rng"], {k: v for k, v in tensors.items() if not k.startswith("gen_")})
        trim_metrics(self.run_dir / "metrics.jsonl", self.algorithm.env_steps)
        trim_episode_records(self.run_dir / EPISODES_NAME, self.algorithm.env_steps)
        if self.training_sampler is not None and self.evaluations:
            # Waiting for a training episode after the last evaluation, as the run that wrote the checkpoint
            # was unless it had recorded it (a checkpoint taken mid-episode records the next one instead).
            last = len(self.evaluations) - 1
            records = read_episode_records(self.run_dir / EPISODES_NAME)
            if not any(r.policy == "training" and r.evaluation == last for r in records):
                self.training_sampler.arm(last)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, label: str) -> dict[str, float]:
        """Evaluation on ``train.eval_episodes`` seeded episodes, logged as ``kind="eval"``.

        The greedy policy is evaluated; with ``train.eval_sample`` the sampled policy is too, on
        the same episodes and with its sampling generator reseeded, under ``sampled_`` keys. With
        ``train.eval_splits``, every sample of the first split (all splits after training) is
        completed and scored by ``train.eval_metrics`` (:mod:`llmgym.algorithms.text_evaluation`).
        The first ``logging.record_episodes`` greedy episodes (and sampled ones with
        ``train.eval_sample``) are appended to ``episodes.jsonl``, and the next training episode of
        env 0 is recorded (:class:`~llmgym.report.records.TrainingEpisodeSampler`).
        """
        seed = 10_000 + self.config.train.seed
        episodes = self.config.train.eval_episodes
        algo = self.config.algorithm
        recorder = EpisodeRecorder(self.config.logging.record_episodes, self.llm.tokenizer, algo.gamma, algo.gae_lambda)
        sampled_recorder = EpisodeRecorder(recorder.max_episodes, self.llm.tokenizer, algo.gamma, algo.gae_lambda)
        with torch.random.fork_rng(devices=[]):
            result = evaluate(self.eval_agent, self.config, episodes, seed=seed, recorder=recorder)
            if self.config.train.eval_sample:
                self.eval_agent.generator.manual_seed(seed)
                sampled = evaluate(self.eval_agent, self.config, episodes, seed=seed, greedy=False, recorder=sampled_recorder)
                result.update({f"sampled_{k}": v for k, v in sampled.items() if k != "episodes"})
            splits = self.config.train.eval_splits
            if splits:
                from llmgym.algorithms.text_evaluation import evaluate_splits, local_model

                result.update(evaluate_splits(
                    self.eval_agent, self.config, splits if label == "after" else splits[:1], run_dir=self.run_dir,
                    label=label, env_steps=self.algorithm.env_steps, model=local_model(self.llm),
                ))
        result["env_steps"] = float(self.algorithm.env_steps)
        result["label"] = label  # type: ignore[assignment]
        index = len(self.evaluations)
        self.episode_records = recorder.records(self.algorithm.env_steps, label, index)
        self.episode_records += sampled_recorder.records(self.algorithm.env_steps, label, index, "sampled")
        if self.training_sampler is not None:
            self.training_sampler.arm(index)
        if self.episode_records:
            append_episode_records(self.run_dir / EPISODES_NAME, self.episode_records)
        self.evaluations.append(result)
        self._last_eval_steps = self.algorithm.env_steps
        return result

    def _log_evaluation(self, logger: RunLogger, label: str) -> None:
        """Evaluate, then log the result and the recorded episodes."""
        result = self.evaluate(label)
        logger.log(self.algorithm.env_steps, result, kind="eval")
        logger.log_episodes(self.algorithm.env_steps, self.episode_records)

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Train until ``train.total_env_steps``; returns the summary (evaluations, paths)."""
        cfg = self.config
        logger = RunLogger(
            self.run_dir, cfg.logging, config_to_dict(cfg), total_env_steps=cfg.train.total_env_steps,
            initial_env_steps=self.algorithm.env_steps,
        )
        start = time.monotonic()
        start_steps = self.algorithm.env_steps
        try:
            if cfg.train.eval_before and cfg.train.eval_episodes and not self.evaluations:
                self._log_evaluation(logger, "before")
            while self.algorithm.env_steps < cfg.train.total_env_steps:
                tick = time.monotonic()
                metrics = self.algorithm.collect_rollout()
                metrics["collect_s"] = time.monotonic() - tick
                tick = time.monotonic()
                metrics.update(self.algorithm.update())
                metrics["update_s"] = time.monotonic() - tick
                if self.training_sampler is not None and self.training_sampler.finished:
                    training_records = self.training_sampler.take()
                    append_episode_records(self.run_dir / EPISODES_NAME, training_records)
                    logger.log_episodes(self.algorithm.env_steps, training_records)
                metrics.update(self.algorithm.episode_stats.summary())
                elapsed = max(1e-9, time.monotonic() - start)
                metrics["steps_per_s"] = (self.algorithm.env_steps - start_steps) / elapsed
                if self.algorithm.updates % cfg.logging.log_every == 0:
                    logger.log(self.algorithm.env_steps, metrics)
                logger.progress(self.algorithm.env_steps, {
                    "episodes": int(metrics.get("episodes", 0)),
                    "success": metrics.get("success_rate", float("nan")),
                    "return": metrics.get("episode_return", float("nan")),
                })
                steps = self.algorithm.env_steps
                if cfg.train.eval_every and cfg.train.eval_episodes and steps - self._last_eval_steps >= cfg.train.eval_every:
                    self._log_evaluation(logger, "periodic")
                if cfg.train.checkpoint_every and steps - self._last_checkpoint_steps >= cfg.train.checkpoint_every:
                    logger.sync()
                    self.save()
            if cfg.train.eval_episodes and (not self.evaluations or self._last_eval_steps != self.algorithm.env_steps):
                self._log_evaluation(logger, "after")
            if self._last_checkpoint_steps != self.algorithm.env_steps or not (self.run_dir / "checkpoints").exists():
                logger.sync()
                self.save()
        finally:
            logger.close()
        png = None
        if cfg.logging.plot:
            png = plot_learning_curve(logger.path, self.run_dir / "learning_curve.png", title=cfg.env.id)
        report = None
        if cfg.logging.report:
            from llmgym.report.html import write_report

            report = write_report([self.run_dir])
        return {
            "run_dir": str(self.run_dir),
            "evaluations": self.evaluations,
            "learning_curve": str(png) if png else None,
            "report": str(report) if report else None,
            "wall_time_s": time.monotonic() - start,
        }

    def close(self) -> None:
        """Release the envs, the LLM and the run folder's lock."""
        try:
            self.envs.close()
            self.llm.close()
        finally:
            self._lock.release()


def _before_after(before: Optional[dict[str, Any]], after: dict[str, Any], prefix: str) -> str:
    """``before X -> after Y (mean return ...)`` of one policy, or ``after Y (...)`` without a before-evaluation."""
    rate, ret = f"{prefix}success_rate", f"{prefix}episode_return"
    if before is None:
        return f"after {after[rate]:.3f} (mean return {after[ret]:.3f}"
    return f"before {before[rate]:.3f} -> after {after[rate]:.3f} (mean return {before[ret]:.3f} -> {after[ret]:.3f}"


def evaluation_summary(evaluations: list[dict[str, Any]], temperature: float) -> list[str]:
    """The lines ``llmgym train`` prints about a run's evaluations: success before and after training.

    The "before" side is the evaluation labelled ``"before"`` (``train.eval_before``); without one,
    only the final evaluation is reported.

    Args:
        evaluations: The run's evaluations, in order (``Trainer.evaluations``).
        temperature: ``agent.temperature``, at which the sampled policy was evaluated.

    Returns:
        No line without evaluations; one for the greedy policy, one for the sampled policy when it
        was evaluated (``train.eval_sample``), and one for the completions' fluency in a
        text-generation env (perplexity under the reference, distinct-2, the sampled policy's KL).
    """
    if not evaluations:
        return []
    last = evaluations[-1]
    before = next((e for e in evaluations if e.get("label") == "before"), None)
    before = before if before is not last else None
    lines = [f"success rate: {_before_after(before, last, '')}, {int(last['episodes'])} greedy episodes)"]
    if "sampled_success_rate" in last and (before is None or "sampled_success_rate" in before):
        lines.append(f"sampled at temperature {temperature:g}: {_before_after(before, last, 'sampled_')})")
    fluency = [
        f"{what} {_change(before, last, key)}"
        for key, what in (("perplexity_ref", "perplexity under the reference"), ("distinct-2", "distinct-2"),
                          ("sampled_perplexity_ref", "sampled: perplexity under the reference"),
                          ("sampled_distinct-2", "distinct-2"), ("sampled_kl_ref", "KL to the reference"))
        if key in last
    ]
    if fluency:
        lines.append("fluency: " + ", ".join(fluency))
    return lines


def _change(before: Optional[dict[str, Any]], after: dict[str, Any], key: str) -> str:
    """``X -> Y`` of one metric, or ``Y`` when the before-evaluation lacks it."""
    if before is None or key not in before:
        return f"{after[key]:.3f}"
    return f"{before[key]:.3f} -> {after[key]:.3f}"


def run_training(config: Config, **kwargs: Any) -> dict[str, Any]:
    """Train a config end to end and print success before vs after and the learning-curve path."""
    trainer = Trainer(config, **kwargs)
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    print(f"run directory: {summary['run_dir']}")
    for line in evaluation_summary(summary["evaluations"], trainer.config.agent.temperature):
        print(line)
    if trainer.config.train.eval_splits and summary["evaluations"]:
        from llmgym.algorithms.text_evaluation import metrics_table

        print(metrics_table(summary["evaluations"][-1], trainer.config.train.eval_splits))
    if summary["learning_curve"]:
        print(f"learning curve: {summary['learning_curve']}")
    print(f"wall time: {summary['wall_time_s']:.1f} s")
    if summary["report"]:
        print(f"report: {summary['report']}")
    return summary


def evaluate_run(
    run_dir: str | Path,
    episodes: int = 100,
    seed: int = 12345,
    overrides: tuple[str, ...] | list[str] = (),
    greedy: bool = True,
    report: bool = True,
) -> dict[str, float]:
    """Evaluate a run's latest checkpoint, or a config's untrained model, and print the result.

    With ``report``, the result and the first ``logging.record_episodes`` episodes are saved in an
    evaluation folder (``RUN_DIR/eval``, or ``train.output_dir/eval-ENV-TIME`` for a config) with
    its ``report.html``, whose path is printed.

    Args:
        run_dir: Run directory written by ``llmgym train``; or a config (a YAML file or the name
            of a shipped config, as ``llmgym train`` takes it) to evaluate the model it names
            zero-shot, before any training (with ``agent.action_head`` on, the untrained head's
            greedy actions are the LLM's own; set ``agent.action_head=false`` for the LLM's
            scoring policy when sampling).
        episodes: Number of seeded episodes (episode ``j`` uses seed ``seed + j``).
        seed: Seed of the first episode (and of the policy's sampling).
        overrides: Dotted overrides applied to the run's (or the given) config.
        greedy: Take the most likely action (``False``: sample at ``agent.temperature``, the
            policy PPO optimises).
        report: Save the evaluation folder and its report.

    Raises:
        ConfigError: ``run_dir`` is neither a run directory (a folder with ``checkpoints/``) nor a
            config file or shipped config name.
    """
    path = Path(run_dir)
    _seed_everything(seed)
    built: list[Any] = []  # the LLM, built once (a retry loads the newer checkpoint into it)

    def load(source: Optional[Path]) -> Config:
        config = load_config(source / "config.yaml" if source is not None else run_dir, list(overrides))
        if not built:
            check_env_id(config.env.id, config.env.kwargs)  # before the model loads
            built.append(build_llm(config))
        if source is not None:
            built[0].load(source / "llm")
        return config

    try:
        # A run still training may replace its checkpoint while it loads: then its newest one is read.
        folder, config = read_latest_checkpoint(path, load) if path.is_dir() else (None, load(None))
        llm = built[0]
        agent = build_agent(config, llm, _eval_width(config, episodes), _env_instructions(config))
        algo = config.algorithm
        recorder = EpisodeRecorder(config.logging.record_episodes if report else 0, llm.tokenizer, algo.gamma, algo.gae_lambda)
        result = evaluate(agent, config, episodes, seed=seed, greedy=greedy, recorder=recorder)
    finally:
        for llm in built:
            llm.close()
    policy = "greedy" if greedy else f"sampled at temperature {config.agent.temperature:g}"
    source = f"checkpoint {folder.name}" if folder is not None else f"zero-shot {config.model.name}"
    print(
        f"{config.env.id}: success rate {result['success_rate']:.3f}, mean return {result['episode_return']:.3f} "
        f"over {int(result['episodes'])} episodes, {policy} ({source})"
    )
    if report:
        from llmgym.report.html import write_report
        from llmgym.report.runs import save_evaluation

        env_steps = int(folder.name.removeprefix("step-")) if folder is not None else 0  # step-<env_steps>
        out = path / "eval" if folder is not None else new_run_dir(
            config.train.output_dir, "eval-" + default_run_stem(config.env.id, time.strftime("%Y%m%d-%H%M%S"))
        )
        records = recorder.records(env_steps, "eval", 0, "greedy" if greedy else "sampled")
        save_evaluation(out, yaml.safe_dump(config_to_dict(config), sort_keys=False), env_steps, result, records)
        print(f"report: {write_report([out])}")
    return result
