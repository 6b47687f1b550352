"""Row normalisation of time series (Fast-GPU-PCC Eq. 2).

Each series x of length T becomes u = (x - mean(x)) / ||x - mean(x)||, so the
Pearson correlation of two series is the dot product of their normalised
forms and the whole matrix is one GEMM, U Uᵀ.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from connscale._validation import user_stacklevel


class ConstantSeriesWarning(UserWarning):
    """Some series have zero variance; their correlations are undefined (NaN)."""


def normalize_windows(
    windows: torch.Tensor,
    *,
    dim: int,
    means: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and scale float64 series to unit norm along ``dim``: the one rule.

    Each series is centred in two passes (its mean, or ``means`` when given,
    then the mean of what is left), so a series far from zero (1e6 + 1e-5
    noise) keeps its variation. A series is constant when all its values are
    equal (or its centred norm is zero); its values become NaN, so every
    correlation that involves it is NaN.

    Parameters
    ----------
    windows : torch.Tensor, float64
        Series along ``dim`` (a whole series, or the windows of one).
    dim : int
        The time axis.
    means : torch.Tensor or None
        First-pass means with ``dim`` kept (e.g. from running sums).
    weights : torch.Tensor or None
        Tapered-window weights (length of ``dim``): weighted Pearson, the
        centred series scaled by their square root.

    Returns
    -------
    normalized : torch.Tensor, float64, shape of ``windows``
    constant : torch.Tensor of bool, ``windows`` without ``dim``
    """
    low, high = torch.aminmax(windows, dim=dim)
    first = windows.mean(dim=dim, keepdim=True) if means is None else means
    centred = windows - first
    if weights is None:
        centred -= centred.mean(dim=dim, keepdim=True)  # what rounding left of the mean
    else:
        shape = [1] * windows.ndim
        shape[dim] = -1
        weights = weights.view(shape)
        centred -= (centred * weights).sum(dim=dim, keepdim=True) / weights.sum()
        centred *= weights.sqrt()
    norm = torch.linalg.vector_norm(centred, dim=dim, keepdim=True)
    constant = (low == high) | (norm.squeeze(dim) == 0)
    centred /= torch.where(constant.unsqueeze(dim), torch.full_like(norm, float("nan")), norm)
    return centred, constant


def normalize_series(
    timeseries: torch.Tensor, *, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre and scale each column of a (T, N) tensor to unit norm.

    Centring and norms are computed in float64 whatever the working dtype
    (:func:`normalize_windows`), so a series far from zero (1e6 + 1e-5
    noise) keeps its variation: its correlations match ``np.corrcoef`` in
    float64. A series is constant when all its values are equal; its
    correlations are undefined.

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
    centred, constant = normalize_windows(timeseries.to(torch.float64), dim=0)
    normalized = centred.T.contiguous().to(dtype)
    return normalized, constant


def warn_constant(constant: torch.Tensor | np.ndarray) -> int:
    """Emit one :class:`ConstantSeriesWarning` naming how many series are constant.

    The warning points at the user's line.
    """
    constant = np.asarray(constant.cpu() if isinstance(constant, torch.Tensor) else constant)
    n_constant = int(constant.sum())
    if n_constant:
        first = np.flatnonzero(constant)[:5].tolist()
        warnings.warn(
            f"{n_constant} of {constant.size} series are constant (zero variance; "
            f"first columns: {first}); their correlations are undefined: NaN in "
            "dense and triangle output, left out of sparse output.",
            ConstantSeriesWarning,
            stacklevel=user_stacklevel(),
        )
    return n_constant
