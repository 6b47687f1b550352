"""Sliding-window correlation (GPU-DFC) against float64 numpy references."""

import warnings

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal

import connscale
from connscale.fc import dynamic as dynamic_module
from connscale.fc.dynamic import dynamic_correlation, n_windows, window_starts
from connscale.fc.dynamic_result import load_dynamic
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.sparse import dense_thresholded
from connscale.io.dfc import HDF5Backend, partial_path

from ..conftest import assert_thresholded_close
from ._fake_cuda import fake_cuda_copies

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = ["float32", "float64"]
ATOL = {"float32": 2e-6, "float64": 1e-12}

rng_global = np.random.default_rng(0)
# Block structure so that thresholds keep a mix of entries.
_SIGNAL = rng_global.standard_normal((64, 3))
X = rng_global.standard_normal((64, 14)) + _SIGNAL[:, np.arange(14) % 3]


def _reference(x, w, s):
    return [np.corrcoef(x[t : t + w].T) for t in range(0, x.shape[0] - w + 1, s)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "n_timepoints, window_length, step",
    [
        (40, 10, 1),
        (53, 12, 5),
        (30, 30, 1),
        (47, 3, 4),
        (64, 20, 7),
    ],
)
def test_every_window_equals_corrcoef(device, dtype, n_timepoints, window_length, step):
    x = X[:n_timepoints]
    result = dynamic_correlation(x, window_length, step, device=device, dtype=dtype)
    reference = _reference(x, window_length, step)
    k = (n_timepoints - window_length) // step + 1
    assert len(result) == k == n_windows(n_timepoints, window_length, step) == len(reference)
    assert_array_equal(result.window_starts, np.arange(k) * step)
    assert_array_equal(window_starts(n_timepoints, window_length, step), result.window_starts)
    rows, cols = np.triu_indices(x.shape[1], 1)
    for i, ref in enumerate(reference):
        assert result[i].dtype == np.dtype(dtype)
        assert_allclose(result[i], ref[rows, cols], atol=ATOL[dtype], rtol=0)
        assert_allclose(result.to_dense(i), ref, atol=ATOL[dtype], rtol=0)
    assert result.nbytes == k * rows.size * np.dtype(dtype).itemsize


def test_large_offset_series_stay_accurate():
    # fMRI-like: large mean, small fluctuations; running sums must not cancel.
    x = 1e4 + X[:50]
    result = dynamic_correlation(x, 15, 4, device="cpu", dtype="float64")
    rows, cols = np.triu_indices(x.shape[1], 1)
    for i, ref in enumerate(_reference(x, 15, 4)):
        assert_allclose(result[i], ref[rows, cols], atol=1e-10, rtol=0)


def test_input_is_not_modified():
    x = X.copy()
    dynamic_correlation(x, 10, 3, device="cpu", dtype="float64")
    assert_array_equal(x, X)


# Limits that leave room for tiles of a few rows beside the in-memory result.
@pytest.mark.parametrize(
    "kind, extra, limit", [("triu", {}, 100_000), ("sparse", {"threshold": 0.2}, 150_000)]
)
def test_tiled_and_batched_runs_agree(kind, extra, limit):
    n = 50
    x = np.random.default_rng(1).standard_normal((40, n))
    whole = dynamic_correlation(x, 12, 4, kind=kind, device="cpu", **extra)
    assert whole.plan.batch > 1 and whole.plan.block_rows == n
    tiled = dynamic_correlation(x, 12, 4, kind=kind, device="cpu", memory_limit=limit, **extra)
    assert tiled.plan.block_rows < n
    for i in range(len(whole)):
        assert_allclose(tiled.to_dense(i), whole.to_dense(i), atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "threshold, absolute", [(0.3, False), (-0.1, False), (0.3, True), (0.6, True)]
)
def test_sparse_equals_dense_thresholded(device, dtype, threshold, absolute):
    result = dynamic_correlation(
        X, 16, 6, kind="sparse", threshold=threshold, absolute=absolute, device=device, dtype=dtype
    )
    n = X.shape[1]
    for i, ref in enumerate(_reference(X, 16, 6)):
        csr = result[i]
        assert csr.shape == (n, n)
        assert csr.indices.dtype == np.int32
        expected = np.triu(dense_thresholded(ref, threshold, absolute=absolute), 1)
        # Entries within float tolerance of the threshold may fall either way.
        near = np.abs(np.abs(ref) - abs(threshold)) < 1e-5
        upper = csr.toarray()
        assert_allclose(upper[~near], expected[~near], atol=ATOL[dtype])
        assert not np.any(np.tril(upper) != 0)
        assert_allclose(result.to_dense(i)[~near], (expected + expected.T)[~near], atol=ATOL[dtype])
    itemsize = np.dtype(dtype).itemsize
    assert result.nbytes == sum(
        result[i].nnz * (itemsize + 4) + (n + 1) * 8 for i in range(len(result))
    )


def test_constant_series_nan_in_triu_and_left_out_of_sparse():
    x = X[:40].copy()
    x[5:25, 3] = 7.0  # constant in window [5, 25) only
    with pytest.warns(ConstantSeriesWarning, match="1 of 14 series are constant") as caught:
        triu = dynamic_correlation(x, 20, 5, device="cpu", dtype="float64")
    assert sum(issubclass(w.category, ConstantSeriesWarning) for w in caught) == 1
    assert triu.constant[1, 3] and triu.constant.sum() == 1
    dense = triu.to_dense(1)
    assert np.isnan(dense[3]).all() and np.isnan(dense[:, 3]).all()
    assert not np.isnan(np.delete(np.delete(dense, 3, 0), 3, 1)).any()
    assert not np.isnan(triu.to_dense(0)).any()
    with pytest.warns(ConstantSeriesWarning):
        sparse = dynamic_correlation(x, 20, 5, kind="sparse", threshold=-1.0, device="cpu")
    csr = sparse[1]
    rows = np.repeat(np.arange(14), np.diff(csr.indptr))
    assert 3 not in rows and 3 not in csr.indices
    assert csr.nnz == 13 * 12 // 2
    with pytest.warns(ConstantSeriesWarning):
        factor = dynamic_correlation(x, 20, 5, kind="factor", device="cpu", dtype="float64")
    assert np.isnan(factor.to_dense(1)[3]).all()
    kept = np.delete(np.delete(factor.to_dense(1), 3, 0), 3, 1)
    assert_allclose(kept, np.delete(np.delete(dense, 3, 0), 3, 1), atol=1e-12)


def test_window_constant_at_the_global_mean_is_detected():
    x = X[:40].copy()
    x[:, 5] = np.where(np.arange(40) % 2, 1.0, -1.0)  # global mean exactly 0
    x[10:20, 5] = 0.0  # ... and constant at 0 in window [10, 20)
    with pytest.warns(ConstantSeriesWarning, match="1 of 14 series"):
        result = dynamic_correlation(x, 10, 5, device="cpu", dtype="float64")
    assert_array_equal(np.flatnonzero(result.constant.any(axis=1)), [2])
    assert np.isnan(result.to_dense(2)[5]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_factor_is_exact(device, dtype):
    result = dynamic_correlation(
        X, 12, 5, kind="factor", device=device, dtype=dtype, compute_error=True
    )
    for i, ref in enumerate(_reference(X, 12, 5)):
        assert result[i].shape == (X.shape[1], 12)
        assert_allclose(result.to_dense(i), ref, atol=10 * ATOL[dtype])
    assert np.all(result.mae < 10 * ATOL[dtype])
    assert result.nbytes == len(result) * X.shape[1] * 12 * np.dtype(dtype).itemsize


def _mae(result, x, w, s):
    errors = []
    for i, ref in enumerate(_reference(x, w, s)):
        off = ~np.eye(ref.shape[0], dtype=bool)
        errors.append(np.abs(result.to_dense(i) - ref)[off].mean())
    return np.array(errors)


@pytest.mark.parametrize(
    "kind, method", [("factor", None), ("lowrank", "svd"), ("lowrank", "randomized")]
)
def test_error_falls_with_rank_and_vanishes_at_window_length(kind, method):
    x = np.random.default_rng(3).standard_normal((48, 40))
    w, s = 12, 9
    extra = {} if method is None else {"method": method, "random_state": 0, "power_iterations": 1}
    mean_errors = []
    for rank in (1, 3, 6, 9, 12, 20):
        result = dynamic_correlation(
            x,
            w,
            s,
            kind=kind,
            rank=rank,
            device="cpu",
            dtype="float64",
            compute_error=True,
            **extra,
        )
        # The recorded MAE is the error of the stored form against corrcoef.
        assert_allclose(result.mae, _mae(result, x, w, s), rtol=1e-8, atol=1e-12)
        mean_errors.append(result.mae.mean())
    mean_errors = np.array(mean_errors)
    assert np.all(np.diff(mean_errors[:4]) < 0), mean_errors
    assert mean_errors[0] > 0.05
    # rank >= w - 1 holds the whole window: exact up to rounding
    assert np.all(mean_errors[4:] < 1e-10), mean_errors


def test_truncated_factor_beats_randomized_lowrank_at_equal_rank():
    x = np.random.default_rng(4).standard_normal((60, 50))
    factor = dynamic_correlation(x, 30, 15, kind="factor", rank=8, device="cpu", compute_error=True)
    lowrank = dynamic_correlation(
        x, 30, 15, kind="lowrank", rank=8, random_state=0, device="cpu", compute_error=True
    )
    assert np.all(factor.mae <= lowrank.mae + 1e-7)
    # ... in half the bytes
    assert factor.nbytes * 2 == lowrank.nbytes


def test_lowrank_storage_and_compression_ratio():
    n, rank = 40, 5
    x = np.random.default_rng(5).standard_normal((30, n))
    result = dynamic_correlation(x, 10, 10, kind="lowrank", rank=rank, random_state=1, device="cpu")
    q, b = result[0]
    assert q.shape == (n, rank) and b.shape == (rank, n)
    assert_allclose(q.T @ q, np.eye(rank), atol=1e-5)
    assert result.compression_ratio == pytest.approx(n / (2 * rank))  # GPU-DFC Eq. 5


def test_lowrank_is_reproducible_with_random_state():
    kwargs = {"kind": "lowrank", "rank": 4, "device": "cpu"}
    a = dynamic_correlation(X, 12, 6, random_state=7, **kwargs)
    b = dynamic_correlation(X, 12, 6, random_state=7, **kwargs)
    c = dynamic_correlation(X, 12, 6, random_state=8, **kwargs)
    assert_array_equal(a[2][0], b[2][0])
    assert not np.allclose(a[2][0], c[2][0])


@pytest.mark.parametrize(
    "kind, extra",
    [
        ("triu", {}),
        ("sparse", {"threshold": 0.25, "absolute": True}),
        ("lowrank", {"rank": 4, "random_state": 0}),
        ("factor", {"rank": 3}),
    ],
)
def test_out_file_reopened_equals_in_memory(tmp_path, kind, extra):
    path = tmp_path / "sub-01_dfc.h5"
    memory = dynamic_correlation(X, 15, 4, kind=kind, device="cpu", **extra)
    on_disk = dynamic_correlation(X, 15, 4, kind=kind, device="cpu", out=path, **extra)
    on_disk.close()
    assert path.exists() and not partial_path(path).exists()
    with load_dynamic(path) as reopened:
        assert len(reopened) == len(memory) and reopened.kind == kind
        assert_array_equal(reopened.window_starts, memory.window_starts)
        assert reopened.nbytes == memory.nbytes
        for i in range(len(memory)):
            assert_allclose(reopened.to_dense(i), memory.to_dense(i), atol=1e-6)

    # A re-run over the finished file reuses it without computing.
    def fail(*args, **kwargs):
        raise AssertionError("recomputed a finished file")

    original = dynamic_module._compute
    dynamic_module._compute = fail
    try:
        again = dynamic_correlation(X, 15, 4, kind=kind, device="cpu", out=path, **extra)
        assert len(again) == len(memory)
        again.close()
    finally:
        dynamic_module._compute = original


@pytest.mark.parametrize(
    "kind, extra",
    [("triu", {}), ("sparse", {"threshold": 0.3}), ("lowrank", {"rank": 4, "random_state": 3})],
)
def test_interrupted_run_resumes_to_identical_content(tmp_path, monkeypatch, kind, extra):
    path = tmp_path / "run.h5"
    reference = dynamic_correlation(
        X, 10, 3, kind=kind, device="cpu", out=tmp_path / "ref.h5", **extra
    )
    original_write = HDF5Backend.write
    written = []

    def crash_after_four(self, index, *args):
        if len(written) == 4:
            raise KeyboardInterrupt("simulated interruption")
        original_write(self, index, *args)
        written.append(index)

    monkeypatch.setattr(HDF5Backend, "write", crash_after_four)
    with pytest.raises(KeyboardInterrupt):
        dynamic_correlation(X, 10, 3, kind=kind, device="cpu", out=path, **extra)
    assert not path.exists() and partial_path(path).exists()
    with pytest.raises(FileNotFoundError, match="re-run"):
        load_dynamic(path)

    resumed_windows = []

    def record_write(self, index, *args):
        original_write(self, index, *args)
        resumed_windows.append(index)

    monkeypatch.setattr(HDF5Backend, "write", record_write)
    result = dynamic_correlation(X, 10, 3, kind=kind, device="cpu", out=path, **extra)
    assert sorted(resumed_windows) == [i for i in range(len(reference)) if i not in written]
    assert path.exists() and not partial_path(path).exists()
    # Resumed windows are batched otherwise than in one run: float32 rounding.
    for i in range(len(reference)):
        if kind == "sparse":
            assert_thresholded_close(
                result.to_dense(i), reference.to_dense(i), extra["threshold"], atol=ATOL["float32"]
            )
        else:
            assert_allclose(result.to_dense(i), reference.to_dense(i), atol=ATOL["float32"])
    result.close()
    reference.close()


def test_out_file_of_another_run_is_refused(tmp_path):
    path = tmp_path / "a.h5"
    dynamic_correlation(X, 10, 3, device="cpu", out=path).close()
    with pytest.raises(ValueError, match="holds a different run"):
        dynamic_correlation(X, 10, 4, device="cpu", out=path)
    with pytest.raises(ValueError, match="holds a different run"):
        dynamic_correlation(X + 1e-3 * np.arange(14), 10, 3, device="cpu", out=path)


def test_host_buffer_receives_results():
    buffer = torch.empty(1 << 16, dtype=torch.uint8)
    result = dynamic_correlation(X, 10, 3, device="cpu", host_buffer=buffer)
    plain = dynamic_correlation(X, 10, 3, device="cpu")
    assert np.shares_memory(result[0], buffer.numpy())
    for i in range(len(plain)):
        assert_allclose(result[i], plain[i], atol=ATOL["float32"], rtol=0)


def test_precision_tf32_is_recorded_and_harmless_on_cpu():
    result = dynamic_correlation(X, 10, 3, device="cpu", precision="tf32")
    plain = dynamic_correlation(X, 10, 3, device="cpu")
    assert result.parameters["precision"] == "tf32"
    assert_array_equal(result[4], plain[4])
    assert not torch.backends.cuda.matmul.allow_tf32  # restored


def test_to_teneto_layout():
    result = dynamic_correlation(X, 10, 6, device="cpu")
    stack = result.to_teneto()
    assert stack.shape == (14, 14, len(result))
    assert_allclose(stack[:, :, 2], result.to_dense(2))


def test_result_indexing_and_repr():
    result = dynamic_correlation(X, 10, 6, device="cpu")
    assert_array_equal(result[-1], result[len(result) - 1])
    with pytest.raises(IndexError, match="out of range"):
        result[len(result)]
    assert "kind='triu'" in repr(result)
    assert len(list(result)) == len(result)


def test_public_exports():
    assert connscale.dynamic_correlation is dynamic_correlation
    assert connscale.load_dynamic is load_dynamic
    assert connscale.fc.DynamicConnectivity is connscale.DynamicConnectivity


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"window_length": 65}, "'window_length' must be at most the number of time points"),
        (
            {"window_length": 2},
            r"'window_length' parameter of dynamic_correlation must be an int in the "
            r"range \[3, inf\) or a str. Got 2 ",
        ),
        (
            {"window_length": 10.5},
            "'window_length' parameter of dynamic_correlation must be an int",
        ),
        (
            {"step": 0},
            r"'step' parameter of dynamic_correlation must be an int in the range \[1, inf\)",
        ),
        ({"kind": "dense"}, "'kind' parameter of dynamic_correlation must be a str among"),
        (
            {"kind": "lowrank", "rank": 4, "method": "qr"},
            "'method' parameter of dynamic_correlation must be a str among",
        ),
        ({"kind": "sparse"}, "needs a 'threshold'"),
        (
            {"kind": "sparse", "threshold": 1.5},
            r"'threshold' parameter of dynamic_correlation must be a float in the range \[-1, 1\]",
        ),
        (
            {"kind": "sparse", "threshold": -1.2},
            r"'threshold' parameter of dynamic_correlation must be a float in the range \[-1, 1\]",
        ),
        ({"kind": "sparse", "threshold": -0.2, "absolute": True}, "absolute=True"),
        ({"threshold": 0.5}, "'threshold' applies to kind='sparse' only"),
        ({"absolute": True}, "'absolute' applies to kind='sparse' only"),
        ({"kind": "lowrank"}, "needs a 'rank'"),
        (
            {"kind": "lowrank", "rank": 0},
            r"'rank' parameter of dynamic_correlation must be an int in the range \[1, inf\)",
        ),
        ({"kind": "factor", "rank": 14}, "'rank' must be smaller than the number of series"),
        ({"kind": "triu", "rank": 3}, "'rank' applies to"),
        (
            {"kind": "lowrank", "rank": 3, "power_iterations": -1},
            r"'power_iterations' parameter of dynamic_correlation must be an int in "
            r"the range \[0, inf\)",
        ),
        ({"compute_error": True}, "'compute_error' applies to"),
        (
            {"dtype": "float16"},
            "'dtype' parameter of dynamic_correlation must be 'float32' or 'float64'",
        ),
        ({"device": "tpu"}, "'device' parameter of dynamic_correlation must be"),
    ],
)
def test_bad_parameters(kwargs, match):
    kwargs = {"window_length": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        dynamic_correlation(X, **kwargs)


def test_bad_timeseries():
    with pytest.raises(ValueError, match="2-D array"):
        dynamic_correlation(X[:, 0], 10)
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        dynamic_correlation(bad, 10)


def test_result_too_big_for_host_asks_for_out():
    with pytest.raises(ValueError, match="pass out="):
        dynamic_correlation(X, 10, 1, device="cpu", memory_limit=1000)


def test_no_warning_without_constant_series():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dynamic_correlation(X, 10, 3, kind="sparse", threshold=0.5, device="cpu")


@pytest.mark.parametrize(
    "kind, extra",
    [
        ("triu", {}),
        ("sparse", {"threshold": 0.2}),
        ("lowrank", {"rank": 4, "random_state": 0}),
        ("factor", {"rank": 3}),
    ],
)
@pytest.mark.parametrize("with_buffer", [False, True])
def test_deferred_copy_path_gives_the_same_windows(monkeypatch, tmp_path, kind, extra, with_buffer):
    """The CUDA branch of DeviceToHost (staging ring, callbacks two batches late,
    copies straight into a pinned host buffer), with streams and events faked
    so that it runs on the CPU."""
    from connscale.fc.dynamic_result import HostArena

    reference = dynamic_correlation(X, 10, 3, kind=kind, device="cpu", **extra)
    fake_cuda_copies(monkeypatch)
    monkeypatch.setattr(HostArena, "pinned", property(lambda self: True))
    monkeypatch.setattr(dynamic_module, "_MAX_BATCH", 4)  # several batches in flight
    buffer = torch.zeros(1 << 20, dtype=torch.uint8) if with_buffer else None
    result = dynamic_correlation(X, 10, 3, kind=kind, device="cpu", host_buffer=buffer, **extra)
    assert result.plan.batch == 4
    on_disk = dynamic_correlation(X, 10, 3, kind=kind, device="cpu", out=tmp_path / "a.h5", **extra)
    for i in range(len(reference)):
        assert_allclose(result.to_dense(i), reference.to_dense(i), atol=1e-6)
        assert_allclose(on_disk.to_dense(i), reference.to_dense(i), atol=1e-6)
    on_disk.close()
