"""pairwise_dfc against the paper's sequential definition (scans x pairs x windows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose, assert_array_equal

from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.pairs import PairwiseDFC, pair_summary, pairwise_dfc

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]
DTYPES = ["float32", "float64"]
TOL = {"float32": 2e-5, "float64": 1e-10}


def sequential_dfc(scan: np.ndarray, window_length: int, step: int) -> np.ndarray:
    """Algorithm 1 of Akgün et al.: loop over pairs, slide the window, corrcoef."""
    n_timepoints, n_regions = scan.shape
    courses = []
    for i in range(n_regions):
        for j in range(i + 1, n_regions):
            course = []
            start = 0
            while start + window_length <= n_timepoints:
                a = scan[start : start + window_length, i]
                b = scan[start : start + window_length, j]
                with np.errstate(invalid="ignore", divide="ignore"):
                    course.append(np.corrcoef(a, b)[0, 1])
                start += step
            courses.append(course)
    return np.array(courses)


@pytest.fixture
def rng():
    return np.random.default_rng(42)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "n_timepoints, window_length, step",
    [
        (40, 8, 1),
        (41, 10, 3),
        (37, 12, 5),
        (30, 30, 2),
        (25, 4, 30),
    ],
)
def test_equals_sequential_loop(rng, device, dtype, n_timepoints, window_length, step):
    # An offset and per-region scales, as in real BOLD signals.
    x = rng.standard_normal((3, n_timepoints, 5)) * rng.uniform(0.5, 20, 5) + 800.0
    result = pairwise_dfc(x, window_length, step, device=device, dtype=dtype)
    n_windows = (n_timepoints - window_length) // step + 1
    assert isinstance(result, PairwiseDFC)
    assert result.courses.shape == (3, 10, n_windows)
    assert result.courses.dtype == np.dtype(dtype)
    assert_array_equal(result.pairs, np.stack(np.triu_indices(5, 1), axis=1))
    assert_array_equal(result.window_starts, np.arange(n_windows) * step)
    for s in range(3):
        assert_allclose(
            result.courses[s], sequential_dfc(x[s], window_length, step), atol=TOL[dtype], rtol=0
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_ragged_scans(rng, dtype):
    scans = [rng.standard_normal((t, 4)) for t in (30, 23, 30, 17)]
    result = pairwise_dfc(scans, 6, 4, device="cpu", dtype=dtype)
    assert isinstance(result.courses, list) and len(result.courses) == 4
    for scan, course, onsets in zip(scans, result.courses, result.window_starts):
        expected = sequential_dfc(scan, 6, 4)
        assert course.shape == expected.shape
        assert_array_equal(onsets, np.arange(expected.shape[1]) * 4)
        assert_allclose(course, expected, atol=TOL[dtype], rtol=0)


def test_list_of_equal_scans_gives_array(rng):
    scans = [rng.standard_normal((20, 3)) for _ in range(2)]
    result = pairwise_dfc(scans, 5, device="cpu")
    assert_allclose(result.courses, pairwise_dfc(np.stack(scans), 5, device="cpu").courses)


# The courses take 10,080 bytes of each limit.
@pytest.mark.parametrize("memory_limit", [13_000, 40_000, 100_000])
def test_chunked_equals_one_chunk(rng, memory_limit):
    x = rng.standard_normal((4, 50, 6))
    x[2, 10:25, 4] = 1.0
    with pytest.warns(ConstantSeriesWarning):
        whole = pairwise_dfc(x, 10, 2, device="cpu", dtype="float64")
    # Small memory limits force blocks of scans and chunks of windows.
    with pytest.warns(ConstantSeriesWarning):
        tiny = pairwise_dfc(x, 10, 2, device="cpu", dtype="float64", memory_limit=memory_limit)
    assert_allclose(tiny.courses, whole.courses, rtol=0, atol=1e-14)
    assert tiny.n_constant == whole.n_constant == 3


def test_as_tensor(rng):
    x = rng.standard_normal((2, 20, 4))
    result = pairwise_dfc(x, 5, device="cpu", as_tensor=True)
    assert isinstance(result.courses, torch.Tensor)
    assert_allclose(result.courses.numpy(), pairwise_dfc(x, 5, device="cpu").courses)


def test_constant_windows_are_nan_with_one_warning(rng):
    x = rng.standard_normal((2, 30, 4))
    x[0, 5:20, 1] = 3.0  # region 1 of scan 0 constant over t = 5..19
    x[1, :, 3] = 0.0  # region 3 of scan 1 constant throughout
    with pytest.warns(ConstantSeriesWarning, match="constant") as record:
        result = pairwise_dfc(x, 8, 2, device="cpu")
    assert len([w for w in record if issubclass(w.category, ConstantSeriesWarning)]) == 1
    pairs = [tuple(p) for p in result.pairs]
    onsets = result.window_starts
    inside = (onsets >= 5) & (onsets + 8 <= 20)
    for p, (i, j) in enumerate(pairs):
        expected_nan = inside if 1 in (i, j) else np.zeros_like(inside)
        assert_array_equal(np.isnan(result.courses[0, p]), expected_nan)
        assert np.isnan(result.courses[1, p]).all() == (3 in (i, j))
    assert result.n_constant == inside.sum() + onsets.size
    finite = ~np.isnan(result.courses[0, 0])
    assert_allclose(result.courses[0, 0][finite], sequential_dfc(x[0], 8, 2)[0][finite], atol=2e-5)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros((10, 3)), "shape \\(n_scans, n_timepoints, n_regions\\)"),
        ("abc", "got str"),
        ([], "no scans"),
        ([np.zeros((10, 3)), np.zeros((10, 4))], "same number of regions"),
        (np.zeros((2, 10, 1)), "at least 2 regions"),
        (np.full((2, 10, 3), np.nan), "NaN"),
    ],
)
def test_bad_timeseries(bad, match):
    with pytest.raises(ValueError, match=match):
        pairwise_dfc(bad, 4, device="cpu")


def test_bad_parameters(rng):
    x = rng.standard_normal((2, 10, 3))
    with pytest.raises(ValueError, match="at most the number of time points"):
        pairwise_dfc(x, 11, device="cpu")
    with pytest.raises(
        ValueError,
        match=r"The 'window_length' parameter of pairwise_dfc must be an int in the range "
        r"\[3, inf\) or a str. Got 2 instead.",
    ):
        pairwise_dfc(x, 2, device="cpu")
    with pytest.raises(
        ValueError,
        match=r"The 'step' parameter of pairwise_dfc must be an int in the range \[1, inf\) "
        r"or a str. Got 0 instead.",
    ):
        pairwise_dfc(x, 4, 0, device="cpu")
    with pytest.raises(
        ValueError, match="'dtype' parameter of pairwise_dfc must be 'float32' or 'float64'"
    ):
        pairwise_dfc(x, 4, device="cpu", dtype="int8")
    with pytest.raises(ValueError, match="ragged"):
        pairwise_dfc([x[0], x[1, :8]], 4, device="cpu", as_tensor=True)


def test_pair_summary(rng):
    courses = np.tanh(rng.standard_normal((3, 6, 9)))
    courses[0, 2, [1, 4]] = np.nan
    courses[1, 5, :] = np.nan
    summary = pair_summary(courses, threshold=0.25)
    for s in range(3):
        for p in range(6):
            c = courses[s, p][~np.isnan(courses[s, p])]
            if c.size == 0:
                assert np.isnan(summary.mean[s, p]) and np.isnan(summary.fraction_above[s, p])
                continue
            assert_allclose(summary.mean[s, p], c.mean())
            assert_allclose(summary.std[s, p], c.std())
            assert_allclose(summary.fraction_above[s, p], np.mean(c > 0.25))
    features = summary.features()
    assert features.shape == (3, 18)
    pairs = np.stack(np.triu_indices(4, 1), axis=1)
    assert summary.feature_names(pairs)[:2] == ["mean_0-1", "mean_0-2"]
    assert summary.feature_names(pairs)[12] == "frac_above_0-1"
    # Same from a tensor, a ragged list and a PairwiseDFC.
    tensor = pair_summary(torch.from_numpy(courses), threshold=0.25)
    assert_allclose(tensor.std, summary.std)
    ragged = pair_summary([courses[0], courses[1][:, :4]], threshold=0.25)
    assert np.isnan(ragged.mean[1, 5])
    assert_allclose(ragged.mean[1, :5], courses[1, :5, :4].mean(axis=1))
    result = pairwise_dfc(rng.standard_normal((2, 20, 4)), 6, device="cpu")
    assert pair_summary(result).mean.shape == (2, 6)


def test_pair_summary_errors():
    with pytest.raises(ValueError, match="in the range \\[-1, 1\\]"):
        pair_summary(np.zeros((1, 2, 3)), threshold=2)
    with pytest.raises(ValueError, match="shape \\(n_scans, n_pairs, n_windows\\)"):
        pair_summary(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="float array"):
        pair_summary(np.zeros((1, 2, 3), dtype=int))


class _FakeStream:
    def __init__(self, *args, **kwargs):
        self.waited = 0

    def wait_stream(self, other):
        self.waited += 1


class _FakeEvent:
    recorded = 0

    def record(self, stream):
        _FakeEvent.recorded += 1

    def synchronize(self):
        pass


def test_staged_copies_with_faked_streams(monkeypatch, rng):
    """pairwise_dfc's CUDA copy path (chunks staged, written into the result
    by the sink two chunks late) on the CPU, chunk by chunk."""
    from ._fake_cuda import fake_cuda_copies

    x = rng.standard_normal((5, 40, 6))
    expected = pairwise_dfc(x, 8, 2, device="cpu", memory_limit="60KB").courses
    fake_cuda_copies(monkeypatch)
    result = pairwise_dfc(x, 8, 2, device="cpu", memory_limit="60KB")
    assert_array_equal(result.courses, expected)
    assert_allclose(result.courses[4], sequential_dfc(x[4], 8, 2), atol=TOL["float32"], rtol=0)


def test_pinned_sink_order_with_faked_streams(monkeypatch, rng):
    """The CUDA staging path (two reused buffers, deferred drains) on the CPU."""
    import contextlib

    from connscale._compute.transfer import DeviceToHost

    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    original_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: original_empty(*a, **k))
    full = torch.from_numpy(rng.standard_normal((5, 7, 9)).astype(np.float32))
    out = torch.full_like(full, float("nan"))
    cpu = torch.device("cpu")
    sink = DeviceToHost(cpu, keep_staging=True)
    sink.cuda, sink.stream = True, _FakeStream()
    assert DeviceToHost(cpu, keep_staging=True)._staging is sink._staging  # reused between calls

    def drain(s0, s1, k0, k1):
        def callback(arrays):
            out[s0:s1, :, k0:k1] = torch.from_numpy(arrays[0])

        return callback

    for s0 in range(0, 5, 2):
        for k0 in range(0, 9, 4):
            s1, k1 = min(s0 + 2, 5), min(k0 + 4, 9)
            sink.submit([full[s0:s1, :, k0:k1].clone()], drain(s0, s1, k0, k1))
    sink.flush()
    assert_array_equal(out.numpy(), full.numpy())
    assert _FakeEvent.recorded == 9 and sink.stream.waited == 9
