"""Degree centrality against float64 numpy references."""

import numpy as np
import pytest
import torch

import connscale
from connscale._compute import MemoryLimitError, MemoryPlanner
from connscale.maps.degree import DEFAULT_THRESHOLD, compute_degree

from ._reference import check_counts, check_sums, reference_degree, simulated

THRESHOLDS = [-0.1, 0.2, 0.5]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("absolute", [False, True])
def test_degree_matches_reference(device, dtype, absolute):
    x = simulated()
    thresholds = [abs(t) for t in THRESHOLDS] if absolute else THRESHOLDS
    counts, sums = compute_degree(
        x, thresholds, absolute=absolute, device=device, dtype=dtype, both=True
    )[0]
    binary = connscale.degree_centrality(
        x, thresholds, absolute=absolute, device=device, dtype=dtype
    )
    weighted = connscale.degree_centrality(
        x, thresholds, absolute=absolute, weighted=True, device=device, dtype=dtype
    )
    np.testing.assert_array_equal(binary, counts)
    np.testing.assert_array_equal(weighted, sums)
    assert binary.shape == (3, x.shape[1])
    for i, theta in enumerate(thresholds):
        ref_counts, ref_sums, near = reference_degree(x, theta, absolute=absolute)
        assert ref_counts.sum() > 0
        check_counts(binary[i], ref_counts, near)
        check_sums(weighted[i], ref_sums, near, theta)


def test_several_thresholds_equal_separate_passes(device):
    x = simulated(seed=1)
    together = connscale.degree_centrality(x, THRESHOLDS, weighted=True, device=device)
    for i, theta in enumerate(THRESHOLDS):
        alone = connscale.degree_centrality(x, theta, weighted=True, device=device)
        assert alone.shape == (x.shape[1],)
        np.testing.assert_allclose(together[i], alone, rtol=1e-12)


def test_small_memory_limit_equals_one_shot(device):
    x = simulated(seed=2)
    one_shot, info = compute_degree(x, THRESHOLDS, weighted=True, device=device, dtype="float64")
    tiled, tiled_info = compute_degree(
        x, THRESHOLDS, weighted=True, device=device, dtype="float64", memory_limit=200_000
    )
    if info["method"] == "torch":
        assert tiled_info["block_rows"] < 20 < info["block_rows"]
    np.testing.assert_allclose(tiled, one_shot, rtol=1e-10, atol=1e-10)


def test_too_small_memory_limit_is_a_clear_error():
    # The normalised series (72 KB) fit; not a row of correlations beside them.
    with pytest.raises(ValueError, match="'memory_limit' is too small"):
        connscale.degree_centrality(simulated(), 0.3, device="cpu", memory_limit=80_000)


def test_the_limit_bounds_the_normalisation_too():
    with pytest.raises(MemoryLimitError, match=r"The normalised series \(300 series"):
        connscale.degree_centrality(simulated(), 0.3, device="cpu", memory_limit=1000)


def test_a_planner_passed_in_bounds_the_call_and_gets_its_work_back():
    planner = MemoryPlanner(torch.device("cpu"), "64MB")
    planner.reserve_host(1000)  # what the task keeps already
    maps = connscale.degree_centrality(simulated(), 0.3, device="cpu", memory_limit=planner)
    np.testing.assert_array_equal(maps, connscale.degree_centrality(simulated(), 0.3, device="cpu"))
    assert (planner.device_bytes, planner.host_bytes) == (1000, 1000)
    planner.reserve_host(planner.host_left - 50_000)
    with pytest.raises(MemoryLimitError):
        connscale.degree_centrality(simulated(), 0.3, device="cpu", memory_limit=planner)


@pytest.mark.parametrize("absolute", [False, True])
def test_sparsity_picks_the_exact_global_quantile(device, absolute):
    x = simulated(seed=3)
    n = x.shape[1]
    r = np.corrcoef(x.T)[np.triu_indices(n, 1)]
    v = np.sort(np.abs(r) if absolute else r)[::-1]
    fractions = [0.01, 0.2]
    maps, info = compute_degree(x, sparsity=fractions, absolute=absolute, device=device)
    for i, p in enumerate(fractions):
        k = round(p * v.size)
        assert info["thresholds"][i] == pytest.approx(v[k - 1], abs=1e-6)
        ties = int(np.sum(np.abs(v - v[k - 1]) < 1e-6))
        assert abs(maps[i].sum() - 2 * k) <= 2 * ties
        ref_counts, _, near = reference_degree(x, np.nextafter(v[k - 1], -1), absolute=absolute)
        check_counts(maps[i], ref_counts, near)


def test_constant_series_are_nan_and_left_out(device):
    x = simulated(seed=4, n_series=50)
    x[:, 7] = 3.0
    with pytest.warns(connscale.ConstantSeriesWarning):
        maps = connscale.degree_centrality(x, 0.2, weighted=True, device=device)
    assert np.isnan(maps[7]) and np.isfinite(np.delete(maps, 7)).all()
    keep = np.delete(np.arange(50), 7)
    ref_counts, ref_sums, near = reference_degree(x[:, keep], 0.2)
    check_sums(maps[keep], ref_sums, near, 0.2)


def test_threshold_auto_is_the_default_or_steps_aside_for_sparsity():
    x = simulated(seed=5, n_series=40)
    np.testing.assert_array_equal(
        connscale.degree_centrality(x, device="cpu"),
        connscale.degree_centrality(x, DEFAULT_THRESHOLD, device="cpu"),
    )
    by_fraction = connscale.degree_centrality(x, sparsity=0.1, device="cpu")
    np.testing.assert_array_equal(
        by_fraction, connscale.degree_centrality(x, None, sparsity=0.1, device="cpu")
    )
    assert by_fraction.sum() == 2 * round(0.1 * 40 * 39 / 2)  # no ties in simulated data


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"threshold": 2.0}, "threshold"),
        ({"threshold": DEFAULT_THRESHOLD, "sparsity": 0.1}, "not both; got threshold=0.25"),
        ({"threshold": None}, "needs a 'threshold' or a 'sparsity'"),
        ({"threshold": 0.2, "sparsity": 0.1}, "not both"),
        ({"threshold": None, "sparsity": 0.0}, "sparsity"),
        ({"threshold": -0.2, "absolute": True}, "absolute"),
        (
            {
                "threshold": [],
            },
            "non-empty",
        ),
        ({"weighted": "yes"}, "weighted"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        connscale.degree_centrality(simulated(n_series=10), device="cpu", **kwargs)
