"""Motion filter, FD, censoring and dummy scans against transcriptions of XCP-D's formulas."""

import numpy as np
import pandas as pd
import pytest
from scipy.signal import butter, filtfilt, iirnotch

from connscale.motion import (
    MOTION_COLUMNS,
    check_motion_filter,
    dummy_scans,
    filter_motion,
    framewise_displacement,
    low_motion,
)

T_R = 0.8


def _xcpd_filter_motion(data, tr, filter_type, band_stop_min, band_stop_max, order):
    """XCP-D's ``filter_motion`` (xcp_d/utils/confounds.py), transcribed."""
    lowpass_hz = band_stop_min / 60
    fs = 1 / tr
    if filter_type == "lp":
        b, a = butter(int(np.floor(order / 2)), lowpass_hz, btype="lowpass", output="ba", fs=fs)
        return filtfilt(b, a, data, axis=0, padtype="constant", padlen=data.shape[0] - 1)
    stopband_hz = np.array([lowpass_hz, band_stop_max / 60])
    freq = np.nanmean(stopband_hz)
    bandwidth = np.abs(np.diff(stopband_hz)).item()  # XCP-D passes the 1-element array
    b, a = iirnotch(freq, freq / bandwidth, fs=fs)
    out = data.copy()
    for _ in range(int(np.floor(order / 4))):
        out = filtfilt(b, a, out, axis=0, padtype="constant", padlen=data.shape[0] - 1)
    return out


def _xcpd_compute_fd(confound, head_radius=50, filtered=False):
    """XCP-D's ``compute_fd`` (xcp_d/utils/modified_data.py), transcribed."""
    confound = confound.replace(np.nan, 0)
    columns = ["trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z"]
    if filtered:
        columns = [f"{c}_filtered" for c in columns]
    mpars = confound[columns].to_numpy()
    diff = mpars[:-1, :6] - mpars[1:, :6]
    diff[:, 3:6] *= head_radius
    return np.hstack([0, np.abs(diff).sum(axis=1)])


def _motion(n_volumes=200, seed=0):
    """Slow drifts plus a respiration-like oscillation at 18 breaths per minute."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_volumes) * T_R
    breathing = np.sin(2 * np.pi * 0.3 * t)[:, None] * np.array([0.1, 0.2, 0.05, 1e-3, 2e-3, 1e-3])
    drift = np.cumsum(0.02 * rng.standard_normal((n_volumes, 6)), axis=0)
    drift[:, 3:] *= 1e-3  # radians
    return breathing + drift


@pytest.mark.parametrize(
    ("filter_type", "band", "order"),
    [("lp", (6.0, None), 4), ("lp", (12.0, None), 2), ("notch", (12.0, 24.0), 4),
     ("notch", (15.0, 20.0), 8)],
)  # fmt: skip
def test_filter_motion_is_xcpds(filter_type, band, order):
    motion = _motion()
    expected = _xcpd_filter_motion(motion, T_R, filter_type, *band, order)
    got = filter_motion(motion, T_R, filter_type, *band, order=order)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    # The respiration is gone: less power at 0.3 Hz than before.
    spectrum = np.abs(np.fft.rfft(got - got.mean(0), axis=0))
    raw = np.abs(np.fft.rfft(motion - motion.mean(0), axis=0))
    bin_ = int(round(0.3 * motion.shape[0] * T_R))
    assert (spectrum[bin_] < 0.5 * raw[bin_]).all()


@pytest.mark.parametrize("head_radius", [50.0, 35.0])
def test_fd_after_the_motion_filter_is_xcpds(head_radius):
    motion = _motion(seed=3)
    frame = pd.DataFrame(motion, columns=MOTION_COLUMNS)
    filtered = _xcpd_filter_motion(motion, T_R, "notch", 12.0, 24.0, 4)
    for column, values in zip(MOTION_COLUMNS, filtered.T, strict=True):
        frame[f"{column}_filtered"] = values
    frame.iloc[0, 0] = np.nan  # a missing value counts as 0
    expected = _xcpd_compute_fd(frame, head_radius=head_radius, filtered=True)
    got = framewise_displacement(
        filter_motion(motion, T_R, "notch", 12.0, 24.0), head_radius=head_radius
    )
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    unfiltered = framewise_displacement(frame[list(MOTION_COLUMNS)], head_radius=head_radius)
    np.testing.assert_allclose(unfiltered, _xcpd_compute_fd(frame, head_radius=head_radius))
    assert got.mean() < unfiltered.mean()  # the respiration no longer counts as motion


def test_low_motion_and_min_time_are_xcpds():
    """XCP-D's ``flag_bad_run``: seconds of volumes with FD <= the threshold."""
    fd = np.array([0.0, 0.1, 0.5, 0.2, 0.2, 0.9, 0.3, 0.31])
    kept = low_motion(fd, 0.3)
    np.testing.assert_array_equal(kept, fd <= 0.3)
    assert kept.sum() * T_R == np.sum(fd <= 0.3) * T_R == 5 * T_R
    assert low_motion(fd, None).all() and low_motion(fd, 0).all()  # XCP-D: <= 0 disables


def test_dummy_scans_count_and_auto():
    table = pd.DataFrame(
        {
            "trans_x": np.zeros(10),
            "non_steady_state_outlier00": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            "non_steady_state_outlier01": [0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
        }
    )
    assert dummy_scans(4, table) == 4
    assert dummy_scans("auto", table) == 3  # one past the last flagged volume
    assert dummy_scans("auto", table[["trans_x"]]) == 0  # XCP-D: no such column gives 0
    assert dummy_scans("auto", None) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("lp", 1.0, 40.0), "--band-stop-min 40 bpm is at or above the Nyquist frequency"),
        (("notch", 1.0, 12.0, 40.0), "--band-stop-max 40 bpm is at or above the Nyquist"),
        (("notch", 1.0, 20.0, 12.0), r"--band-stop-min \(20\) must be below --band-stop-max"),
        (("notch", 1.0, 12.0, None), "needs --band-stop-max > 0"),
        (("lp", 1.0, None), "needs --band-stop-min > 0"),
        (("lp", 1.0, 6.0, 12.0), "--band-stop-max applies to --motion-filter-type notch only"),
        (("notch", 1.0, 12.0, 20.0, 2), "--motion-filter-order 2 applies the notch filter 0"),
        (("bp", 1.0, 6.0), "--motion-filter-type must be lp or notch"),
    ],
)
def test_bad_motion_filters(args, message):
    with pytest.raises(ValueError, match=message):
        check_motion_filter(*args)
    with pytest.raises(ValueError, match=message):
        filter_motion(np.zeros((20, 6)), *args[1:2], args[0], *args[2:])
