import warnings

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from connscale import ConstantSeriesWarning, correlation, load_relmat
from connscale.fc.triu import n_pairs

from ..conftest import ATOL, assert_thresholded_close
from ._fake_cuda import fake_cuda_copies

SHAPES = [(3, 2), (10, 7), (50, 64), (257, 130)]


def reference(x):
    return np.corrcoef(np.asarray(x, dtype=np.float64).T)


@pytest.mark.parametrize("shape", SHAPES)
def test_dense_matches_corrcoef(shape, device, dtype, rng):
    x = rng.standard_normal(shape)
    r = correlation(x, kind="dense", device=device, dtype=dtype)
    assert r.shape == (shape[1], shape[1])
    assert r.dtype == np.dtype(dtype)
    np.testing.assert_allclose(r, reference(x), atol=ATOL[dtype], rtol=0)
    np.testing.assert_array_equal(np.diag(r), 1.0)


@pytest.mark.parametrize("shape", SHAPES)
def test_triu_matches_corrcoef(shape, device, dtype, rng):
    x = rng.standard_normal(shape) * 5 + 100  # offset and scale must not matter
    r = correlation(x, kind="triu", device=device, dtype=dtype)
    n = shape[1]
    assert r.shape == (n_pairs(n),)
    np.testing.assert_allclose(
        r, reference(x)[np.triu_indices(n, 1)], atol=ATOL[dtype] * 10, rtol=0
    )


@pytest.mark.parametrize("absolute", [False, True])
@pytest.mark.parametrize("threshold", [-0.2, 0.0, 0.3])
def test_sparse_equals_dense_thresholded(threshold, absolute, device, dtype, rng):
    x = rng.standard_normal((20, 40))
    s = correlation(
        x, kind="sparse", threshold=threshold, absolute=absolute, device=device, dtype=dtype
    )
    assert sp.issparse(s) and s.format == "csr"
    assert s.indices.dtype == np.int32
    ref = reference(x)
    keep = np.triu((np.abs(ref) if absolute else ref) >= threshold, 1)
    expected = np.where(keep, ref, 0.0)
    dense = s.toarray()
    np.testing.assert_array_equal(dense != 0, keep)
    np.testing.assert_allclose(dense, expected, atol=ATOL[dtype])


def test_blocked_rounds_equal_in_memory(rng):
    x = rng.standard_normal((40, 300)).astype(np.float32)
    whole = correlation(x, kind="triu", device="cpu")
    # ~40 KB for blocks forces many rounds of a few rows each. Blocked and
    # one-shot GEMMs may sum in other orders: equal to float32 rounding.
    blocked = correlation(x, kind="triu", device="cpu", memory_limit=48_000 + 179_400 + 12_000)
    np.testing.assert_allclose(blocked, whole, atol=ATOL["float32"], rtol=0)
    dense = correlation(x, kind="dense", device="cpu", memory_limit=48_000 + 360_000 + 12_000)
    np.testing.assert_allclose(
        dense, correlation(x, kind="dense", device="cpu"), atol=ATOL["float32"], rtol=0
    )
    sparse = correlation(x, kind="sparse", threshold=0.2, device="cpu", memory_limit=148_000)
    full = correlation(x, kind="sparse", threshold=0.2, device="cpu")
    assert_thresholded_close(sparse, full, 0.2, atol=ATOL["float32"])


def test_rounds_really_happen(rng):
    from connscale.fc.static import compute_correlation

    x = rng.standard_normal((40, 300)).astype(np.float32)
    _, (plan, _, _) = compute_correlation(x, kind="triu", device="cpu", memory_limit=239_400)
    assert plan.n_rounds > 5


@pytest.mark.parametrize("kind", ["dense", "triu", "sparse"])
def test_hdf5_stream_equals_in_memory(kind, tmp_path, rng):
    x = rng.standard_normal((30, 120))
    threshold = 0.1 if kind == "sparse" else None
    expected = correlation(x, kind=kind, threshold=threshold, device="cpu")
    path = correlation(
        x,
        kind=kind,
        threshold=threshold,
        device="cpu",
        out=tmp_path / "sub-01_meas-PearsonCorrelation_relmat.h5",
        memory_limit=60_000,
    )
    assert path.exists()
    assert not list(tmp_path.glob(".*.tmp"))
    loaded, attrs = load_relmat(path)
    assert attrs["kind"] == kind and attrs["N"] == 120 and attrs["complete"]
    # Streamed in rounds of other sizes than the one-shot GEMM: float32 rounding.
    if kind == "sparse":
        assert_thresholded_close(loaded, expected, threshold, atol=ATOL["float32"])
    else:
        np.testing.assert_allclose(loaded, expected, atol=ATOL["float32"], rtol=0)
    # readable with h5py alone
    with h5py.File(path, "r") as fh:
        if kind == "triu":
            k = 5
            assert fh["relmat"][k] == loaded[k]
            assert fh["relmat"].chunks is not None


def test_failed_run_leaves_no_file(tmp_path, rng, monkeypatch):
    from connscale.fc import _sinks

    x = rng.standard_normal((30, 100))
    calls = {"n": 0}
    original = _sinks.extract_triu

    def failing(block, out):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash")
        return original(block, out)

    monkeypatch.setattr(_sinks, "extract_triu", failing)
    target = tmp_path / "x_relmat.h5"
    with pytest.raises(RuntimeError, match="simulated crash"):
        correlation(x, kind="triu", out=target, memory_limit=40_000, device="cpu")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_out_array_filled_in_place(rng):
    x = rng.standard_normal((25, 12))
    out = np.empty(n_pairs(12), dtype=np.float32)
    r = correlation(x, kind="triu", out=out, device="cpu")
    assert r is out
    np.testing.assert_allclose(out, reference(x)[np.triu_indices(12, 1)], atol=2e-6)
    t = torch.empty(12, 12, dtype=torch.float64)
    assert correlation(x, out=t, dtype="float64", device="cpu") is t
    with pytest.raises(ValueError, match="shape"):
        correlation(x, kind="triu", out=np.empty(5, dtype=np.float32), device="cpu")


def test_constant_series_nan_and_one_warning(rng):
    x = rng.standard_normal((30, 6))
    x[:, 2] = 4.0
    x[:, 4] = -1.0
    with pytest.warns(ConstantSeriesWarning, match="2 of 6 series are constant") as record:
        dense = correlation(x, device="cpu")
    assert len([w for w in record if w.category is ConstantSeriesWarning]) == 1
    assert np.isnan(dense[2]).all() and np.isnan(dense[:, 4]).all()
    ok = [0, 1, 3, 5]
    np.testing.assert_allclose(dense[np.ix_(ok, ok)], reference(x[:, ok]), atol=2e-6)
    with pytest.warns(ConstantSeriesWarning):
        tri = correlation(x, kind="triu", device="cpu")
    assert np.isnan(tri).sum() == 5 + 5 - 1
    with pytest.warns(ConstantSeriesWarning):
        s = correlation(x, kind="sparse", threshold=-1.0, device="cpu")
    assert s.nnz == 6  # the 4 good series' 6 pairs; constant ones left out
    assert not np.isnan(s.data).any()


def test_nilearn_connectivity_measure_matches(rng):
    pytest.importorskip("nilearn")
    from nilearn.connectome import ConnectivityMeasure
    from sklearn.covariance import EmpiricalCovariance

    from connscale import from_nilearn_vec

    x = rng.standard_normal((80, 15))
    measure = ConnectivityMeasure(
        kind="correlation",
        cov_estimator=EmpiricalCovariance(),
        vectorize=True,
        discard_diagonal=True,
    )
    theirs = measure.fit_transform([x])[0]
    ours = correlation(x, kind="triu", device="cpu", dtype="float64")
    np.testing.assert_allclose(from_nilearn_vec(theirs), ours, atol=1e-12)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(10), "2-D array"),
        (np.zeros((2, 5)), "at least 3 time points"),
        (np.array([[1.0, np.nan], [2, 3], [4, 5]]), "1 NaN"),
        (np.array([[1.0, np.inf], [2, 3], [4, 5]]), "1 infinite"),
        (np.array([["a", "b"]] * 3), "numeric"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        correlation(bad, device="cpu")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "full"}, "'kind' parameter of correlation must be a str among"),
        ({"kind": "sparse"}, "needs a 'threshold'"),
        ({"kind": "sparse", "threshold": 1.5}, "in the range \\[-1, 1\\]"),
        ({"kind": "triu", "threshold": 0.5}, "applies to kind='sparse' only"),
        ({"device": "tpu"}, "'device' parameter of correlation must be"),
        ({"dtype": "float16"}, "'dtype' parameter of correlation must be"),
        ({"memory_limit": "lots"}, "'memory_limit' parameter of correlation must be"),
    ],
)
def test_bad_parameters(kwargs, match, rng):
    x = rng.standard_normal((10, 20))
    kwargs.setdefault("device", "cpu")
    with pytest.raises(ValueError, match=match):
        correlation(x, **kwargs)


def test_memory_limit_below_one_row(rng, tmp_path):
    x = rng.standard_normal((10, 20))
    with pytest.raises(ValueError, match="Not enough memory for one row"):
        correlation(x, kind="triu", device="cpu", memory_limit=500, out=tmp_path / "r.h5")
    assert list(tmp_path.iterdir()) == []


def test_result_too_large_for_memory_asks_for_out(rng):
    x = rng.standard_normal((10, 2000))
    with pytest.raises(ValueError, match="out="):
        correlation(x, kind="triu", device="cpu", memory_limit="1MB")


def test_float32_input_keeps_precision_argument(rng):
    x = rng.standard_normal((50, 10)).astype(np.float32)
    assert correlation(x, dtype="float64", device="cpu").dtype == np.float64


def test_tf32_stays_off():
    x = np.random.default_rng(0).standard_normal((10, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        correlation(x, device="cpu")
    assert not torch.backends.cuda.matmul.allow_tf32


@pytest.mark.parametrize("kind", ["dense", "triu"])
def test_overlapped_copy_path_gives_the_same_result(monkeypatch, tmp_path, kind, rng):
    """The CUDA branch of the round mover (device scratch buffers, copies into
    the result or through pinned staging to a file, writes two rounds late),
    with streams and events faked so that it runs on the CPU."""
    x = rng.standard_normal((30, 40))
    expected = correlation(x, kind=kind, device="cpu")
    fake_cuda_copies(monkeypatch)
    monkeypatch.setattr("connscale.fc.static._MAX_ROUND_ELEMENTS_CPU", 400)  # several rounds
    np.testing.assert_allclose(correlation(x, kind=kind, device="cpu"), expected, atol=1e-6)
    path = correlation(x, kind=kind, device="cpu", out=tmp_path / "r.h5")
    np.testing.assert_allclose(load_relmat(path)[0], expected, atol=1e-6)
