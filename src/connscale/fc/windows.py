"""Sliding-window shapes, and the repetition time that converts windows given in seconds.

A window is rectangular, or tapered as Allen et al. (2014): a rectangle of
w time points convolved with a Gaussian of σ time points.
"""

from __future__ import annotations

import math
import os

import numpy as np

from connscale._validation import check_int, check_option, check_positive

TAPERS = ("rectangular", "gaussian")


def taper_halfwidth(sigma: float) -> int:
    """Time points a Gaussian taper adds on each side of the rectangle, ⌈3σ⌉."""
    return math.ceil(3.0 * check_positive(sigma, "taper_sigma"))


def window_support(window_length: int, taper: str = "rectangular", sigma: float = 3.0) -> int:
    """Time points a window covers: w, or w + 2⌈3σ⌉ for the Gaussian taper."""
    check_option(taper, "taper", TAPERS)
    if taper == "rectangular":
        return int(window_length)
    return int(window_length) + 2 * taper_halfwidth(sigma)


def taper_weights(window_length: int, sigma: float = 3.0) -> np.ndarray:
    """Return the weights of a tapered window.

    The window is a rectangle of ``window_length`` time points convolved
    with a Gaussian of standard deviation ``sigma`` time points, over the
    rectangle and ⌈3σ⌉ points on each side.

    Parameters
    ----------
    window_length : int
        w, the rectangle's width (the window size papers report).
    sigma : float, default=3.0
        In time points (Allen et al. 2014: 3 TRs).

    Returns
    -------
    ndarray of shape (w + 2⌈3σ⌉,)
        Largest value 1.

    Examples
    --------
    >>> w = taper_weights(22, 3.0)
    >>> w.shape, round(float(w.max()), 3), bool(w[0] < 0.01)
    ((40,), 1.0, True)
    """
    window_length = check_int(window_length, "window_length", minimum=1)
    half = taper_halfwidth(sigma)
    rectangle = np.zeros(window_length + 2 * half)
    rectangle[half : half + window_length] = 1.0
    offsets = np.arange(-half, half + 1)
    gaussian = np.exp(-0.5 * (offsets / sigma) ** 2)
    weights = np.convolve(rectangle, gaussian, mode="same")
    return weights / weights.max()


def repetition_time(path: str | os.PathLike) -> float | None:
    """Return the repetition time, in seconds, in a 4-D NIfTI header.

    None when the file is not NIfTI or the header holds none.
    """
    name = str(path).lower()
    if not name.endswith((".nii", ".nii.gz")):
        return None
    import nibabel as nib

    header = nib.load(str(path)).header
    zooms = header.get_zooms()
    if len(zooms) < 4 or not zooms[3] or zooms[3] <= 0:
        return None
    unit = header.get_xyzt_units()[1]
    scale = {"msec": 1e-3, "usec": 1e-6}.get(unit, 1.0)
    return float(zooms[3]) * scale
