"""Validation and normalisation shared by the voxel-wise maps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from connscale._compute import resolve_device, resolve_dtype
from connscale._validation import check_timeseries
from connscale.fc.normalize import normalize_series, warn_constant


@dataclass(frozen=True)
class NormalizedSeries:
    """Series validated and normalised once (:func:`normalize_once`), taken by
    every map function in place of the (T, N) series, so that several maps
    of the same series share one transfer and one normalisation (their
    ``device`` and ``dtype`` are then those of ``u``)."""

    u: torch.Tensor
    constant: torch.Tensor


def normalize_once(timeseries, *, device="auto", dtype="float32") -> NormalizedSeries:
    """:func:`normalized_series` as a :class:`NormalizedSeries`."""
    return NormalizedSeries(*normalized_series(timeseries, device=device, dtype=dtype))


def normalized_series(timeseries, *, device="auto", dtype="float32"):
    """Validate ``timeseries`` (T, N) and normalise it on the device (a
    :class:`NormalizedSeries` is returned as it is).

    Returns
    -------
    u : torch.Tensor of shape (N, T)
        Centred unit-norm rows, all NaN for constant series.
    constant : torch.Tensor of shape (N,), bool
    """
    if isinstance(timeseries, NormalizedSeries):
        return timeseries.u, timeseries.constant
    x = check_timeseries(timeseries)
    dev = resolve_device(device)
    work_dtype = resolve_dtype(dtype)
    with torch.no_grad():
        series = torch.from_numpy(np.ascontiguousarray(x)).to(dev)
        u, constant = normalize_series(series, dtype=work_dtype)
    warn_constant(constant)
    return u, constant


def as_map(values: torch.Tensor, constant: torch.Tensor) -> np.ndarray:
    """A float64 numpy map (..., N) with NaN at constant series."""
    out = values.to(torch.float64).cpu().numpy()
    out[..., constant.cpu().numpy()] = np.nan
    return out
