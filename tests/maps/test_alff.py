"""ALFF and fALFF against a numpy/scipy transcription of XCP-D's ``compute_alff``
(``xcp_d/utils/restingstate.py``): ``scipy.signal.periodogram`` without
censoring, ``scipy.signal.lombscargle`` on the kept volumes with it."""

import importlib

import numpy as np
import pytest
import scipy.signal
import torch

import connscale
from connscale import MemoryLimitError
from connscale.datasets.bundled import load_nitime_fmri, load_nitime_roi

# The module (connscale.maps.alff is the function).
alff_module = importlib.import_module("connscale.maps.alff")

RTOL = 1e-5


def reference_alff(x, t_r, *, low_pass=0.08, high_pass=0.01, sample_mask=None):
    """XCP-D's ALFF, series by series, and fALFF = band amplitude / total amplitude."""
    fs = 1.0 / t_r
    n_timepoints, n_series = x.shape
    alff, falff = np.zeros(n_series), np.zeros(n_series)
    for i in range(n_series):
        series = np.array(x[:, i], dtype=np.float64)
        sd_scale = np.std(series)
        if sd_scale == 0:
            continue
        if sample_mask is not None:
            kept = series[sample_mask] - series[sample_mask].mean()
            kept /= kept.std()
            times = (np.arange(n_timepoints) * t_r)[sample_mask]
            frequencies = np.linspace(0, 0.5 * fs, n_timepoints // 2 + 1)[1:]
            power = scipy.signal.lombscargle(times, kept, 2 * np.pi * frequencies, normalize=True)
            positive = slice(0, None)
        else:
            standardised = (series - series.mean()) / series.std()
            frequencies, power = scipy.signal.periodogram(standardised, fs, scaling="spectrum")
            positive = slice(1, None)
        amplitude = np.sqrt(power)
        band = slice(
            np.argmin(np.abs(frequencies - high_pass)), np.argmin(np.abs(frequencies - low_pass))
        )
        alff[i] = 2 * np.mean(amplitude[band]) * sd_scale
        falff[i] = amplitude[band].sum() / amplitude[positive].sum()
    return alff, falff


def random_walks(n_timepoints, n_series, seed=0, offset=1000.0):
    """Drifting series far from zero, as raw BOLD is."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_timepoints, n_series)).cumsum(0) + offset


def censoring(n_timepoints, n_dropped, seed=1):
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_timepoints, n_timepoints - n_dropped, replace=False))


def assert_maps_close(maps, reference):
    for got, expected in zip(maps, reference, strict=True):
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=0)


@pytest.mark.parametrize("n_timepoints", [200, 201])
def test_periodogram_equals_scipy(n_timepoints, device, dtype):
    x = random_walks(n_timepoints, 40)
    maps = connscale.alff(x.astype(dtype), 2.0, device=device, dtype=dtype)
    assert_maps_close(maps, reference_alff(x.astype(dtype), 2.0))


@pytest.mark.parametrize("n_timepoints", [200, 201])
def test_lombscargle_on_kept_volumes_equals_scipy(n_timepoints, device, dtype):
    x = random_walks(n_timepoints, 40)
    kept = censoring(n_timepoints, 37)
    maps = connscale.alff(x.astype(dtype), 2.0, sample_mask=kept, device=device, dtype=dtype)
    assert_maps_close(maps, reference_alff(x.astype(dtype), 2.0, sample_mask=kept))
    as_bool = np.zeros(n_timepoints, dtype=bool)
    as_bool[kept] = True
    by_bool = connscale.alff(x, 2.0, sample_mask=as_bool, device=device, dtype=dtype)
    assert_maps_close(by_bool, reference_alff(x, 2.0, sample_mask=kept))


@pytest.mark.parametrize("censored", [False, True])
def test_real_roi_series(censored, dtype):
    x, _ = load_nitime_roi()  # 250 x 31, TR 1.89 s
    kept = censoring(x.shape[0], 25) if censored else None
    maps = connscale.alff(x, 1.89, sample_mask=kept, high_pass=0.0, device="cpu", dtype=dtype)
    assert_maps_close(maps, reference_alff(x, 1.89, high_pass=0.0, sample_mask=kept))


@pytest.mark.parametrize("censored", [False, True])
def test_real_bold_float32(censored):
    """nitime's raw int16 scan (40 volumes, TR 1.35 s), a voxel in 4, in float32."""
    x = np.asarray(load_nitime_fmri(1).dataobj).reshape(-1, 40)[::4].T.astype(np.float32)
    kept = censoring(40, 6) if censored else None
    maps = connscale.alff(x, 1.35, low_pass=0.1, sample_mask=kept, device="cpu")
    assert_maps_close(maps, reference_alff(x, 1.35, low_pass=0.1, sample_mask=kept))


def test_every_volume_kept_is_the_periodogram_and_xcpd_lombscargle():
    """XCP-D runs Lomb-Scargle whenever censoring is on: with an even T and
    nothing censored, that is the periodogram."""
    x = random_walks(120, 10)
    every = np.arange(120)
    maps = connscale.alff(x, 2.0, sample_mask=every, device="cpu", dtype="float64")
    assert_maps_close(maps, reference_alff(x, 2.0))
    assert_maps_close(maps, reference_alff(x, 2.0, sample_mask=every))


def test_planted_sinusoids():
    """A cosine inside the band has fALFF ~1 and ALFF = its amplitude times sqrt(2)
    over the band's length; one above the band has ALFF ~0."""
    t_r, n_timepoints = 2.0, 200
    times = np.arange(n_timepoints) * t_r
    inside = 3.0 * np.cos(2 * np.pi * 0.04 * times)  # a Fourier frequency: 16 / (200 * 2)
    above = 3.0 * np.cos(2 * np.pi * 0.2 * times)
    alff, falff = connscale.alff(np.c_[inside, above], t_r, device="cpu", dtype="float64")
    band_length = 32 - 4  # frequencies 0.01 (k = 4) to 0.08 (k = 32), that one excluded
    np.testing.assert_allclose(alff[0], 2 * 3.0 / np.sqrt(2) / band_length, rtol=1e-12)
    np.testing.assert_allclose(falff, [1.0, 0.0], atol=1e-12)
    assert alff[1] < 1e-12


@pytest.mark.parametrize("censored", [False, True])
def test_several_batches_give_the_same_maps(censored, monkeypatch):
    x = random_walks(100, 60)
    kept = censoring(100, 20) if censored else None
    whole = connscale.alff(x, 2.0, sample_mask=kept, device="cpu", dtype="float64")
    calls = []
    batch_maps = alff_module._batch_maps

    def counted(series, *args):
        calls.append(series.shape[0])
        return batch_maps(series, *args)

    monkeypatch.setattr(alff_module, "_batch_maps", counted)
    # ~6 series a batch (about 10 kB each); censored, the basis's host temporaries
    # (8 x 80 kept x 50 frequencies x 8 bytes) and ~20 series a batch.
    limit = 260_000 if censored else 60_000
    batched = connscale.alff(
        x, 2.0, sample_mask=kept, device="cpu", dtype="float64", memory_limit=limit
    )
    assert len(calls) >= 3 and sum(calls) == 60
    for got, expected in zip(batched, whole, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)


def test_memory_limit_below_one_series():
    with pytest.raises(MemoryLimitError, match="ALFF of 5 series x 100 time points"):
        connscale.alff(random_walks(100, 5), 2.0, device="cpu", memory_limit=1000)


def test_tensor_input_computed_where_it_lies():
    x = random_walks(150, 12)
    maps = connscale.alff(torch.from_numpy(x), 2.0, device="cpu", dtype="float64")
    assert_maps_close(maps, reference_alff(x, 2.0))


@pytest.mark.parametrize("censored", [False, True])
def test_constant_series_are_zero(censored):
    x = random_walks(100, 4)
    x[:, 1] = 7.5
    kept = censoring(100, 10) if censored else None
    if censored:
        x[kept, 2] = 3.0  # constant over the kept volumes only
    alff, falff = connscale.alff(x, 2.0, sample_mask=kept, device="cpu")
    zero = [1, 2] if censored else [1]
    assert np.all(alff[zero] == 0) and np.all(falff[zero] == 0)
    assert np.all(alff[[0, 3]] > 0) and np.all(falff[[0, 3]] > 0)


def test_normalize_divides_by_the_mean_over_non_constant_series():
    x = random_walks(100, 6)
    x[:, 0] = 1.0
    alff, falff = connscale.alff(x, 2.0, device="cpu", dtype="float64")
    m_alff, m_falff = connscale.alff(x, 2.0, normalize=True, device="cpu", dtype="float64")
    np.testing.assert_allclose(m_alff, alff / alff[1:].mean(), rtol=1e-12)
    np.testing.assert_allclose(m_falff, falff / falff[1:].mean(), rtol=1e-12)
    np.testing.assert_allclose([m_alff[1:].mean(), m_falff[1:].mean()], 1.0, rtol=1e-12)
    assert m_alff[0] == 0


def test_normalize_needs_a_varying_series():
    with pytest.raises(ValueError, match="normalize=True divides ALFF by its mean over the non"):
        connscale.alff(np.ones((50, 3)), 2.0, normalize=True, device="cpu")


X = random_walks(100, 3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"low_pass": 0.3},
            r"The band \[0.01, 0.3\] Hz reaches above the Nyquist frequency 0.25 Hz of "
            r"t_r=2.0 s: 'low_pass' must be at most 0.25.",
        ),
        ({"low_pass": 0.01}, r"'low_pass' \(0.01 Hz\) must be above 'high_pass' \(0.01 Hz\)"),
        ({"low_pass": 0.05, "high_pass": 0.06}, "must be above 'high_pass'"),
        ({"low_pass": 0.0105}, r"The band \[0.01, 0.0105\] Hz holds no frequency"),
        ({"sample_mask": [0, 5]}, "'sample_mask' keeps 2 of 100 volumes; ALFF needs at least 3"),
        ({"sample_mask": [0, 5, 100]}, "'sample_mask' index 100 is out of range for 100 volumes"),
        ({"sample_mask": [-1, 5, 6]}, "'sample_mask' index -1 is out of range"),
        ({"sample_mask": [1, 5, 5, 6]}, "'sample_mask' lists a volume more than once"),
        ({"sample_mask": np.ones(99, bool)}, "one value per volume \\(100\\); got 99"),
        ({"sample_mask": [0.5, 1.5, 2.5]}, "'sample_mask' must hold the indices"),
        ({"high_pass": -0.01}, "The 'high_pass' parameter of alff must be a float in the range"),
    ],
)
def test_bad_input_one_line_error(kwargs, message):
    with pytest.raises(ValueError, match=message) as caught:
        connscale.alff(X, 2.0, device="cpu", **kwargs)
    assert "\n" not in str(caught.value)


def test_nan_input_named():
    x = X.copy()
    x[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"'timeseries' contains 1 NaN .* \(first: column 1\)"):
        connscale.alff(x, 2.0, device="cpu")


def test_bad_repetition_time():
    with pytest.raises(ValueError, match="The 't_r' parameter of alff must be a float"):
        connscale.alff(X, 0.0, device="cpu")
