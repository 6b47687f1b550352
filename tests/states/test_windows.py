"""Tapered windows (weighted Pearson) and windows in seconds."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from connscale import dynamic_correlation
from connscale._validation import check_window, to_timepoints
from connscale.datasets import simulate_states
from connscale.fc.triu import matrix_to_vec
from connscale.fc.windows import taper_weights, window_support


def _weighted_pearson(segment, weights):
    mean = (weights[:, None] * segment).sum(axis=0) / weights.sum()
    centred = segment - mean
    cov = (weights[:, None] * centred).T @ centred
    scale = np.sqrt(np.diag(cov))
    return cov / np.outer(scale, scale)


def test_taper_is_a_rectangle_convolved_with_a_gaussian():
    weights = taper_weights(22, 3.0)
    assert weights.size == window_support(22, "gaussian", 3.0) == 22 + 2 * 9
    t = np.arange(weights.size) - 9  # rectangle on [0, 22)
    from scipy.special import erf

    exact = 0.5 * (erf((t + 0.5) / (3 * np.sqrt(2))) - erf((t - 21.5) / (3 * np.sqrt(2))))
    assert_allclose(weights, exact / exact.max(), atol=0.01)
    assert_allclose(weights, weights[::-1])


@pytest.mark.parametrize("dtype, atol", [("float64", 1e-12), ("float32", 2e-6)])
def test_tapered_windows_equal_weighted_pearson(dtype, atol):
    x = np.random.default_rng(0).standard_normal((90, 6))
    result = dynamic_correlation(
        x, 12, 5, taper="gaussian", taper_sigma=2.0, device="cpu", dtype=dtype
    )
    weights = taper_weights(12, 2.0)
    assert result.window_length == weights.size == 24
    assert len(result) == (90 - 24) // 5 + 1
    for i, start in enumerate(result.window_starts):
        reference = _weighted_pearson(x[start : start + weights.size], weights)
        assert_allclose(result[i], matrix_to_vec(reference), atol=atol)


def test_windows_in_seconds():
    assert to_timepoints("44s", "window_length", t_r=2.0) == 22
    assert to_timepoints("44 S", "window_length", t_r=0.72) == 61
    assert to_timepoints("30", "step") == 30
    assert check_window("20s", "4s", 100, minimum=3, t_r=2.0) == (10, 2)
    x = np.random.default_rng(1).standard_normal((60, 4))
    seconds = dynamic_correlation(x, "30s", "6s", t_r=1.5, device="cpu")
    points = dynamic_correlation(x, 20, 4, device="cpu")
    assert_allclose(np.stack(list(seconds)), np.stack(list(points)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"value": "44s"}, "repetition time is unknown"),
        ({"value": "44 seconds"}, "time points or of seconds"),
        ({"value": "-4s", "t_r": 2.0}, "positive duration"),
        ({"value": "4s", "t_r": 0.0}, "'t_r' must be a number > 0"),
    ],
)
def test_bad_durations(kwargs, message):
    with pytest.raises(ValueError, match=message):
        to_timepoints(kwargs.pop("value"), "window_length", **kwargs)


def test_tapered_window_longer_than_the_series():
    with pytest.raises(ValueError, match="spans 40"):
        dynamic_correlation(
            np.random.default_rng(0).standard_normal((30, 3)), 22, taper="gaussian", device="cpu"
        )


def test_simulated_states_have_the_planted_correlations():
    cohort = simulate_states(1, 6, 3000, min_dwell=500, max_dwell=600, random_state=0)
    states, series = cohort.states[0], cohort.timeseries[0]
    for j in range(cohort.n_states):
        observed = np.corrcoef(series[states == j], rowvar=False)
        assert_allclose(observed, cohort.state_correlations[j], atol=0.12)
    change = np.flatnonzero(np.diff(states))
    assert (np.diff(change) >= 500).all()
