"""Evaluation over whole datapool splits, as RL4LMs runs it (``train.eval_splits``, ``train.eval_metrics``).

Every sample of a split (``val``, ``test``...) of a datapool env such as ``llmgym/TextGen-v0`` is
completed by the agent, greedily or sampled as its rollouts are (``train.eval_split_decoding``), the
split's texts are scored by the configured :mod:`llmgym.text_metrics` metrics (corpus-level), and the
prompts, completions, references and rewards, with each metric's per-sample score where it has them
(``lexical/rouge_l_max``...), are saved as one JSONL file per split and evaluation under ``predictions/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from llmgym.agents.base import BaseAgent
from llmgym.config import Config
from llmgym.errors import BackendError, ConfigError
from llmgym.run.evaluation import EpisodeStep, evaluated_policy, play_episodes
from llmgym.text_metrics import MetricContext, MetricSpec, compute_metrics

if TYPE_CHECKING:
    from llmgym.llm.client import LLM

__all__ = ["evaluate_splits", "metrics_table", "local_model"]


def local_model(llm: LLM) -> Any:
    """The policy's ``transformers`` model when it lives in this process, else ``None`` (Ray servers)."""
    try:
        return llm.model
    except BackendError:
        return None


def _split_env_kwargs(config: Config, split: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(config.env.kwargs)
    kwargs["datapool_kwargs"] = {**dict(kwargs.get("datapool_kwargs") or {}), "split": split}
    return kwargs


@contextmanager
def _seeded(agent: BaseAgent, seed: int) -> Iterator[None]:
    """Sampling seeded with ``seed``, the caller's random state kept.

    The agent's generator (candidate choices) and torch's default generators (``transformers``
    sampling in this process, CPU and every CUDA device) are reseeded; torch's are restored after.
    """
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count()))):
        torch.manual_seed(seed)
        agent.generator.manual_seed(seed)
        yield


def _complete(
    agent: BaseAgent, config: Config, split: str, limit: int | None, greedy: bool
) -> list[dict[str, Any]]:
    """Run the agent on every sample of ``split`` (at most ``limit``), greedily or sampled; one record per sample."""
    import gymnasium as gym

    first = gym.make(config.env.id, **_split_env_kwargs(config, split))
    samples = getattr(first.unwrapped, "samples", None)
    if samples is None:
        first.close()
        raise ConfigError(
            f"train.eval_splits needs a datapool env (its samples split by datapool_kwargs.split); {config.env.id!r} "
            "has none. Fix: use llmgym/TextGen-v0 or leave train.eval_splits empty."
        )
    count = len(samples) if limit is None else min(limit, len(samples))
    width = max(1, min(agent.num_envs, count))
    shared = {**dict(config.env.kwargs), "datapool": samples, "datapool_kwargs": {}}
    envs = [first, *(gym.make(config.env.id, **shared) for _ in range(width - 1))]
    records: list[dict[str, Any]] = [{} for _ in range(count)]
    returns = [0.0] * count

    def on_step(step: EpisodeStep) -> None:
        index = step.episode
        returns[index] += step.reward
        if step.done:
            sample = samples[index]
            obs = step.next_observation
            records[index] = {
                "index": index,
                "prompt": sample.prompt,
                "completion": step.info.get("completion", obs["completion"] if isinstance(obs, dict) else ""),
                "references": list(sample.references),
                "reward": returns[index],
                "metadata": dict(sample.metadata),
                "decoding": "greedy" if greedy else "sample",
            }

    try:
        with evaluated_policy(agent, config):
            play_episodes(
                agent,
                envs,
                count,
                lambda env, index: env.reset(seed=index, options={"index": index}),
                on_step,
                greedy,
            )
    finally:
        for env in envs:
            env.close()
    return records


def evaluate_splits(
    agent: BaseAgent,
    config: Config,
    splits: Sequence[str],
    *,
    run_dir: Path,
    label: str,
    env_steps: int,
    model: Any = None,
    seed: int = 0,
) -> dict[str, float]:
    """Complete and score every sample of each split; save the predictions.

    With ``train.eval_split_decoding: sample`` the completions are drawn as the rollouts draw them
    (``agent.act_batch(greedy=False)``: the agent's temperature, top-k, top-p and minimum length),
    seeded with ``seed`` before each split (the agent's generator and torch's, restored after), so
    the same seed, split and ``agent.num_envs`` (the batch drawn in) give the same predictions from an in-process model
    (LLM servers, ``distributed``, sample with their own generators). An NLPO config's agent decodes
    under the mask, greedy or sampled, with ``algorithm.nlpo.evaluate_masked`` (as RL4LMs' maskable
    policies do: :func:`~llmgym.run.evaluation.evaluated_policy`).

    Args:
        agent: The agent.
        config: The run's config (``env`` builds the split's env; ``train.eval_metrics``,
            ``train.eval_max_samples``, ``train.eval_split_decoding``).
        splits: The datapool splits to evaluate.
        run_dir: The run directory; predictions go to ``predictions/{label}_{env_steps}_{split}.jsonl``
            (``..._{split}_sampled.jsonl`` when sampled; one line per sample: prompt, completion,
            references, reward, metadata, the decoding and the per-sample metric scores).
        label: The evaluation's label (``before``, ``periodic``, ``after``).
        env_steps: Env steps trained so far.
        model: The policy's ``transformers`` model, for metrics that score with it (perplexity).
        seed: The sampling generator's seed (sampled decoding only).

    Returns:
        ``{split}/{metric name}`` corpus scores and ``{split}/episode_return`` (the mean reward);
        sampled: ``{split}/sampled/{metric name}`` and ``{split}/sampled/episode_return``.
    """
    sampled = config.train.eval_split_decoding == "sample"
    prefix, suffix = ("sampled/", "_sampled") if sampled else ("", "")
    specs = [MetricSpec(str(m["id"]), dict(m.get("args") or {})) for m in config.train.eval_metrics]
    out_dir = run_dir / "predictions"
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, float] = {}
    for split in splits:
        if sampled:
            with _seeded(agent, seed):
                records = _complete(agent, config, split, config.train.eval_max_samples, greedy=False)
        else:
            records = _complete(agent, config, split, config.train.eval_max_samples, greedy=True)
        values = compute_metrics(
            specs,
            [r["prompt"] for r in records],
            [r["completion"] for r in records],
            [r["references"] for r in records],
            [r["metadata"] for r in records],
            context=MetricContext(split, model),
        )
        for name, value in values.items():  # RL4LMs' per-sample scores, under their metric names
            if value.per_sample is not None and len(value.per_sample) == len(records):
                for record, score in zip(records, value.per_sample):
                    record[name] = score
        path = out_dir / f"{label}_{env_steps}_{split}{suffix}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, default=str) + "\n")
        result[f"{split}/{prefix}episode_return"] = sum(r["reward"] for r in records) / max(1, len(records))
        result.update({f"{split}/{prefix}{name}": value.corpus for name, value in values.items()})
    return result


def metrics_table(result: dict[str, Any], splits: Sequence[str]) -> str:
    """The split metrics of an evaluation as a text table: one row per metric, one column per split."""
    names = sorted({k.split("/", 1)[1] for k in result for s in splits if k.startswith(f"{s}/")})
    if not names:
        return ""
    width = max(len(n) for n in names)
    lines = [f"{'metric':<{width}}  " + "  ".join(f"{s:>10}" for s in splits)]
    for name in names:
        cells = [result.get(f"{s}/{name}") for s in splits]
        lines.append(
            f"{name:<{width}}  "
            + "  ".join(f"{c:>10.4f}" if isinstance(c, float) else f"{'-':>10}" for c in cells)
        )
    return "\n".join(lines)
