"""Validation and normalisation shared by the voxel-wise maps.

Also used by the callers that normalise once for several maps: the `maps` command
and the BIDS-App.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from connscale._compute import MemoryPlanner, planner_for, resolve_device, resolve_dtype
from connscale._validation import check_timeseries
from connscale.fc.normalize import normalize_series, warn_constant
from connscale.fc.static import _normalize


@dataclass(frozen=True)
class NormalizedSeries:
    """Series validated and normalised once, shared by several maps.

    Series validated and normalised once (:func:`normalize_once`), taken by
    every map function in place of the (T, N) series, so that several maps
    of the same series share one transfer and one normalisation (their
    ``device`` and ``dtype`` are then those of ``u``).
    """

    u: torch.Tensor
    constant: torch.Tensor


#: Bytes per value of a column block of the normalisation: its contiguous
#: copy, the float64 copy, the centred values, their transpose and the cast.
_NORMALIZE_BYTES_PER_VALUE = 40


#: What to do when a map does not fit (for messages).
MEMORY_HINT = "Raise memory_limit, or use fewer series (a coarser mask)."


def map_planner(timeseries, device, memory_limit) -> MemoryPlanner:
    """Return the one :class:`MemoryPlanner` of a map call.

    Made by :func:`planner_for`, on the device of ``timeseries`` (that of ``u``
    for a :class:`NormalizedSeries`).
    """
    dev = (
        timeseries.u.device if isinstance(timeseries, NormalizedSeries) else resolve_device(device)
    )
    return planner_for(dev, memory_limit, hint=MEMORY_HINT)


def normalize_once(
    timeseries, *, device="auto", dtype="float32", memory_limit=None
) -> NormalizedSeries:
    """:func:`normalized_series` as a :class:`NormalizedSeries`.

    ``memory_limit`` (a limit, or the caller's planner) bounds the
    normalisation; the series are not left counted in a caller's planner:
    each map call that reads them counts them while it runs.
    """
    planner = map_planner(timeseries, device, memory_limit)
    with planner.transient():
        return NormalizedSeries(
            *normalized_series(timeseries, device=planner.device, dtype=dtype, memory_limit=planner)
        )


def normalized_series(timeseries, *, device="auto", dtype="float32", memory_limit=None):
    """Validate ``timeseries`` (T, N) and normalise it on the device.

    A :class:`NormalizedSeries` is returned as it is. The series are normalised
    a block at a time so that the float64 temporaries fit ``memory_limit``
    beside the result. A tensor is checked and normalised where it lies (the
    cleaned series of a run stay on the GPU), no copy through the host.

    ``memory_limit`` may be the call's planner (:func:`map_planner`): U is
    then counted into it (for the call's release with
    :meth:`MemoryPlanner.transient`), the normalised ones and those of a
    :class:`NormalizedSeries` alike.

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
        if isinstance(memory_limit, MemoryPlanner):
            memory_limit.reserve_device(timeseries.u.numel() * timeseries.u.element_size())
        return timeseries.u, timeseries.constant
    x = _checked(timeseries)
    planner = map_planner(x, device, memory_limit)
    work_dtype = resolve_dtype(dtype)
    n_timepoints, n = x.shape
    planner.reserve_device(n * n_timepoints * torch.empty((), dtype=work_dtype).element_size())
    columns = planner.fit(
        _NORMALIZE_BYTES_PER_VALUE * n_timepoints,
        f"The normalised series ({n} series x {n_timepoints} time points)",
        at_most=n,
    )
    normalize = _normalize_tensor if isinstance(x, torch.Tensor) else _normalize
    with torch.no_grad():
        u, constant = normalize(x, planner.device, work_dtype, columns)
    warn_constant(constant)
    return u, constant


def _checked(timeseries):
    """Return ``timeseries`` validated: a float tensor stays on its device.

    A tensor that is not a finite (T >= 3, N >= 1) float32/float64 matrix is
    checked by :func:`check_timeseries` on the host, which names the fault
    (or casts it, as it casts any array).
    """
    if isinstance(timeseries, torch.Tensor):
        x = timeseries.detach()
        if (
            x.ndim == 2
            and x.dtype in (torch.float32, torch.float64)
            and x.shape[0] >= 3
            and x.shape[1] >= 1
            and bool(torch.isfinite(x).all())
        ):
            return x
    return check_timeseries(timeseries)


def _normalize_tensor(x: torch.Tensor, dev, work_dtype, columns: int):
    """:func:`connscale.fc.static._normalize` of a tensor, without a trip through the host."""
    n_timepoints, n = x.shape
    if columns >= n:
        return normalize_series(x.contiguous().to(dev), dtype=work_dtype)
    normalized = torch.empty((n, n_timepoints), dtype=work_dtype, device=dev)
    constant = torch.empty(n, dtype=torch.bool, device=dev)
    for c0 in range(0, n, columns):
        c1 = min(n, c0 + columns)
        chunk = x[:, c0:c1].contiguous().to(dev)
        normalized[c0:c1], constant[c0:c1] = normalize_series(chunk, dtype=work_dtype)
        del chunk
    return normalized, constant


def as_map(values: torch.Tensor, constant: torch.Tensor) -> np.ndarray:
    """Return a float64 numpy map (..., N) with NaN at constant series."""
    out = values.to(torch.float64).cpu().numpy()
    out[..., constant.cpu().numpy()] = np.nan
    return out
