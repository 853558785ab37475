"""IQM, its bootstrap interval and the seed parser, against hand computations."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmgym.errors import ConfigError, InputError
from llmgym.stats import bootstrap_ci, iqm, parse_int_list, parse_seeds


def test_iqm_of_four_values_is_the_mean_of_the_middle_two():
    assert iqm([4, 1, 3, 2]) == 2.5


def test_iqm_drops_int_quarter_of_the_values_at_each_end():
    assert iqm([1, 2, 3, 4, 100]) == 3.0  # int(1.25) = 1 dropped each end: (2 + 3 + 4) / 3
    assert iqm([0, 10, 1, 2, 3, 4, 5, -50]) == 2.5  # 2 dropped each end: (1 + 2 + 3 + 4) / 4
    assert iqm([5.0]) == 5.0 and iqm([1, 2, 9]) == 4.0  # fewer than four values: the mean


def test_iqm_rejects_empty_and_non_finite_input():
    with pytest.raises(InputError):
        iqm([])
    with pytest.raises(InputError):
        iqm([1.0, float("nan")])


def test_bootstrap_interval_contains_the_iqm_and_is_reproducible():
    values = [0.2, 0.4, 0.5, 0.55, 0.6, 0.9]
    low, high = bootstrap_ci(values)
    assert low < iqm(values) < high
    assert bootstrap_ci(values) == (low, high)
    assert bootstrap_ci(values, seed=1) != (low, high)
    assert min(values) <= low and high <= max(values)


def test_bootstrap_interval_of_constant_runs_has_zero_width():
    assert bootstrap_ci([0.75] * 5) == (0.75, 0.75)
    assert bootstrap_ci([3.0]) == (3.0, 3.0)


def test_bootstrap_of_the_mean_matches_a_hand_resampling():
    values = [0.0, 1.0, 0.0, 0.5, 1.0, 0.25]
    rng = np.random.default_rng(3)
    means = np.asarray(values)[rng.integers(0, 6, size=(500, 6))].mean(axis=1)
    assert bootstrap_ci(values, resamples=500, seed=3, statistic="mean") == pytest.approx(
        tuple(np.quantile(means, [0.025, 0.975]))
    )
    assert bootstrap_ci(values, resamples=500, seed=3, statistic="mean") != bootstrap_ci(
        values, resamples=500, seed=3
    )


def test_bootstrap_rejects_bad_arguments():
    with pytest.raises(InputError):
        bootstrap_ci([1.0, 2.0], resamples=0)
    with pytest.raises(InputError):
        bootstrap_ci([1.0, 2.0], confidence=1.0)
    with pytest.raises(InputError, match="statistic"):
        bootstrap_ci([1.0, 2.0], statistic="median")


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=12))
def test_iqm_and_interval_lie_within_the_values(values):
    low, high = bootstrap_ci(values, resamples=200)
    slack = 1e-9 * (1 + max(abs(v) for v in values))
    assert min(values) - slack <= low <= high + slack
    assert high <= max(values) + slack
    assert min(values) - slack <= iqm(values) <= max(values) + slack


@given(st.lists(finite, min_size=1, max_size=12), finite)
def test_iqm_and_interval_move_with_a_shift_of_every_value(values, shift):
    shifted = [v + shift for v in values]
    assert iqm(shifted) == pytest.approx(iqm(values) + shift, abs=1e-6)
    assert np.allclose(
        bootstrap_ci(shifted, resamples=200), np.add(bootstrap_ci(values, resamples=200), shift), atol=1e-6
    )


def test_parse_seeds_reads_ranges_and_commas():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,2,5") == [0, 2, 5]
    assert parse_seeds(" 1-3, 8 ") == [1, 2, 3, 8]
    assert parse_seeds("7") == [7]


@pytest.mark.parametrize("spec", ["", "a", "1,", "4-1", "1-2-3", "-1", "0-2,2", "1.5"])
def test_parse_seeds_rejects_bad_specs_naming_them(spec):
    with pytest.raises(ConfigError, match=rf"--seeds '{spec}'"):
        parse_seeds(spec)


def test_parse_int_list_enforces_the_minimum():
    assert parse_int_list("1,2", "--threads", minimum=1) == [1, 2]
    with pytest.raises(ConfigError, match="--threads '0,1': 0 is below the minimum 1"):
        parse_int_list("0,1", "--threads", minimum=1)
