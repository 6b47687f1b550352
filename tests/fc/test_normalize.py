"""Near-constant but valid series: centred in float64 before normalising, so
static, dynamic and pair correlations match ``np.corrcoef`` in float64."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

from connscale import correlation
from connscale.fc.dynamic import dynamic_correlation
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.pairs import pairwise_dfc

# float32: the GEMM's rounding; float64: far below the 1e-5 signal on a 1e6
# offset (centring is exact, only the mean's rounding is left, and removed).
ATOL = {"float32": 2e-6, "float64": 1e-8}
W, STEP = 20, 10


@pytest.fixture(scope="module")
def near_constant():
    x = 1e6 + 1e-5 * np.random.default_rng(0).standard_normal((60, 5))
    x[:, 4] = 1e6  # exactly constant: its correlations are undefined
    return x


def _windows_reference(x):
    rows, cols = np.triu_indices(x.shape[1], 1)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.array(
            [np.corrcoef(x[s : s + W].T)[rows, cols] for s in range(0, x.shape[0] - W + 1, STEP)]
        )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_static_near_constant_matches_corrcoef(near_constant, dtype):
    with pytest.warns(ConstantSeriesWarning, match="1 of 5 series are constant"):
        r = correlation(near_constant, device="cpu", dtype=dtype)
    assert_allclose(r[:4, :4], np.corrcoef(near_constant[:, :4].T), atol=ATOL[dtype], rtol=0)
    assert np.isnan(r[4, :4]).all() and np.isnan(r[:4, 4]).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dynamic_near_constant_matches_corrcoef(near_constant, dtype):
    with pytest.warns(ConstantSeriesWarning):
        result = dynamic_correlation(near_constant, W, STEP, device="cpu", dtype=dtype)
    got = np.array([result[i] for i in range(len(result))])
    assert_allclose(got, _windows_reference(near_constant), atol=ATOL[dtype], rtol=0)
    assert result.constant[:, 4].all() and not result.constant[:, :4].any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pairs_near_constant_matches_corrcoef(near_constant, dtype):
    with pytest.warns(ConstantSeriesWarning):
        result = pairwise_dfc(near_constant[None], W, STEP, device="cpu", dtype=dtype)
    assert_allclose(
        result.courses[0].T, _windows_reference(near_constant), atol=ATOL[dtype], rtol=0
    )
    assert result.n_constant == len(result.window_starts)  # series 4, every window


def test_window_far_from_the_series_mean_keeps_its_variation():
    # A step of 1e4 between halves, 1e-6 noise within: each window is valid.
    rng = np.random.default_rng(1)
    x = np.repeat([[0.0], [1e4]], 30, axis=0) + 1e-6 * rng.standard_normal((60, 4))
    reference = _windows_reference(x)
    windows = [0, 1, 3, 4]  # not straddling the step
    result = dynamic_correlation(x, W, STEP, device="cpu", dtype="float64")
    got = np.array([result[i] for i in windows])
    assert_allclose(got, reference[windows], atol=1e-8, rtol=0)
    pairs = pairwise_dfc(x[None], W, STEP, device="cpu", dtype="float64")
    assert_allclose(pairs.courses[0].T[windows], reference[windows], atol=1e-8, rtol=0)
