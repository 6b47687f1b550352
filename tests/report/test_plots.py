"""Every plot writes a non-empty PNG and rejects bad input clearly."""

import numpy as np
import pytest
import scipy.sparse as sp

from connscale.report import plots

PNG = b"\x89PNG\r\n\x1a\n"
rng = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Each test draws its data from a fresh generator: the same data in any test order."""
    global rng
    rng = np.random.default_rng(0)


def _check_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 2000
    from matplotlib.image import imread

    image = imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0.01  # not a blank canvas


def _corr(n=8, t=40):
    x = rng.standard_normal((t, n))
    x[:, 1] += x[:, 0]  # one strong edge (r ~ 0.7), so thresholded plots have something to draw
    return np.corrcoef(x, rowvar=False)


def test_correlation_matrix(tmp_path):
    labels = [f"R{k}" for k in range(8)]
    _check_png(
        plots.plot_correlation_matrix(_corr(), tmp_path / "m.png", labels=labels, title="FC")
    )
    vec = _corr()[np.triu_indices(8, 1)]
    _check_png(plots.plot_correlation_matrix(vec, tmp_path / "v.png"))
    with pytest.raises(ValueError, match="Expected 8 labels"):
        plots.plot_correlation_matrix(_corr(), tmp_path / "x.png", labels=labels[:3])
    with pytest.raises(ValueError, match="square matrix"):
        plots.plot_correlation_matrix(np.zeros((2, 3)), tmp_path / "x.png")
    with pytest.raises(ValueError, match="saved as PNG"):
        plots.plot_correlation_matrix(_corr(), tmp_path / "x.pdf")
    assert not (tmp_path / "x.png").exists()


def test_connectome_dense_and_sparse(tmp_path):
    coords = rng.uniform(-60, 60, size=(8, 3))
    matrix = _corr()
    _check_png(plots.plot_connectome(matrix, coords, tmp_path / "c.png"))
    sparse = sp.csr_matrix(np.where(np.abs(matrix) > 0.3, matrix, 0.0))
    _check_png(plots.plot_connectome(sparse, coords, tmp_path / "s.png", edge_threshold=0.3))
    with pytest.raises(ValueError, match=r"'coords' must have shape \(8, 3\)"):
        plots.plot_connectome(matrix, coords[:, :2], tmp_path / "x.png")


def test_dfc_plots(tmp_path):
    windows = rng.standard_normal((30, 45))
    _check_png(
        plots.plot_edge_timecourses(
            windows.T, tmp_path / "e.png", edge_labels=[f"e{k}" for k in range(45)]
        )
    )
    similarity = plots.window_similarity(windows)
    np.testing.assert_allclose(similarity, np.corrcoef(windows), atol=1e-12)
    _check_png(plots.plot_window_similarity(windows, tmp_path / "w.png"))
    _check_png(plots.plot_window_similarity(similarity, tmp_path / "p.png", precomputed=True))
    with pytest.raises(ValueError, match="at least 2 windows"):
        plots.window_similarity(windows[:1])
    with pytest.raises(ValueError, match="'window_times' must have 30 values"):
        plots.plot_edge_timecourses(windows.T, tmp_path / "x.png", window_times=np.arange(3))


def test_network_plots_arrays_and_nifti(tmp_path):
    import nibabel as nib

    maps = np.zeros((3, 500))
    for k in range(3):
        maps[k, rng.choice(500, 30, replace=False)] = rng.standard_normal(30)
    _check_png(plots.plot_network_maps(maps, tmp_path / "a.png"))
    _check_png(plots.plot_network_maps(sp.csr_matrix(maps), tmp_path / "s.png"))
    data = np.zeros((12, 12, 12, 2), dtype=np.float32)
    data[2:6, 2:6, 2:6, 0] = 1.0
    data[6:10, 6:10, 6:10, 1] = 1.0
    affine = np.diag([4.0, 4.0, 4.0, 1.0])
    affine[:3, 3] = -24
    img = nib.Nifti1Image(data, affine)
    background = nib.Nifti1Image(rng.uniform(0, 1, (12, 12, 12)).astype(np.float32), affine)
    _check_png(plots.plot_network_maps(img, tmp_path / "n.png", bg_img=background))
    _check_png(
        plots.plot_network_timecourses(rng.standard_normal((50, 3)), tmp_path / "t.png", t_r=2.0)
    )
    with pytest.raises(ValueError, match="4-D image"):
        plots.plot_network_maps(nib.Nifti1Image(data[..., 0], affine), tmp_path / "x.png")


def test_life_plots(tmp_path):
    rmse = np.zeros((10, 10, 6))
    rmse[2:8, 2:8, 1:5] = rng.uniform(1, 5, (6, 6, 4))
    _check_png(plots.plot_rmse_map(rmse, tmp_path / "r.png"))
    weights = np.r_[np.zeros(300), rng.exponential(1.0, 700)]
    _check_png(plots.plot_weight_histogram(weights, tmp_path / "h.png"))
    with pytest.raises(ValueError, match="3-D map"):
        plots.plot_rmse_map(rmse[..., 0], tmp_path / "x.png")
    with pytest.raises(ValueError, match="no finite non-zero voxel"):
        plots.plot_rmse_map(np.zeros((3, 3, 3)), tmp_path / "x.png")


def test_classification_plots(tmp_path):
    _check_png(
        plots.plot_confusion_matrix(
            [[18, 2], [3, 17]], tmp_path / "c.png", class_names=("control", "patient")
        )
    )
    _check_png(plots.plot_confusion_matrix([[18, 2], [3, 17]], tmp_path / "n.png", normalize=True))
    y = np.repeat([0, 1], 20)
    scores = y + rng.standard_normal((3, 40))
    _check_png(plots.plot_roc(y, scores, tmp_path / "roc.png"))
    with pytest.raises(ValueError, match="Expected 2 class names"):
        plots.plot_confusion_matrix([[1, 2], [3, 4]], tmp_path / "x.png", class_names=["a"])
    with pytest.raises(ValueError, match="40 columns"):
        plots.plot_roc(y, scores[:, :10], tmp_path / "x.png")


def test_metric_comparison(tmp_path):
    entry = {"mean": 0.62, "ci_low": 0.54, "ci_high": 0.69}
    results = {
        "actual": {m: entry for m in ("accuracy", "sensitivity", "specificity")},
        "reconstructed": {
            m: dict(entry, mean=0.6) for m in ("accuracy", "sensitivity", "specificity")
        },
    }
    _check_png(plots.plot_metric_comparison(results, tmp_path / "bars.png"))
    with pytest.raises(ValueError, match="has no 'precision'"):
        plots.plot_metric_comparison(results, tmp_path / "x.png", metrics=["precision"])


def test_run_figures_dfc_result_networks_lambda_sweep(tmp_path):
    import nibabel as nib

    from connscale.fc.dynamic import dynamic_correlation

    result = dynamic_correlation(rng.standard_normal((60, 6)), 20, 5, device="cpu")
    _check_png(plots.plot_dfc_windows(result, tmp_path / "w.png"))
    _check_png(
        plots.plot_edge_timecourses(
            result, tmp_path / "e.png", max_edges=6, node_labels=list("abcdef")
        )
    )
    dictionary = rng.standard_normal((50, 3))
    maps = np.zeros((3, 500))
    for k in range(3):
        maps[k, rng.choice(500, 30, replace=False)] = rng.standard_normal(30)
    _check_png(plots.plot_networks(dictionary, sp.csr_matrix(maps), tmp_path / "n.png"))
    data = np.zeros((12, 12, 12, 3), dtype=np.float32)
    for k in range(3):
        data[2 + 3 * k : 5 + 3 * k, 2:8, 2:8, k] = 1.0 + k
    img = nib.Nifti1Image(data, np.diag([4.0, 4.0, 4.0, 1.0]))
    _check_png(
        plots.plot_networks(
            dictionary,
            img,
            tmp_path / "i.png",
            bg_img=nib.Nifti1Image(data[..., 0] + 0.5, img.affine),
        )
    )
    with pytest.raises(ValueError, match="'timecourses' must be"):
        plots.plot_networks(dictionary[:, 0], maps, tmp_path / "x.png")
    rows = [
        {
            "lam": lam,
            "weight_sum": 10.0 / (1 + lam),
            "n_nonzero": int(100 / (1 + lam)),
            "cv_rmse_median": 1.0 + lam,
        }
        for lam in (0.01, 0.1, 1.0)
    ]
    _check_png(plots.plot_lambda_sweep(rows, tmp_path / "l.png"))
    with pytest.raises(ValueError, match="no λ"):
        plots.plot_lambda_sweep([], tmp_path / "x.png")
