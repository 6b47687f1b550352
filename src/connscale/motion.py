"""Head motion of a run, as XCP-D uses it: filtered motion, FD, censoring, dummy scans.

The host side of XCP-D's temporal steps before denoising, in numpy and scipy
(no torch): the respiration filter of the six motion parameters
(:func:`filter_motion`, XCP-D's ``xcp_d/utils/confounds.py``
``filter_motion``), the framewise displacement of Power et al. (2012) with a
head radius (:func:`framewise_displacement`, ``xcp_d/utils/modified_data.py``
``compute_fd``), the low-motion volumes of an FD threshold
(:func:`low_motion`, ``xcp_d/interfaces/censoring.py`` ``ProcessMotion``) and
the number of dummy scans, ``auto`` read from fMRIPrep's
``non_steady_state_outlier_XX`` columns (:func:`dummy_scans`,
``xcp_d/utils/confounds.py`` ``_infer_dummy_scans``).

What differs from XCP-D: a cutoff at or above the Nyquist frequency is an
error here (XCP-D folds it back below Nyquist with a warning), and so is a
filter order that would apply the filter zero times.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from connscale._choices import MOTION_FILTERS

__all__ = [
    "MOTION_COLUMNS",
    "MOTION_FILTERS",
    "check_motion_filter",
    "dummy_scans",
    "filter_motion",
    "framewise_displacement",
    "low_motion",
]

#: fMRIPrep's six motion parameters (mm, then radians), in the order FD reads them.
MOTION_COLUMNS = ("trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z")
#: The prefix of fMRIPrep's non-steady-state volume columns.
_NON_STEADY = "non_steady_state_outlier"


def check_motion_filter(
    filter_type: str,
    t_r: float,
    band_stop_min: float | None,
    band_stop_max: float | None = None,
    order: int = 4,
) -> None:
    """Check a motion filter against a run's sampling rate.

    Parameters
    ----------
    filter_type : {'lp', 'notch'}
    t_r : float
        The repetition time (s).
    band_stop_min, band_stop_max : float or None
        The stop band in breaths per minute ('lp': ``band_stop_min`` is the
        cutoff and ``band_stop_max`` must be None).
    order : int
        XCP-D's ``--motion-filter-order``: twice the Butterworth order ('lp'),
        four times the number of notch passes ('notch').

    Raises
    ------
    ValueError
        One line naming the value: a missing or non-positive band edge,
        ``band_stop_min >= band_stop_max``, an edge at or above the Nyquist
        frequency, an order that filters nothing.

    Examples
    --------
    >>> from connscale.motion import check_motion_filter
    >>> check_motion_filter("notch", 0.8, 12.0, 18.0)  # a valid filter: no error
    >>> check_motion_filter("lp", 2.0, 20.0)
    Traceback (most recent call last):
    ...
    ValueError: --band-stop-min 20 bpm is at or above the Nyquist frequency of a TR of 2 s (15 bpm).
    """
    if filter_type not in MOTION_FILTERS:
        raise ValueError(f"--motion-filter-type must be lp or notch; got {filter_type!r}.")
    nyquist_bpm = 30.0 / t_r
    needed = {"--band-stop-min": band_stop_min}
    if filter_type == "notch":
        needed["--band-stop-max"] = band_stop_max
    elif band_stop_max is not None:
        raise ValueError("--band-stop-max applies to --motion-filter-type notch only.")
    for flag, value in needed.items():
        if value is None or not value > 0:
            raise ValueError(
                f"--motion-filter-type {filter_type} needs {flag} > 0 (breaths per minute); "
                f"got {value}."
            )
        if value >= nyquist_bpm:
            raise ValueError(
                f"{flag} {value:g} bpm is at or above the Nyquist frequency of a TR of "
                f"{t_r:g} s ({nyquist_bpm:g} bpm)."
            )
    if filter_type == "notch" and band_stop_min >= band_stop_max:
        raise ValueError(
            f"--band-stop-min ({band_stop_min:g}) must be below --band-stop-max "
            f"({band_stop_max:g})."
        )
    least = 2 if filter_type == "lp" else 4
    if order < least:
        raise ValueError(
            f"--motion-filter-order {order} applies the {filter_type} filter "
            f"{order // least} times; give at least {least}."
        )


def filter_motion(
    motion: npt.ArrayLike,
    t_r: float,
    filter_type: str,
    band_stop_min: float,
    band_stop_max: float | None = None,
    order: int = 4,
) -> np.ndarray:
    """Return the motion parameters with respiration filtered out, as XCP-D does.

    'lp': a Butterworth low-pass of order ``order // 2`` at ``band_stop_min``
    breaths per minute, applied forward and backward (Gratton et al. 2020).
    'notch': an IIR notch (:func:`scipy.signal.iirnotch`) at the middle of
    the stop band, of quality factor centre / width, applied forward and
    backward ``order // 4`` times (Fair et al. 2020). Both pad with the
    edge values over ``T - 1`` samples (``padtype='constant'``).

    Parameters
    ----------
    motion : array-like of shape (T, n_parameters)
        The motion parameters, time first.
    t_r : float
        The repetition time (s).
    filter_type : {'lp', 'notch'}
    band_stop_min, band_stop_max : float
        The stop band in breaths per minute (see :func:`check_motion_filter`).
    order : int, default=4
        XCP-D's ``--motion-filter-order``.

    Returns
    -------
    ndarray of shape (T, n_parameters), float64

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.motion import filter_motion
    >>> t = np.arange(200) * 0.8  # seconds
    >>> breathing = 0.1 * np.sin(2 * np.pi * 0.25 * t)  # 15 breaths per minute
    >>> motion = np.c_[breathing, np.zeros((200, 5))]
    >>> filtered = filter_motion(motion, 0.8, "notch", 12.0, 18.0)
    >>> filtered.shape, bool(np.abs(filtered[50:150, 0]).max() < 0.02)
    ((200, 6), True)
    """
    from scipy.signal import butter, filtfilt, iirnotch

    check_motion_filter(filter_type, t_r, band_stop_min, band_stop_max, order)
    data = np.asarray(motion, dtype=np.float64)
    fs = 1.0 / t_r
    pad = {"axis": 0, "padtype": "constant", "padlen": data.shape[0] - 1}
    if filter_type == "lp":
        b, a = butter(order // 2, band_stop_min / 60.0, btype="lowpass", fs=fs)
        return filtfilt(b, a, data, **pad)
    low, high = band_stop_min / 60.0, band_stop_max / 60.0
    centre = (low + high) / 2.0
    b, a = iirnotch(centre, centre / (high - low), fs=fs)
    for _ in range(order // 4):
        data = filtfilt(b, a, data, **pad)
    return data


def framewise_displacement(motion: npt.ArrayLike, head_radius: float = 50.0) -> np.ndarray:
    """Return Power's framewise displacement of six motion parameters (mm).

    The sum of the absolute differences between consecutive volumes of the
    three translations (mm) and of the three rotations (radians) times
    ``head_radius`` (their arc on a sphere of that radius); the first
    volume's is 0. Missing values count as 0 (fMRIPrep leaves none in the
    parameters themselves).

    Parameters
    ----------
    motion : array-like of shape (T, 6)
        ``trans_x, trans_y, trans_z, rot_x, rot_y, rot_z``
        (:data:`MOTION_COLUMNS`), filtered or not.
    head_radius : float, default=50.0
        The head's radius (mm): 50 for adults, 35 for infants (XCP-D).

    Returns
    -------
    ndarray of shape (T,)

    Examples
    --------
    >>> from connscale.motion import framewise_displacement
    >>> motion = [[0, 0, 0, 0, 0, 0], [0.1, 0, -0.2, 0.002, 0, 0]]  # mm, radians
    >>> framewise_displacement(motion).round(3)
    array([0. , 0.4])
    """
    values = np.nan_to_num(np.asarray(motion, dtype=np.float64), nan=0.0)
    if values.ndim != 2 or values.shape[1] != 6:
        raise ValueError(
            f"Framewise displacement needs (T, 6) motion parameters; got {values.shape}."
        )
    step = np.abs(np.diff(values, axis=0))
    step[:, 3:] *= head_radius
    return np.concatenate([[0.0], step.sum(axis=1)])


def low_motion(fd: npt.ArrayLike, fd_thresh: float | None) -> np.ndarray:
    """Return which volumes an FD threshold keeps (FD at most ``fd_thresh``; None: all).

    Parameters
    ----------
    fd : array-like of shape (T,)
    fd_thresh : float or None
        mm; None or at most 0: no censoring (XCP-D's ``--fd-thresh 0``).

    Returns
    -------
    ndarray of bool, shape (T,)

    Examples
    --------
    >>> from connscale.motion import low_motion
    >>> low_motion([0.0, 0.2, 0.6, 0.3], 0.5)
    array([ True,  True, False,  True])
    """
    fd = np.asarray(fd, dtype=np.float64)
    if fd_thresh is None or fd_thresh <= 0:
        return np.ones(fd.shape, dtype=bool)
    return fd <= fd_thresh


def dummy_scans(value: int | str, confounds) -> int:
    """Return the number of volumes to drop at the start of a run.

    Parameters
    ----------
    value : int or 'auto'
        A count, returned as is, or 'auto': one past the last volume flagged
        by fMRIPrep's ``non_steady_state_outlier_XX`` columns (they flag the
        first volumes), 0 when there is no such column or none is flagged.
    confounds : pandas.DataFrame or None
        The run's whole confounds table (for 'auto').

    Returns
    -------
    int

    Examples
    --------
    >>> import pandas as pd
    >>> from connscale.motion import dummy_scans
    >>> confounds = pd.DataFrame({"non_steady_state_outlier00": [1, 0, 0, 0],
    ...                           "non_steady_state_outlier01": [0, 1, 0, 0]})
    >>> dummy_scans("auto", confounds), dummy_scans(3, confounds)
    (2, 3)
    """
    if value != "auto":
        return int(value)
    if confounds is None:
        return 0
    columns = [c for c in confounds.columns if str(c).startswith(_NON_STEADY)]
    if not columns:
        return 0
    flagged = np.flatnonzero(np.nan_to_num(confounds[columns].to_numpy(dtype=float)).any(axis=1))
    return int(flagged[-1] + 1) if flagged.size else 0
