"""XCP-D's denoising of a censored run, as the matrix it applies.

The steps of XCP-D's ``denoise_with_nilearn`` (``xcp_d/utils/utils.py``),
all linear in the BOLD and the same for every voxel, run here on the
identity (the run's volumes after its dummy scans), in float64 on the host:

1. the censored volumes are replaced by the cubic spline through the kept
   ones (:class:`scipy.interpolate.CubicSpline`, extrapolated), then those
   before the first kept volume by its values and those after the last by
   the last's (XCP-D's ``_interpolate``);
2. the mean and the linear trend are removed (nilearn's ``_detrend``);
3. the Butterworth band-pass (:func:`nilearn.signal.butterworth`, padded
   with the edge values over ``n - 1`` samples);
4. the confounds, through the same three steps, are fit on the kept volumes
   by least squares (:func:`numpy.linalg.lstsq`, no intercept, unscaled) and
   their fit is removed from every volume.

Row ``t`` of the result is what volume ``t`` becomes: the kept rows are the
``censored`` output, all rows the ``interpolated`` one. numpy, scipy and
nilearn only (no torch).
"""

from __future__ import annotations

import numpy as np


def _interpolate(values: np.ndarray, kept: np.ndarray, t_r: float) -> np.ndarray:
    """Return ``values`` with the censored rows interpolated as XCP-D does."""
    from scipy.interpolate import CubicSpline

    if kept.all():
        return values
    times = np.arange(values.shape[0]) * float(t_r)
    out = values.copy()
    out[~kept] = CubicSpline(times[kept], values[kept], extrapolate=True)(times[~kept])
    first, last = np.flatnonzero(kept)[[0, -1]]
    out[:first] = out[first]
    out[last + 1 :] = out[last]
    return out


def _detrend(values: np.ndarray) -> np.ndarray:
    """Return ``values`` less their mean and linear trend (over all rows)."""
    values = values - values.mean(axis=0)
    ramp = np.arange(values.shape[0], dtype=np.float64)
    ramp -= ramp.mean()
    norm = np.sqrt((ramp**2).sum())
    if norm > 0:
        ramp /= norm
        values -= np.outer(ramp, ramp @ values)
    return values


def _band_pass(values: np.ndarray, t_r: float, low_pass, high_pass, order: int) -> np.ndarray:
    """Return ``values`` through XCP-D's Butterworth filter (unchanged without a cutoff)."""
    from nilearn.signal import butterworth

    if low_pass is None and high_pass is None:
        return values
    return butterworth(
        values,
        sampling_rate=1.0 / t_r,
        low_pass=low_pass,
        high_pass=high_pass,
        order=order,
        padtype="constant",
        padlen=values.shape[0] - 1,
        copy=True,
    )


def xcpd_clean_matrix(
    kept: np.ndarray,
    *,
    confounds: np.ndarray | None,
    detrend: bool,
    low_pass: float | None,
    high_pass: float | None,
    t_r: float | None,
    order: int,
) -> np.ndarray:
    """Return the (n, n) matrix of XCP-D's denoising of n volumes (all rows: interpolated).

    Parameters
    ----------
    kept : ndarray of bool, shape (n,)
        The low-motion volumes (at least one).
    confounds : ndarray of shape (n, n_confounds) or None
    detrend : bool
        Remove the mean and the linear trend of the interpolated series (and
        of the confounds). XCP-D detrends when it regresses confounds; without
        confounds it leaves the trend, here ``detrend`` decides.
    low_pass, high_pass : float or None
        The Butterworth band (Hz).
    t_r : float or None
        The repetition time (s): needed to interpolate or filter.
    order : int
        The Butterworth order (XCP-D's ``--bpf-order``).
    """
    n = kept.size
    steps = [lambda v: _interpolate(v, kept, t_r)]
    if detrend:
        steps.append(_detrend)
    steps.append(lambda v: _band_pass(v, t_r, low_pass, high_pass, order))
    matrix = np.eye(n)
    for step in steps:
        matrix = step(matrix)
    if confounds is None or confounds.shape[1] == 0:
        return matrix
    for step in steps:
        confounds = step(confounds)
    betas = np.linalg.lstsq(confounds[kept], matrix[kept], rcond=None)[0]
    return matrix - confounds @ betas
