"""Config-driven training: collect, update, log, evaluate, checkpoint, resume.

``llmgym train CONFIG [overrides]`` calls :func:`run_training`; ``llmgym eval RUN_DIR`` calls
:func:`evaluate_run`. A run directory holds ``config.yaml`` (the resolved config),
``metrics.jsonl``, ``checkpoints/`` and, at the end, ``learning_curve.png``. The run's pieces are
built by :mod:`llmgym.run.build`; its loop is ``OnPolicyAlgorithm.learn`` with the logging, evaluation
(:mod:`llmgym.run.evaluation`) and checkpoint callbacks of this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
import torch
import yaml

from llmgym.algorithms.callbacks import Callback
from llmgym.algorithms.on_policy import OnPolicyAlgorithm
from llmgym.algorithms.registry import algorithm_class
from llmgym.checkpoint import (
    capture_rng_state,
    check_new_run_dir,
    check_resume_config,
    clean_crash_leftovers,
    has_checkpoint,
    latest_checkpoint,
    load_checkpoint_config,
    load_trainer_state,
    read_latest_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from llmgym.config import AUTO_RESUME, Config, config_to_dict, load_config, save_config
from llmgym.envs.registration import check_env_id
from llmgym.errors import CheckpointError, ConfigError
from llmgym.llm.persistence import has_mask_policy
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
from llmgym.run.build import build_agent, build_llm, env_instructions, make_envs, seed_everything
from llmgym.run.config_files import load_run_config
from llmgym.run.evaluation import eval_width, evaluate, masks_evaluation
from llmgym.run.requirements import check_requirements
from llmgym.run.stop_signals import SignalStop, StopRequest, TrainingStopped
from llmgym.run_lock import LOCK_FILE, RunLock, default_run_stem, new_run_dir

__all__ = [
    "CheckpointCallback",
    "EvalCallback",
    "RunLogCallback",
    "StopCallback",
    "TrainingStopped",
    "Trainer",
    "run_training",
    "evaluation_summary",
    "evaluate_run",
]


logger = logging.getLogger(__name__)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@dataclass
class TrainerSnapshot:
    """Everything a checkpoint holds but the LLM's state, captured at one moment of the run.

    The env action log is append-only, so it is kept as the live list and its length then (a
    snapshot costs the same at every step of a long run).

    Attributes:
        env_steps: Env steps at that moment.
        state: The JSON trainer state, without the algorithm's ``action_log``.
        tensors: RNG and generator states.
        action_log: The algorithm's action log (the live list; ``None`` when its state has none).
        action_log_length: Its length at that moment.
    """

    env_steps: int
    state: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    action_log: Optional[list[Any]]
    action_log_length: int

    def trainer_state(self) -> dict[str, Any]:
        """The trainer state as a checkpoint stores it."""
        if self.action_log is None:
            return self.state
        algorithm = {**self.state["algorithm"], "action_log": self.action_log[: self.action_log_length]}
        return {**self.state, "algorithm": algorithm}


class Trainer:
    """Runs a config: builds LLM, envs and agent, then trains with logging, evaluation and checkpoints.

    Args:
        config: The run config.
        run_dir: Run directory; default ``train.output_dir/train.run_name`` (or the folder
            ``train.resume`` names; with ``train.resume=auto``, ``train.output_dir/train.run_name``).
        model: Optional prebuilt model (tests); loaded from ``config.model`` otherwise.
        tokenizer: Its tokenizer.

    Raises:
        ConfigError: If ``env.id`` is not registered (before the run directory or the model exist), or a
            new run (no ``train.resume``) would write into a folder that already holds a run.
        RunLockedError: If another live process writes the run folder (its pid is named).
        MissingDependencyError: If the env or a setting needs an optional package that is not installed.

    The run folder is locked (``.llmgym.lock``) from here to :meth:`close`; a default run name gets a
    ``-2``, ``-3``... suffix when that folder exists already. A new run that fails to start (a model
    not found, a bad env setting) removes what it wrote there (and the folder, if it made it), so
    the same run name can be given again at once.
    """

    def __init__(
        self,
        config: Config,
        run_dir: Optional[str | Path] = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        check_requirements(config)
        self.config = config
        train = config.train
        created = False  # whether this start made the run folder (removed again if it fails to start)
        if run_dir is None and train.resume is None and not train.run_name:
            run_dir = new_run_dir(
                train.output_dir, default_run_stem(config.env.id, time.strftime("%Y%m%d-%H%M%S"))
            )
            created = True
        elif run_dir is None:
            run_dir = (
                train.resume
                if train.resume not in (None, AUTO_RESUME)
                else Path(train.output_dir) / str(train.run_name)
            )
        self.run_dir = Path(run_dir)
        created = created or not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = RunLock.acquire(self.run_dir)  # before anything is read or written there
        self._fresh = False  # set once a new run's folder is known to hold nothing of anyone's
        try:
            self._setup(config, model, tokenizer)
        except BaseException:
            if self._fresh:
                self._undo_start()
            self._lock.release()
            if self._fresh and created:  # nothing is left in it but the lock file
                (self.run_dir / LOCK_FILE).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    self.run_dir.rmdir()
            raise

    def _setup(self, config: Config, model: Any, tokenizer: Any) -> None:
        """Everything of ``__init__`` done under the run folder's lock."""
        train = config.train
        algorithm_cls = algorithm_class(
            config.algorithm.name
        )  # a user class is imported before the model loads
        mode = self._start_mode()
        if mode == "new":
            check_new_run_dir(self.run_dir)
            self._fresh = True
        clean_crash_leftovers(self.run_dir)
        checkpoint = self._resume_checkpoint() if mode == "resume" else None
        save_config(config, self.run_dir / "config.yaml")
        seed_everything(train.seed)
        self.llm = build_llm(config, model=model, tokenizer=tokenizer)
        self.system_prompt = env_instructions(config)
        self.envs = make_envs(config)
        agent_config = self._fitted_budget()
        self.agent = build_agent(agent_config, self.llm, self.envs.num_envs, self.system_prompt)
        self.algorithm: OnPolicyAlgorithm = algorithm_cls(
            self.agent, self.envs, config.algorithm, seed=train.seed
        )
        self.algorithm.total_env_steps = train.total_env_steps
        self.eval_agent = build_agent(
            agent_config, self.llm, eval_width(config, train.eval_episodes), self.system_prompt
        )
        self.evaluations: list[dict[str, float]] = []
        self.episode_records: list[EpisodeRecord] = []  # of the last evaluation
        algo = config.algorithm
        #: One training episode of env 0 after each evaluation, for the run report (None: recording off).
        self.training_sampler = (
            TrainingEpisodeSampler(
                self.agent.format_observation, self.llm.tokenizer, algo.gamma, algo.gae_lambda
            )
            if config.logging.record_episodes
            else None
        )
        self._last_checkpoint_steps = 0
        self._last_checkpoint: Optional[Path] = None
        self._last_eval_steps = 0
        #: The signal handlers while :meth:`train` runs (``None`` otherwise).
        self.signals: Optional[SignalStop] = None
        if checkpoint is not None:
            self._resume(checkpoint)

    def _undo_start(self) -> None:
        """Remove what a new run wrote in its folder before it failed to start (its lock file stays until released).

        The folder held nothing but the lock when the run started, so everything else in it is this
        start's; without it, the run's name can be given again at once.
        """
        for entry in self.run_dir.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def _fitted_budget(self) -> Config:
        """The config the agents are built from: ``agent.max_prompt_tokens`` fitted to the model window."""
        from llmgym.run.budgets import fit_prompt_budget

        backend = self.llm.backend
        try:
            return fit_prompt_budget(
                self.config,
                getattr(backend, "window", None),
                self.llm.tokenizer,
                self.envs,
                bool(getattr(backend, "is_seq2seq", False)),
            )
        except ConfigError:
            self.envs.close()
            raise

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self) -> TrainerSnapshot:
        """The trainer's state now (counters, RNG states, env replay log, evaluations), without the LLM's."""
        rng_json, rng_tensors = capture_rng_state()
        algorithm = self.algorithm.state_dict()
        action_log = algorithm.pop("action_log", None)
        state = {
            "algorithm": algorithm,
            "rng": rng_json,
            "evaluations": self.evaluations,
            "last_eval_steps": self._last_eval_steps,
        }
        tensors = {**rng_tensors, **{f"gen_{k}": v for k, v in self.algorithm.generator_states().items()}}
        return TrainerSnapshot(
            self.algorithm.env_steps,
            json.loads(json.dumps(state, default=_jsonable)),
            tensors,
            action_log,
            len(action_log) if action_log is not None else 0,
        )

    def save(self, snapshot: Optional[TrainerSnapshot] = None) -> Path:
        """Write a checkpoint of everything resume needs (atomic), keeping ``train.keep_checkpoints``.

        Args:
            snapshot: The trainer state to write (default: now). The LLM's state is the one now, so
                a snapshot taken earlier is right only while the weights have not changed since.
        """
        snapshot = snapshot if snapshot is not None else self.snapshot()
        config_yaml = yaml.safe_dump(config_to_dict(self.config), sort_keys=False)
        folder = save_checkpoint(
            self.run_dir,
            snapshot.env_steps,
            self.llm.save,
            snapshot.trainer_state(),
            snapshot.tensors,
            config_yaml,
            keep=self.config.train.keep_checkpoints,
        )
        self._last_checkpoint_steps = snapshot.env_steps
        self._last_checkpoint = folder
        return folder

    def _start_mode(self) -> Literal["new", "restart", "resume"]:
        """How the run starts: ``resume`` its folder's checkpoint, start a ``new`` run, or ``restart`` one.

        ``train.resume`` set to a folder resumes it. With ``train.resume=auto`` the folder is resumed
        when it holds a checkpoint; a folder holding a run stopped before its first checkpoint (a
        ``config.yaml`` and logs) restarts that run from the beginning (its config must allow a
        resume; its ``metrics.jsonl`` and ``episodes.jsonl`` are emptied, as a resume trims them);
        an absent or empty folder starts a new run.
        """
        resume = self.config.train.resume
        if resume != AUTO_RESUME:
            return "new" if resume is None else "resume"
        clean_crash_leftovers(self.run_dir)
        if has_checkpoint(self.run_dir):
            return "resume"
        if not (self.run_dir / "config.yaml").is_file():
            return "new"  # an empty folder; a folder of other things is refused by check_new_run_dir
        current = yaml.safe_load(yaml.safe_dump(config_to_dict(self.config), sort_keys=False))
        check_resume_config(load_checkpoint_config(self.run_dir), current, self.run_dir)
        trim_metrics(self.run_dir / "metrics.jsonl", -1)
        trim_episode_records(self.run_dir / EPISODES_NAME, -1)
        logger.warning(
            "train.resume=auto: %s holds a run stopped before its first checkpoint; starting it again.",
            self.run_dir,
        )
        return "restart"

    def _resume_checkpoint(self) -> Path:
        """The checkpoint to resume from (verified), once its config is checked against this one."""
        folder = latest_checkpoint(self.run_dir)
        current = yaml.safe_load(yaml.safe_dump(config_to_dict(self.config), sort_keys=False))
        check_resume_config(load_checkpoint_config(folder), current, folder)
        return folder

    def _resume(self, folder: Path) -> None:
        state, tensors = load_trainer_state(folder)
        self.llm.load(folder / "llm")
        generators = {k[len("gen_") :]: v for k, v in tensors.items() if k.startswith("gen_")}
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
        self._last_checkpoint = folder
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
        completed (greedily, or sampled with the same reseeded generator under
        ``train.eval_split_decoding: sample``) and scored by ``train.eval_metrics``
        (:mod:`llmgym.run.text_evaluation`).
        The first ``logging.record_episodes`` greedy episodes (and sampled ones with
        ``train.eval_sample``) are appended to ``episodes.jsonl``, and the next training episode of
        env 0 is recorded (:class:`~llmgym.report.records.TrainingEpisodeSampler`).
        """
        seed = 10_000 + self.config.train.seed
        episodes = self.config.train.eval_episodes
        algo = self.config.algorithm
        recorder = EpisodeRecorder(
            self.config.logging.record_episodes, self.llm.tokenizer, algo.gamma, algo.gae_lambda
        )
        sampled_recorder = EpisodeRecorder(
            recorder.max_episodes, self.llm.tokenizer, algo.gamma, algo.gae_lambda
        )
        with self._abandonable(), torch.random.fork_rng(devices=[]):
            result = evaluate(self.eval_agent, self.config, episodes, seed=seed, recorder=recorder)
            if self.config.train.eval_sample:
                self.eval_agent.generator.manual_seed(seed)
                sampled = evaluate(
                    self.eval_agent, self.config, episodes, seed=seed, greedy=False, recorder=sampled_recorder
                )
                result.update({f"sampled_{k}": v for k, v in sampled.items() if k != "episodes"})
            splits = self.config.train.eval_splits
            if splits:
                from llmgym.run.text_evaluation import evaluate_splits, local_model

                result.update(
                    evaluate_splits(
                        self.eval_agent,
                        self.config,
                        splits if label == "after" else splits[:1],
                        run_dir=self.run_dir,
                        label=label,
                        env_steps=self.algorithm.env_steps,
                        model=local_model(self.llm),
                        seed=seed,
                    )
                )
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

    @contextmanager
    def _abandonable(self) -> Iterator[None]:
        """A phase that changes no weight (an evaluation): a stop signal abandons it, resuming from its start."""
        if self.signals is None:
            yield
            return
        self.signals.begin_abandonable(self.snapshot())
        try:
            yield
        finally:
            self.signals.end_abandonable()

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Train until ``train.total_env_steps``; returns the summary (evaluations, paths).

        The loop is :meth:`~llmgym.algorithms.on_policy.OnPolicyAlgorithm.learn` with its
        callbacks, in order: the training-episode recorder (:attr:`training_sampler`, with
        ``logging.record_episodes``), :class:`RunLogCallback`, :class:`EvalCallback`,
        :class:`CheckpointCallback` and :class:`StopCallback`. While it runs, SIGTERM and SIGINT
        stop it with a checkpoint and ``train.checkpoint_signals`` write one
        (:mod:`llmgym.run.stop_signals`).

        Raises:
            TrainingStopped: After a stop signal, once the checkpoint, the learning curve and the
                report are written (its ``exit_status`` is the process's conventional one).
        """
        cfg = self.config
        logger = RunLogger(
            self.run_dir,
            cfg.logging,
            config_to_dict(cfg),
            total_env_steps=cfg.train.total_env_steps,
            initial_env_steps=self.algorithm.env_steps,
        )
        start = time.monotonic()
        stopped: Optional[TrainingStopped] = None
        try:
            with SignalStop(cfg.train.checkpoint_signals) as self.signals:
                callbacks: list[Callback] = [
                    *([self.training_sampler] if self.training_sampler is not None else []),
                    RunLogCallback(self, logger),
                    EvalCallback(self, logger),
                    CheckpointCallback(self, logger),
                    StopCallback(self, logger),
                ]
                try:
                    self.algorithm.learn(cfg.train.total_env_steps, callbacks)
                except StopRequest as request:
                    stopped = self._checkpoint_on_stop(request, logger)
        finally:
            self.signals = None
            logger.close()
        png = None
        if cfg.logging.plot:
            png = plot_learning_curve(logger.path, self.run_dir / "learning_curve.png", title=cfg.env.id)
        report = None
        if cfg.logging.report:
            from llmgym.report.html import write_report

            report = write_report([self.run_dir])
        if stopped is not None:
            raise stopped
        return {
            "run_dir": str(self.run_dir),
            "evaluations": self.evaluations,
            "learning_curve": str(png) if png else None,
            "report": str(report) if report else None,
            "wall_time_s": time.monotonic() - start,
        }

    def _checkpoint_on_stop(self, request: StopRequest, logger: RunLogger) -> TrainingStopped:
        """The checkpoint of a stopped run: its restore point's state (or the state now), unless already saved."""
        snapshot = request.restore_point if request.restore_point is not None else self.snapshot()
        if self._last_checkpoint is not None and self._last_checkpoint_steps == snapshot.env_steps:
            folder = self._last_checkpoint
        else:
            logger.sync()
            folder = self.save(snapshot)
        return TrainingStopped(request.signum, folder, snapshot.env_steps)

    def close(self) -> None:
        """Release the envs, the LLM and the run folder's lock."""
        try:
            self.envs.close()
            self.llm.close()
        finally:
            self._lock.release()


class RunLogCallback(Callback):
    """Logs every ``logging.log_every``-th update to the run's metrics, the progress line, and training episodes.

    Adds ``collect_s`` and ``update_s`` (seconds of the rollout and of its update) and ``steps_per_s``
    (env steps since training started, per second) to each iteration's metrics.

    Args:
        trainer: The trainer whose run is logged.
        logger: The run's logger.
    """

    def __init__(self, trainer: Trainer, logger: RunLogger) -> None:
        self.trainer = trainer
        self.logger = logger
        self._start = self._tick = time.monotonic()
        self._start_steps = 0

    def on_training_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """Start the clock of ``steps_per_s``."""
        self._start = time.monotonic()
        self._start_steps = algorithm.env_steps

    def on_rollout_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """Start the clock of ``collect_s``."""
        self._tick = time.monotonic()

    def on_rollout_end(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """Add ``collect_s``, the rollout's seconds; start the clock of ``update_s``."""
        metrics["collect_s"] = time.monotonic() - self._tick
        self._tick = time.monotonic()

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """Append a finished training episode to ``episodes.jsonl``; log the metrics and the progress."""
        metrics["update_s"] = time.monotonic() - self._tick
        sampler = self.trainer.training_sampler
        if sampler is not None and sampler.finished:
            training_records = sampler.take()
            append_episode_records(self.trainer.run_dir / EPISODES_NAME, training_records)
            self.logger.log_episodes(algorithm.env_steps, training_records)
        elapsed = max(1e-9, time.monotonic() - self._start)
        metrics["steps_per_s"] = (algorithm.env_steps - self._start_steps) / elapsed
        if algorithm.updates % self.trainer.config.logging.log_every == 0:
            self.logger.log(algorithm.env_steps, metrics)
        self.logger.progress(
            algorithm.env_steps,
            {
                "episodes": int(metrics.get("episodes", 0)),
                "success": metrics.get("success_rate", float("nan")),
                "return": metrics.get("episode_return", float("nan")),
            },
        )


class EvalCallback(Callback):
    """Evaluates before training (``train.eval_before``), every ``train.eval_every`` env steps, and after.

    Args:
        trainer: The trainer whose agent is evaluated (:meth:`Trainer.evaluate`).
        logger: The run's logger, which gets each evaluation and its recorded episodes.
    """

    def __init__(self, trainer: Trainer, logger: RunLogger) -> None:
        self.trainer = trainer
        self.logger = logger

    def _evaluate(self, algorithm: OnPolicyAlgorithm, label: str) -> None:
        result = self.trainer.evaluate(label)
        self.logger.log(algorithm.env_steps, result, kind="eval")
        self.logger.log_episodes(algorithm.env_steps, self.trainer.episode_records)

    def _periodic_due(self, algorithm: OnPolicyAlgorithm) -> bool:
        train = self.trainer.config.train
        return bool(
            train.eval_every
            and train.eval_episodes
            and algorithm.env_steps - self.trainer._last_eval_steps >= train.eval_every
        )

    def on_training_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """The ``before`` evaluation, unless the run already has evaluations (a resume).

        A resumed run whose ``periodic`` evaluation is due evaluates first: a run stopped during an
        evaluation abandoned it, and its checkpoint is the state before it.
        """
        train = self.trainer.config.train
        if train.eval_before and train.eval_episodes and not self.trainer.evaluations:
            self._evaluate(algorithm, "before")
        elif algorithm.env_steps > 0 and self._periodic_due(algorithm):
            self._evaluate(algorithm, self._periodic_label(algorithm))

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """A ``periodic`` evaluation once ``train.eval_every`` env steps passed since the last one.

        At the last update (the budget reached) it is the ``after`` evaluation, which
        :meth:`on_training_end` then does not repeat.
        """
        if self._periodic_due(algorithm):
            self._evaluate(algorithm, self._periodic_label(algorithm))

    @staticmethod
    def _periodic_label(algorithm: OnPolicyAlgorithm) -> str:
        """``after`` for the evaluation at the budget (every split), else ``periodic`` (the first split)."""
        last = algorithm.total_env_steps is not None and algorithm.env_steps >= algorithm.total_env_steps
        return "after" if last else "periodic"

    def on_training_end(self, algorithm: OnPolicyAlgorithm) -> None:
        """The ``after`` evaluation, unless the last one was at these env steps and covered every split.

        A periodic evaluation covers only the first of ``train.eval_splits``: when it falls on the last
        update (``eval_every`` divides the total), the final evaluation still runs on all of them, as
        RL4LMs evaluates val and test after its last iteration.
        """
        trainer = self.trainer
        covered = (
            bool(trainer.evaluations)
            and trainer._last_eval_steps == algorithm.env_steps
            and (
                len(trainer.config.train.eval_splits) <= 1 or trainer.evaluations[-1].get("label") == "after"
            )
        )
        if trainer.config.train.eval_episodes and not covered:
            self._evaluate(algorithm, "after")


class CheckpointCallback(Callback):
    """Saves a checkpoint every ``train.checkpoint_every`` env steps and at the end (:meth:`Trainer.save`).

    Args:
        trainer: The trainer whose run is saved.
        logger: The run's logger, flushed before each checkpoint.
    """

    def __init__(self, trainer: Trainer, logger: RunLogger) -> None:
        self.trainer = trainer
        self.logger = logger

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """A checkpoint once ``train.checkpoint_every`` env steps passed since the last one."""
        every = self.trainer.config.train.checkpoint_every
        if every and algorithm.env_steps - self.trainer._last_checkpoint_steps >= every:
            self.logger.sync()
            self.trainer.save()

    def on_training_end(self, algorithm: OnPolicyAlgorithm) -> None:
        """The final checkpoint, unless the last one was at these env steps."""
        if (
            self.trainer._last_checkpoint_steps != algorithm.env_steps
            or not (self.trainer.run_dir / "checkpoints").exists()
        ):
            self.logger.sync()
            self.trainer.save()


class StopCallback(Callback):
    """Acts on the run's signals (:attr:`Trainer.signals`): a rollout may be abandoned, a step's end stops or saves.

    Each rollout is abandonable: it begins with a restore point (:meth:`Trainer.snapshot`), the
    state a stop signal during it checkpoints. After each update (and the callbacks before this
    one), a stop asked for meanwhile stops the run, and a checkpoint signal writes a checkpoint.

    Args:
        trainer: The trainer whose run is stopped or saved.
        logger: The run's logger, flushed before a checkpoint.
    """

    def __init__(self, trainer: Trainer, logger: RunLogger) -> None:
        self.trainer = trainer
        self.logger = logger

    def on_rollout_start(self, algorithm: OnPolicyAlgorithm) -> None:
        """The rollout may be abandoned from here (a stop asked for already stops at once)."""
        if self.trainer.signals is not None:
            self.trainer.signals.begin_abandonable(self.trainer.snapshot())

    def on_rollout_end(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """The update comes next: it is finished before a stop."""
        if self.trainer.signals is not None:
            self.trainer.signals.end_abandonable()

    def on_update(self, algorithm: OnPolicyAlgorithm, metrics: dict[str, float]) -> None:
        """Stop if asked to; write a checkpoint if a checkpoint signal came (unless one is at this step).

        Raises:
            StopRequest: When a stop signal came during the step.
        """
        signals = self.trainer.signals
        if signals is None:
            return
        signals.raise_if_requested()
        if signals.take_checkpoint_request() and self.trainer._last_checkpoint_steps != algorithm.env_steps:
            self.logger.sync()
            self.trainer.save()


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
        for key, what in (
            ("perplexity_ref", "perplexity under the reference"),
            ("distinct-2", "distinct-2"),
            ("sampled_perplexity_ref", "sampled: perplexity under the reference"),
            ("sampled_distinct-2", "distinct-2"),
            ("sampled_kl_ref", "KL to the reference"),
        )
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
        from llmgym.run.text_evaluation import metrics_table

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
    its ``report.html``, whose path is printed. An NLPO config with ``algorithm.nlpo.evaluate_masked``
    decodes under the mask policy the checkpoint saved (zero-shot, or a checkpoint without one: a
    snapshot of the evaluated policy, as NLPO takes before its first rollout).

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
    seed_everything(seed)
    built: list[Any] = []  # the LLM, built once (a retry loads the newer checkpoint into it)

    def load(source: Optional[Path]) -> Config:
        # a run's own config.yaml is llmgym's; a config argument may be an RL4LMs file
        config = (
            load_config(source / "config.yaml", list(overrides))
            if source is not None
            else load_run_config(run_dir, list(overrides))
        )
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
        if masks_evaluation(config) and (folder is None or not has_mask_policy(folder / "llm")):
            # no snapshot to mask with: NLPO's first one, the policy as it is evaluated (trained from, zero-shot)
            llm.refresh_mask_policy()
        agent = build_agent(config, llm, eval_width(config, episodes), env_instructions(config))
        algo = config.algorithm
        recorder = EpisodeRecorder(
            config.logging.record_episodes if report else 0, llm.tokenizer, algo.gamma, algo.gae_lambda
        )
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
        out = (
            path / "eval"
            if folder is not None
            else new_run_dir(
                config.train.output_dir,
                "eval-" + default_run_stem(config.env.id, time.strftime("%Y%m%d-%H%M%S")),
            )
        )
        records = recorder.records(env_steps, "eval", 0, "greedy" if greedy else "sampled")
        save_evaluation(
            out, yaml.safe_dump(config_to_dict(config), sort_keys=False), env_steps, result, records
        )
        print(f"report: {write_report([out])}")
    return result
