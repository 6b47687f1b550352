"""Validation and normalisation shared by the voxel-wise maps (and by the callers that
normalise once for several maps: the `maps` command and the BIDS-App)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from connscale._compute import MemoryPlanner, resolve_device, resolve_dtype
from connscale._validation import check_timeseries
from connscale.fc.normalize import warn_constant
from connscale.fc.static import _normalize


@dataclass(frozen=True)
class NormalizedSeries:
    """Series validated and normalised once (:func:`normalize_once`), taken by
    every map function in place of the (T, N) series, so that several maps
    of the same series share one transfer and one normalisation (their
    ``device`` and ``dtype`` are then those of ``u``)."""

    u: torch.Tensor
    constant: torch.Tensor


#: Bytes per value of a column block of the normalisation: its contiguous
#: copy, the float64 copy, the centred values, their transpose and the cast.
_NORMALIZE_BYTES_PER_VALUE = 40


def normalize_once(
    timeseries, *, device="auto", dtype="float32", memory_limit=None
) -> NormalizedSeries:
    """:func:`normalized_series` as a :class:`NormalizedSeries`."""
    return NormalizedSeries(
        *normalized_series(timeseries, device=device, dtype=dtype, memory_limit=memory_limit)
    )


def normalized_series(timeseries, *, device="auto", dtype="float32", memory_limit=None):
    """Validate ``timeseries`` (T, N) and normalise it on the device (a
    :class:`NormalizedSeries` is returned as it is), a block of series at a
    time so that the float64 temporaries fit ``memory_limit`` beside the
    result.

    Returns
    -------
    u : torch.Tensor of shape (N, T)
        Centred unit-norm rows, all NaN for constant series.
    constant : torch.Tensor of shape (N,), bool

    Raises
    ------
    MemoryLimitError
        When the normalised series and one series' temporaries do not fit.
    """
    if isinstance(timeseries, NormalizedSeries):
        return timeseries.u, timeseries.constant
    x = check_timeseries(timeseries)
    dev = resolve_device(device)
    work_dtype = resolve_dtype(dtype)
    n_timepoints, n = x.shape
    planner = MemoryPlanner(
        dev, memory_limit, hint="Raise memory_limit, or use fewer series (a coarser mask)."
    )
    planner.reserve_device(n * n_timepoints * torch.empty((), dtype=work_dtype).element_size())
    columns = planner.fit(
        _NORMALIZE_BYTES_PER_VALUE * n_timepoints,
        f"The normalised series ({n} series x {n_timepoints} time points)",
        at_most=n,
    )
    with torch.no_grad():
        u, constant = _normalize(x, dev, work_dtype, columns)
    warn_constant(constant)
    return u, constant


def as_map(values: torch.Tensor, constant: torch.Tensor) -> np.ndarray:
    """A float64 numpy map (..., N) with NaN at constant series."""
    out = values.to(torch.float64).cpu().numpy()
    out[..., constant.cpu().numpy()] = np.nan
    return out
