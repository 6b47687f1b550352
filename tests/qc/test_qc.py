"""connscale.qc against numpy transcriptions of XCP-D's QC and of QC-FC (Ciric 2017)."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from connscale.qc import (
    QC_COLUMNS,
    dvars,
    edge_distances,
    qc_fc,
    qc_fc_distance,
    qc_row,
    region_centroids,
)


def _xcpd_dvars(datat: np.ndarray, variance_tol: float = 1e-7):
    """XCP-D's compute_dvars (voxels x time), nipype's regress_poly(0) and nitime's AR_est_YW."""
    func_sd = (
        np.percentile(datat, 75, axis=1, method="lower")
        - np.percentile(datat, 25, axis=1, method="lower")
    ) / 1.349
    keep = func_sd > variance_tol
    datat, func_sd = datat[keep], func_sd[keep]
    temp = datat - datat.mean(axis=1, keepdims=True)
    ar1 = np.array([np.dot(x[:-1], x[1:]) / np.dot(x, x) for x in temp])
    diff_sd_mean = (np.sqrt((1 - ar1) * 2) * func_sd).mean()
    dvars_nstd = np.sqrt(np.square(np.diff(datat, axis=1)).mean(axis=0))
    return np.insert(dvars_nstd, 0, 0), np.insert(dvars_nstd / diff_sd_mean, 0, 0)


def _bold(n_timepoints=80, n_voxels=300, seed=0):
    rng = np.random.default_rng(seed)
    x = 500 + np.cumsum(rng.standard_normal((n_timepoints, n_voxels)), axis=0) * 0.3
    x += rng.standard_normal((n_timepoints, n_voxels))
    x[:, :5] = 42.0  # constant voxels: left out
    return x


@pytest.mark.parametrize(("dtype", "rtol"), [("float64", 1e-10), ("float32", 1e-5)])
def test_dvars_equals_xcpd(dtype, rtol):
    x = _bold()
    plain, standardised = dvars(x, device="cpu", dtype=dtype)
    expected_plain, expected_std = _xcpd_dvars(x.T)
    np.testing.assert_allclose(plain, expected_plain, rtol=rtol)
    np.testing.assert_allclose(standardised, expected_std, rtol=rtol)


def test_dvars_in_blocks_and_from_a_tensor():
    x = _bold(60, 500, seed=1)
    whole = dvars(x, device="cpu", dtype="float64")
    blocked = dvars(torch.as_tensor(x), dtype="float64", memory_limit=60_000)
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_dvars_of_constant_series_is_refused():
    with pytest.raises(ValueError, match="no series varies"):
        dvars(np.ones((10, 3)), device="cpu")


def test_qc_row_on_a_planted_run():
    t_r = 2.0
    fd = np.array([0.0, 0.9, 0.1, 0.2, 0.8, 0.1, 0.3, 0.1, 0.6, 0.2])
    dummy = 2
    kept = np.array([2, 3, 5, 6, 7, 9])  # FD > 0.5 censored after the two dummy scans
    initial = np.linspace(0, 1, 8) ** 2
    final = np.array([0.0, 0.5, 0.2, 0.1, 0.4, 0.3])
    row = qc_row(fd, kept, t_r, dummy_scans=dummy, dvars_initial=initial, dvars_final=final)
    assert tuple(row) == QC_COLUMNS
    assert row["mean_fd"] == pytest.approx(fd[2:].mean())
    assert row["max_fd"] == pytest.approx(0.8)
    assert row["mean_fd_post_censoring"] == pytest.approx(fd[kept].mean())
    assert row["num_dummy_volumes"] == 2
    assert row["num_censored_volumes"] == 2
    assert row["num_retained_volumes"] == 6
    assert row["retained_seconds"] == pytest.approx(12.0)
    assert row["mean_dvars_initial"] == pytest.approx(initial.mean())
    assert row["mean_dvars_final"] == pytest.approx(final.mean())
    assert row["fd_dvars_correlation_initial"] == pytest.approx(np.corrcoef(fd[2:], initial)[0, 1])
    assert row["fd_dvars_correlation_final"] == pytest.approx(np.corrcoef(fd[kept], final)[0, 1])


def test_qc_row_without_dvars_leaves_its_columns_nan():
    row = qc_row(np.array([0.0, 0.1, 0.2]), [0, 1, 2], 1.0)
    for key in (
        "mean_dvars_initial",
        "mean_dvars_final",
        "fd_dvars_correlation_initial",
        "fd_dvars_correlation_final",
    ):
        assert math.isnan(row[key])
    # No FD (no column, or one of another length): its columns are NaN, without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = qc_row(np.full(3, np.nan), [0, 2], 1.0, dvars_initial=np.ones(3))
    assert math.isnan(row["mean_fd"]) and math.isnan(row["max_fd"])
    assert math.isnan(row["fd_dvars_correlation_initial"]) and row["mean_dvars_initial"] == 1
    with pytest.raises(ValueError, match="after the dummy scans"):
        qc_row(np.zeros(5), [1, 2], 1.0, dummy_scans=1, dvars_initial=np.zeros(5))


def test_qc_fc_equals_numpy_correlation():
    rng = np.random.default_rng(3)
    edges = rng.standard_normal((12, 20))
    mean_fd = rng.uniform(0.05, 0.4, 12)
    edges[:, 0] += 3 * mean_fd
    edges[:, 1] = 0.5  # constant edge: NaN
    got = qc_fc(edges, mean_fd)
    expected = [np.corrcoef(edges[:, k], mean_fd)[0, 1] for k in range(20) if k != 1]
    np.testing.assert_allclose(np.delete(got, 1), expected, rtol=1e-12)
    assert math.isnan(got[1])


def test_distance_dependence_is_spearman_of_qcfc_with_edge_lengths():
    atlas = np.zeros((6, 5, 4), int)
    atlas[0:2, 0:2, 0:2] = 1
    atlas[4:6, 0:2, 0:2] = 2
    atlas[0:2, 3:5, 2:4] = 3
    atlas[5, 4, 3] = 4
    affine = np.diag([2.0, 2.0, 3.0, 1.0])
    affine[:3, 3] = [-10, 5, 0]
    centroids = region_centroids(atlas, affine, [1, 2, 3, 4, 9])
    np.testing.assert_allclose(centroids[0], [2 * 0.5 - 10, 2 * 0.5 + 5, 3 * 0.5])
    np.testing.assert_allclose(centroids[3], [2 * 5 - 10, 2 * 4 + 5, 3 * 3])
    assert np.isnan(centroids[4]).all()  # a label with no voxel
    distances = edge_distances(centroids[:4])
    assert distances[0] == pytest.approx(np.linalg.norm(centroids[0] - centroids[1]))
    qcfc = np.array([0.3, -0.1, 0.2, 0.05, 0.4, -0.2])
    rho = qc_fc_distance(qcfc, distances)
    assert rho == pytest.approx(spearmanr(qcfc, distances).statistic)
    assert math.isnan(qc_fc_distance(qcfc[:2], distances[:2]))
