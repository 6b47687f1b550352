"""Row normalisation of time series (Fast-GPU-PCC Eq. 2).

Each series x of length T becomes u = (x - mean(x)) / ||x - mean(x)||, so the
Pearson correlation of two series is the dot product of their normalised
forms and the whole matrix is one GEMM, U Uᵀ.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch


class ConstantSeriesWarning(UserWarning):
    """Some series have zero variance; their correlations are undefined (NaN)."""


def normalize_series(timeseries: torch.Tensor, *, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and scale each column of a (T, N) tensor to unit norm.

    Centring and norms are computed in float64 whatever the working dtype,
    in two passes (the mean, then the mean of what is left), so a series far
    from zero (1e6 + 1e-5 noise) keeps its variation: its correlations match
    ``np.corrcoef`` in float64. A series is constant when all its values are
    equal; its correlations are undefined.

    Parameters
    ----------
    timeseries : torch.Tensor of shape (n_timepoints, n_series)
    dtype : torch.dtype or None
        Output dtype (default: the input's).

    Returns
    -------
    normalized : torch.Tensor of shape (n_series, n_timepoints)
        Row i is series i, centred, of unit Euclidean norm; rows of constant
        series are all NaN, so every correlation that involves them is NaN.
    constant : torch.Tensor of shape (n_series,), bool
        Which series are constant.
    """
    dtype = dtype or timeseries.dtype
    x = timeseries.to(torch.float64)
    low, high = torch.aminmax(x, dim=0)
    centred = x - x.mean(dim=0, keepdim=True)
    centred -= centred.mean(dim=0, keepdim=True)  # what rounding left of the mean
    norm = torch.linalg.vector_norm(centred, dim=0)
    constant = (low == high) | (norm == 0)
    norm = torch.where(constant, torch.full_like(norm, float("nan")), norm)
    normalized = (centred / norm).T.contiguous().to(dtype)
    return normalized, constant


def warn_constant(constant: torch.Tensor | np.ndarray, *, stacklevel: int = 3) -> int:
    """Emit one :class:`ConstantSeriesWarning` naming how many series are constant."""
    constant = np.asarray(constant.cpu() if isinstance(constant, torch.Tensor) else constant)
    n_constant = int(constant.sum())
    if n_constant:
        first = np.flatnonzero(constant)[:5].tolist()
        warnings.warn(
            f"{n_constant} of {constant.size} series are constant (zero variance; "
            f"first columns: {first}); their correlations are undefined: NaN in "
            "dense and triangle output, left out of sparse output.",
            ConstantSeriesWarning,
            stacklevel=stacklevel,
        )
    return n_constant
