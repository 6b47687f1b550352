"""Validation and normalisation shared by the voxel-wise maps."""

from __future__ import annotations

import numpy as np
import torch

from connscale._compute import resolve_device, resolve_dtype
from connscale._validation import check_timeseries
from connscale.fc.normalize import normalize_series, warn_constant


def normalized_series(timeseries, *, device="auto", dtype="float32"):
    """Validate ``timeseries`` (T, N) and normalise it on the device.

    Returns
    -------
    u : torch.Tensor of shape (N, T)
        Centred unit-norm rows, all NaN for constant series.
    constant : torch.Tensor of shape (N,), bool
    """
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
