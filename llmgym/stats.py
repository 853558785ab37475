"""Statistics over runs: interquartile mean, its percentile-bootstrap interval, seed lists.

Following rliable (Agarwal et al., 2021, "Deep RL at the Edge of the Statistical Precipice"), a
handful of training runs is summarised by the interquartile mean (IQM) and a 95% percentile
bootstrap confidence interval over runs, instead of a mean alone.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from llmgym.errors import ConfigError, InputError

__all__ = ["iqm", "bootstrap_ci", "parse_int_list", "parse_seeds"]


def _trimmed_row_means(rows: np.ndarray) -> np.ndarray:
    """The 25% trimmed mean of each row of a 2-D array.

    As ``scipy.stats.trim_mean(x, 0.25)`` (which rliable's ``aggregate_iqm`` calls): sort, drop
    ``int(0.25 * n)`` values at each end, average the rest.
    """
    n = rows.shape[1]
    cut = int(0.25 * n)
    return np.sort(rows, axis=1)[:, cut : n - cut].mean(axis=1)


def _as_values(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise InputError(f"expected a non-empty 1-D sequence of numbers, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise InputError(f"values must be finite, got {array.tolist()}")
    return array


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean: the mean of the middle 50% of the values.

    ``int(0.25 * n)`` values are dropped at each end of the sorted values, as
    ``scipy.stats.trim_mean(values, 0.25)`` and rliable do: ``[1, 2, 3, 4]`` gives 2.5 and
    ``[1, 2, 3, 4, 100]`` gives 3 (the mean of 2, 3, 4); with fewer than four values it is the mean.

    Args:
        values: One score per run.

    Returns:
        The IQM.

    Raises:
        InputError: If ``values`` is empty, not 1-D or not finite.
    """
    return float(_trimmed_row_means(_as_values(values)[None, :])[0])


def bootstrap_ci(
    values: Sequence[float],
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    statistic: str = "iqm",
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the IQM (or the mean), resampling with replacement.

    Each of ``resamples`` bootstrap samples draws ``len(values)`` values with replacement; the
    interval spans the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of their
    IQMs (means). The generator is seeded, so the same values always give the same interval.

    Args:
        values: One score per run (``"iqm"``), or per episode for the mean reward of one policy.
        resamples: Number of bootstrap samples.
        confidence: Coverage of the interval, in (0, 1).
        seed: Seed of the resampling generator.
        statistic: ``"iqm"`` (over runs, as rliable) or ``"mean"``.

    Returns:
        ``(low, high)``.

    Raises:
        InputError: On empty or non-finite values, ``resamples < 1``, ``confidence`` outside (0, 1)
            or an unknown ``statistic``.
    """
    if statistic not in ("iqm", "mean"):
        raise InputError(f"statistic={statistic!r} must be 'iqm' or 'mean'.")
    array = _as_values(values)
    if resamples < 1:
        raise InputError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must lie in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    samples = array[rng.integers(0, array.size, size=(resamples, array.size))]
    alpha = (1.0 - confidence) / 2.0
    estimates = _trimmed_row_means(samples) if statistic == "iqm" else samples.mean(axis=1)
    low, high = np.quantile(estimates, [alpha, 1.0 - alpha])
    return float(low), float(high)


#: Most values ``--seeds`` and ``--threads`` may list (each value is one training run): the count is
#: checked before any list is built, so ``0-2000000000`` is refused at once instead of filling memory.
MAX_LIST_VALUES = 10_000


def parse_int_list(spec: str, option: str, minimum: int = 0, max_count: int = MAX_LIST_VALUES) -> list[int]:
    """Parse a list of integers written as ranges and commas: ``0-4``, ``0,2,5``, ``1-3,8``.

    A range ``a-b`` includes both ends. Values keep their written order.

    Args:
        spec: The text to parse.
        option: The option it came from, named in errors (e.g. ``"--seeds"``).
        minimum: The smallest allowed value.
        max_count: The most values the list may hold (checked before the list is built).

    Returns:
        The integers.

    Raises:
        ConfigError: On an empty part, a non-integer, a descending range, a value below
            ``minimum``, more than ``max_count`` values or a repeated value; the message names
            ``option`` and ``spec``.
    """
    ranges: list[tuple[int, int]] = []
    for part in spec.split(","):
        low_text, dash, high_text = part.strip().partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
        except ValueError:
            raise ConfigError(
                f"{option} {spec!r}: {part.strip()!r} is not an integer or a range a-b; "
                "write e.g. 0-4 or 0,2,5."
            ) from None
        if high < low:
            raise ConfigError(
                f"{option} {spec!r}: the range {part.strip()!r} is descending; write {high}-{low}."
            )
        if low < minimum:
            raise ConfigError(f"{option} {spec!r}: {low} is below the minimum {minimum}.")
        ranges.append((low, high))
    count = sum(high - low + 1 for low, high in ranges)
    if count > max_count:
        raise ConfigError(
            f"{option} {spec!r} lists {count} values, more than the {max_count} allowed (each is a training run); "
            "write a shorter range, e.g. 0-4."
        )
    values = [value for low, high in ranges for value in range(low, high + 1)]
    repeated = sorted(value for value, times in collections.Counter(values).items() if times > 1)
    if repeated:
        raise ConfigError(f"{option} {spec!r} repeats {repeated}.")
    return values


def parse_seeds(spec: str) -> list[int]:
    """The seeds of ``--seeds`` (non-negative integers, see :func:`parse_int_list`)."""
    return parse_int_list(spec, "--seeds")
