"""Input validation shared by every public function.

Messages say what was expected and what arrived, as scikit-learn's do.
"""

from __future__ import annotations

import os
from numbers import Integral, Real
from pathlib import Path

import numpy as np

# Fewest time points in a sliding window, everywhere (dynamic_correlation,
# pairwise_dfc, the cohort jobs): with 2 points every Pearson r is +-1 (or
# undefined), so 3 is the shortest window whose correlation says anything.
MIN_WINDOW_LENGTH = 3


def check_timeseries(
    timeseries,
    *,
    name: str = "timeseries",
    min_timepoints: int = 3,
    dtype=None,
) -> np.ndarray:
    """Validate a (n_timepoints, n_series) array.

    Parameters
    ----------
    timeseries : array-like of shape (n_timepoints, n_series)
    name : str
        Name used in error messages.
    min_timepoints : int, default=3
        Fewest time points accepted.
    dtype : numpy dtype or None
        Convert to this dtype; None keeps float32/float64 and converts
        anything else to float64.

    Returns
    -------
    ndarray of shape (n_timepoints, n_series)
    """
    try:
        import torch

        if isinstance(timeseries, torch.Tensor):
            timeseries = timeseries.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    array = np.asarray(timeseries)
    if array.dtype == object:
        raise ValueError(f"'{name}' must be a numeric array; got an object array.")
    check_real(array, name)
    if array.ndim != 2:
        raise ValueError(
            f"'{name}' must be a 2-D array of shape (n_timepoints, n_series); "
            f"got an array of shape {array.shape}."
        )
    if not np.issubdtype(array.dtype, np.number) and array.dtype != bool:
        raise ValueError(f"'{name}' must be numeric; got dtype {array.dtype}.")
    if dtype is not None:
        array = array.astype(dtype, copy=False)
    elif array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    n_timepoints, n_series = array.shape
    if n_timepoints < min_timepoints:
        raise ValueError(
            f"'{name}' must have at least {min_timepoints} time points (rows); got "
            f"{n_timepoints} (shape {array.shape}). Arrays are (n_timepoints, "
            "n_series): transpose yours if the axes are swapped."
        )
    if n_series < 1:
        raise ValueError(f"'{name}' has no series (shape {array.shape}).")
    finite = np.isfinite(array)
    if not finite.all():
        bad = np.flatnonzero(~finite.all(axis=0))
        n_nan = int(np.isnan(array).sum())
        n_inf = int((~finite).sum()) - n_nan
        raise ValueError(
            f"'{name}' contains {n_nan} NaN and {n_inf} infinite value(s) in "
            f"{bad.size} series (first: column {bad[0]}). Clean or drop them first."
        )
    return array


def check_real(array, name: str) -> None:
    """Refuse complex arrays: dropping the imaginary part would lose data."""
    if np.iscomplexobj(array):
        raise ValueError(
            f"'{name}' must hold real numbers; got complex values (dtype {array.dtype}). "
            "Pass the real part, magnitude or phase explicitly."
        )


def check_not_all_constant(array: np.ndarray, name: str = "timeseries") -> None:
    """Raise when every series (column) of a finite 2-D array is constant:
    every correlation would be undefined."""
    if array.shape[0] and bool((array == array[:1]).all()):
        raise ValueError(
            f"Every series of '{name}' is constant (zero variance; shape {array.shape}); "
            "their correlations are all undefined. Expected at least one varying series."
        )


def check_output_path(out, name: str = "out") -> Path:
    """An output file path that is not a directory and whose parent is not a file."""
    path = Path(os.fspath(out))
    if path.is_dir():
        raise ValueError(f"'{name}' must be a file path; got {path}, which is a directory.")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(
                    f"'{name}' cannot be created: {parent} is a file, not a directory."
                )
            break
    return path


def check_int(value, name: str, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """Check an integer parameter lies in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"'{name}' must be an integer; got {value!r}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"'{name}' must be >= {minimum}; got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"'{name}' must be <= {maximum}; got {value}.")
    return value


def to_timepoints(value, name: str, *, t_r: float | None = None):
    """A duration in time points: ints pass through; a string ending in ``s``
    (``'44s'``) is seconds, divided by the repetition time ``t_r`` and
    rounded to the nearest time point; other strings must be integers."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text.endswith("s"):
        try:
            seconds = float(text[:-1])
        except ValueError:
            raise ValueError(
                f"'{name}' must be a number of time points or of seconds ('44s'); got {value!r}."
            ) from None
        if t_r is None:
            raise ValueError(
                f"'{name}' is given in seconds ({value!r}) but the repetition time is unknown; "
                "pass t_r (--t-r), or give it in time points."
            )
        t_r = check_positive(t_r, "t_r")
        if not np.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"'{name}' must be a positive duration; got {value!r}.")
        return int(np.floor(seconds / t_r + 0.5))
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"'{name}' must be a number of time points or of seconds ('44s'); got {value!r}."
        ) from None


def check_positive(value, name: str) -> float:
    """Check a number is finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) \
            or value <= 0:
        raise ValueError(f"'{name}' must be a number > 0; got {value!r}.")
    return float(value)


def check_window(window_length, step, n_timepoints: int | None = None, *,
                 minimum: int = MIN_WINDOW_LENGTH, where: str = "the number of time points",
                 t_r: float | None = None) -> tuple[int, int]:
    """Validate a sliding window: ``minimum <= window_length <= n_timepoints``
    (no upper bound when ``n_timepoints`` is None) and ``step >= 1``.
    ``minimum`` defaults to :data:`MIN_WINDOW_LENGTH`, the one window minimum
    of every correlation window. ``where`` names what ``n_timepoints``
    counts, for the message. Either may be given in seconds (``'44s'``) with
    the repetition time ``t_r`` (see :func:`to_timepoints`). Returns
    (window_length, step) as ints, in time points."""
    window_length = to_timepoints(window_length, "window_length", t_r=t_r)
    step = to_timepoints(step, "step", t_r=t_r)
    window_length = check_int(window_length, "window_length", minimum=minimum)
    if n_timepoints is not None and window_length > n_timepoints:
        raise ValueError(
            f"'window_length' must be at most {where} ({n_timepoints}); got {window_length}."
        )
    return window_length, check_int(step, "step", minimum=1)


def check_threshold(threshold, name: str = "threshold") -> float:
    """Check a correlation threshold lies in [-1, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, Real):
        raise ValueError(f"'{name}' must be a number in [-1, 1]; got {threshold!r}.")
    threshold = float(threshold)
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"'{name}' must lie in [-1, 1]; got {threshold}.")
    return threshold


def check_option(value, name: str, allowed) -> str:
    """Check a string option is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(
            f"'{name}' must be one of {sorted(allowed)}; got {value!r}."
        )
    return value


def check_random_state(seed) -> np.random.Generator:
    """Turn None, an int or a Generator into a numpy Generator."""
    if seed is None or isinstance(seed, (Integral, np.integer)):
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    raise ValueError(
        f"'random_state' must be None, an int or a numpy Generator; got {seed!r}."
    )
