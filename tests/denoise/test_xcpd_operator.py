"""XCP-D's denoising as an operator, against a transcription of ``denoise_with_nilearn``."""

import itertools

import numpy as np
import pytest
from nilearn import signal

from connscale.denoise import clean_signals, cleaning_operator, residual_dof, xcpd_operator

T_R = 2.0


def _interpolate(arr, sample_mask, t_r):
    """XCP-D's ``_interpolate`` (xcp_d/utils/utils.py), transcribed."""
    outlier_idx = list(np.where(~sample_mask)[0])
    n_volumes = arr.shape[0]
    out = signal._interpolate_volumes(arr, sample_mask=sample_mask, t_r=t_r, extrapolate=True)
    gaps = [[start, end] for start, end in itertools.pairwise(outlier_idx) if start + 1 < end]
    edges = iter(outlier_idx[:1] + list(itertools.chain.from_iterable(gaps)) + outlier_idx[-1:])
    blocks = list(zip(edges, edges, strict=False))
    first, last = blocks[0], blocks[-1]
    if first[0] == 0:
        out[: first[1] + 1, :] = out[first[1] + 1, :]
    if last[1] == n_volumes - 1:
        out[last[0] :, :] = out[last[0] - 1, :]
    return out


def _denoise_with_nilearn(bold, confounds, sample_mask, low_pass, high_pass, order, t_r):
    """XCP-D's ``_denoise_with_nilearn`` (no voxelwise confounds), transcribed."""
    bold = bold.copy()
    confounds = confounds.copy()
    n_volumes = bold.shape[0]
    if (~sample_mask).any():
        bold = _interpolate(bold, sample_mask, t_r)
        confounds = _interpolate(confounds, sample_mask, t_r)
    bold = signal.standardize_signal(bold, detrend=True, standardize=False)
    confounds = signal.standardize_signal(confounds, detrend=True, standardize=False)
    if low_pass or high_pass:
        kwargs = {
            "sampling_rate": 1.0 / t_r,
            "low_pass": low_pass,
            "high_pass": high_pass,
            "order": order,
            "padtype": "constant",
            "padlen": n_volumes - 1,
        }
        bold = signal.butterworth(signals=bold, **kwargs)
        confounds = signal.butterworth(signals=confounds, **kwargs)
    betas = np.linalg.lstsq(confounds[sample_mask], bold[sample_mask], rcond=None)[0]
    return bold - confounds @ betas


def _run(n_volumes=120, n_series=7, n_confounds=6, seed=0):
    rng = np.random.default_rng(seed)
    drift = np.linspace(0, 1, n_volumes)[:, None]
    bold = 1000 + 5 * rng.standard_normal((n_volumes, n_series)) + 20 * drift
    confounds = rng.standard_normal((n_volumes, n_confounds)) + drift
    return bold, confounds


@pytest.mark.parametrize("band", [(0.08, 0.01), (None, 0.01), (0.1, None), (None, None)])
@pytest.mark.parametrize("dummy", [0, 3])
def test_xcpd_operator_equals_denoise_with_nilearn(band, dummy):
    bold, confounds = _run()
    n = bold.shape[0]
    kept = np.ones(n, bool)
    kept[[dummy, dummy + 1, 30, 31, 32, 77, n - 2, n - 1]] = False  # both edges censored
    low_pass, high_pass = band
    reference = _denoise_with_nilearn(
        bold[dummy:], confounds[dummy:], kept[dummy:], low_pass, high_pass, 2, T_R
    )
    for output_type in ("interpolated", "censored"):
        operator = xcpd_operator(
            n,
            confounds=confounds,
            sample_mask=np.flatnonzero(kept),
            dummy_scans=dummy,
            low_pass=low_pass,
            high_pass=high_pass,
            t_r=T_R,
            output_type=output_type,
        )
        expected = reference if output_type == "interpolated" else reference[kept[dummy:]]
        got = operator.matrix @ bold
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got, expected, atol=1e-5 * scale)
        assert operator.matrix[:, :dummy].max(initial=0) == 0
    # The censored output is the low-motion rows of the interpolated one.
    assert operator.interpolated is None
    full = xcpd_operator(
        n,
        confounds=confounds,
        sample_mask=kept,
        dummy_scans=dummy,
        low_pass=low_pass,
        high_pass=high_pass,
        t_r=T_R,
        output_type="interpolated",
    )
    np.testing.assert_array_equal(full.volumes, np.arange(dummy, n))
    np.testing.assert_array_equal(full.interpolated, ~kept[dummy:])
    low = full.low_motion()
    np.testing.assert_array_equal(low.volumes, operator.volumes)
    np.testing.assert_allclose(low.matrix, operator.matrix, atol=1e-12)


def test_xcpd_operator_cleans_on_the_device_path():
    """The operator's rows clean, then z-score, as clean_signals does with any operator."""
    bold, confounds = _run(n_volumes=80, seed=1)
    kept = np.ones(80, bool)
    kept[40:44] = False
    operator = xcpd_operator(
        80, confounds=confounds, sample_mask=kept, low_pass=0.1, high_pass=0.01, t_r=T_R
    )
    reference = _denoise_with_nilearn(bold, confounds, kept, 0.1, 0.01, 2, T_R)[kept]
    reference = (reference - reference.mean(0)) / reference.std(0, ddof=1)
    got = clean_signals(bold, operator, standardize="zscore_sample", dtype="float64", device="cpu")
    np.testing.assert_allclose(got, reference, atol=1e-6)


def test_xcpd_operator_dof_counts_kept_volumes():
    _, confounds = _run(n_volumes=100, n_confounds=4)
    kept = np.ones(100, bool)
    kept[10:30] = False
    operator = xcpd_operator(
        100, confounds=confounds, sample_mask=kept, t_r=T_R, output_type="interpolated"
    )
    dof = residual_dof(operator, confounds=confounds)
    assert dof["volumes_kept"] == 80
    # No filter: the 80 kept volumes less the confounds, the mean and the trend; the
    # gain the detrending over the interpolated gap gives one direction counts as 1.
    assert dof["dof"] == pytest.approx(80 - 4 - 2, abs=0.05)


def test_without_censoring_or_confounds_xcpd_detrends_only():
    bold, _ = _run(n_volumes=50)
    operator = xcpd_operator(50, t_r=T_R)
    expected = signal.standardize_signal(bold, detrend=True, standardize=False)
    np.testing.assert_allclose(operator.matrix @ bold, expected, atol=1e-8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"low_pass": 0.25}, "low_pass 0.25 Hz is at or above the Nyquist frequency"),
        ({"high_pass": 0.3}, "high_pass 0.3 Hz is at or above the Nyquist frequency"),
    ],
)
def test_band_above_nyquist_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        xcpd_operator(40, t_r=T_R, **kwargs)
    with pytest.raises(ValueError, match=message):
        cleaning_operator(40, t_r=T_R, **kwargs)


def test_bad_xcpd_arguments():
    with pytest.raises(ValueError, match="output_type must be one of censored, interpolated"):
        xcpd_operator(40, t_r=T_R, output_type="both")
    with pytest.raises(ValueError, match="dummy_scans must leave at least 2 of the 40"):
        xcpd_operator(40, t_r=T_R, dummy_scans=39)
    with pytest.raises(ValueError, match="removes every volume after the dummy scans"):
        xcpd_operator(40, t_r=T_R, dummy_scans=5, sample_mask=[0, 1, 2])
