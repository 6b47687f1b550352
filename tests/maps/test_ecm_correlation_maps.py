"""Eigenvector centrality, global and seed correlation against numpy."""

import numpy as np
import pytest

import connscale

from ._reference import simulated


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ecm_is_the_leading_eigenvector_of_r_plus_one(device, dtype):
    x = simulated(n_series=200)
    values, vectors = np.linalg.eigh(np.corrcoef(x.T) + 1.0)
    expected = np.abs(vectors[:, -1])
    ecm = connscale.eigenvector_centrality(
        x, device=device, dtype=dtype, tol=1e-9 if dtype == "float64" else 1e-6
    )
    np.testing.assert_allclose(ecm, expected, atol=1e-5)
    assert np.linalg.norm(ecm) == pytest.approx(1.0)


def test_ecm_warns_when_not_converged():
    with pytest.warns(RuntimeWarning, match="did not converge"):
        connscale.eigenvector_centrality(simulated(n_series=50), max_iter=1, device="cpu")


def test_ecm_constant_series_nan(device):
    x = simulated(n_series=40)
    x[:, 3] = 1.0
    with pytest.warns(connscale.ConstantSeriesWarning):
        ecm = connscale.eigenvector_centrality(x, device=device, dtype="float64", tol=1e-10)
    keep = np.delete(np.arange(40), 3)
    expected = np.abs(np.linalg.eigh(np.corrcoef(x[:, keep].T) + 1)[1][:, -1])
    assert np.isnan(ecm[3])
    np.testing.assert_allclose(ecm[keep], expected, atol=1e-8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_global_correlation_equals_corrcoef(device, dtype):
    x = simulated(n_series=120)
    r = np.corrcoef(x.T)
    expected = (r.sum(1) - 1) / (x.shape[1] - 1)
    np.testing.assert_allclose(
        connscale.global_correlation(x, device=device, dtype=dtype),
        expected,
        atol=1e-6 if dtype == "float32" else 1e-12,
    )


@pytest.mark.parametrize("fisher_z", [False, True])
def test_seed_correlation_equals_corrcoef(device, fisher_z):
    x = simulated(n_series=80)
    seeds = np.stack([x[:, :5].mean(1), np.sin(np.arange(x.shape[0]) / 3.0)], axis=1)
    maps = connscale.seed_correlation(x, seeds, fisher_z=fisher_z, device=device, dtype="float64")
    expected = np.corrcoef(seeds.T, x.T)[:2, 2:]
    if fisher_z:
        expected = np.arctanh(expected)
    np.testing.assert_allclose(maps, expected, atol=1e-12)
    one = connscale.seed_correlation(x, seeds[:, 0], device=device)
    assert one.shape == (1, 80)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_seed_correlation_fisher_z_is_infinite_at_one(device, dtype):
    """Series equal to a seed (or its negative) have r = ±1 up to rounding:
    their z is ±inf, or as large as numpy's where rounding leaves |r| < 1,
    never NaN (rounding past 1 used to give arctanh's NaN); the rest is
    numpy's float64 arctanh of corrcoef."""
    x = simulated(n_series=40)
    x[:, 10:20] = x[:, :10]
    x[:, 20:30] = -x[:, :10]
    seeds = x[:, :10]
    z = connscale.seed_correlation(x, seeds, fisher_z=True, device=device, dtype=dtype)
    reference = np.corrcoef(seeds.T, x.T)[:10, 10:]
    with np.errstate(divide="ignore"):
        expected = np.arctanh(reference)
    assert not np.isnan(z).any()
    same = np.abs(reference) > 1 - 1e-6
    assert same.sum() == 30  # each seed with itself, its copy and its negative
    large = 7.0 if dtype == "float32" else 15.0  # arctanh(1 - 10 eps), eps of the dtype
    assert np.all(np.abs(z[same]) >= large)
    assert np.all(np.sign(z[same]) == np.sign(expected[same]))
    atol = 1e-5 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(z[~same], expected[~same], atol=atol)
    r = connscale.seed_correlation(x, seeds, device=device, dtype=dtype)
    assert np.array_equal(np.isinf(z), np.abs(r) >= 1.0)


def test_seed_correlation_wrong_length():
    with pytest.raises(ValueError, match="one row per time point"):
        connscale.seed_correlation(
            simulated(n_series=10), np.ones((7, 1)) + np.arange(7)[:, None], device="cpu"
        )


def test_maps_share_one_normalisation():
    """A NormalizedSeries (one validation, transfer and normalisation) gives
    every map of the raw series, and the constant-series warning once."""
    import warnings

    from connscale.fc.normalize import ConstantSeriesWarning
    from connscale.maps.degree import compute_degree
    from connscale.maps.prepare import normalize_once

    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 30)) + rng.standard_normal((40, 1))
    x[:, 3] = 1.0  # a constant series
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        series = normalize_once(x, device="cpu")
        (binary, weighted), _ = compute_degree(series, [0.1, 0.3], both=True)
        ecm = connscale.eigenvector_centrality(series)
        gcor = connscale.global_correlation(series)
    assert sum(issubclass(w.category, ConstantSeriesWarning) for w in caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantSeriesWarning)
        (binary_raw, weighted_raw), _ = compute_degree(x, [0.1, 0.3], both=True, device="cpu")
        np.testing.assert_array_equal(binary, binary_raw)
        np.testing.assert_allclose(weighted, weighted_raw, rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(
            ecm, connscale.eigenvector_centrality(x, device="cpu"), rtol=1e-12, equal_nan=True
        )
        np.testing.assert_allclose(
            gcor, connscale.global_correlation(x, device="cpu"), rtol=1e-12, equal_nan=True
        )
