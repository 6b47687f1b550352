"""Rows scaled so that their dot products are Workbench's correlation measures.

``wb_command -cifti-correlation`` computes, for every pair of rows x, y of
length T (time points) and the optional weights w (one per time point,
non-negative; the frames of weight 0 are dropped first, K frames are kept):

* correlation (default): the weighted mean m = Σ w x / Σ w is subtracted,
  r = Σ w (x - mₓ)(y - m_y) / sqrt(Σ w (x - mₓ)² · Σ w (y - m_y)²);
* ``-no-demean``: the same without subtracting the means (the cosine of the
  weighted rows, "dot product of rows, then normalize by diagonal");
* ``-covariance``: c = Σ w (x - mₓ)(y - m_y) / Σ w (the population
  covariance, divided by T, or by K for weights of 0 and 1 only); with
  ``-no-demean`` the means are not subtracted;
* no weights, or weights all 1, are the unweighted forms (w = 1).

So each row becomes u = sqrt(w)(x - m) / ‖sqrt(w)(x - m)‖ (correlation) or
u = sqrt(w)(x - m) / sqrt(Σ w) (covariance), and every measure is uᵢ·uⱼ: one
GEMM. The centring and norms are computed in float64 (two-pass, as
:func:`connscale.fc.normalize.normalize_windows`, which this reuses for the
default correlation). Then, as Workbench does:

* correlations are clamped to [-1, 1]; the diagonal is 1 exactly, also for a
  constant row (its other entries are NaN: 0/0); covariances are not clamped
  and a constant row's covariances are 0;
* ``-fisher-z`` writes artanh(r) with r clamped to ±0.999999 first, so the
  diagonal is artanh(0.999999) = 7.2543...; NaN stays NaN. Fisher z of a
  covariance is refused.

One difference, on purpose: with ``-weights`` and ``-no-demean`` together,
Workbench 1.5.0 (and its source up to 2026) divides the unweighted dot
product of the first K raw frames by the weighted norms (it skips the step
that drops and weights the frames when not demeaning); here the weighted
cosine above is computed, the measure its help describes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from connscale.fc.normalize import normalize_windows

#: Workbench clamps r to +-FISHER_LIMIT before artanh (no infinite values).
FISHER_LIMIT = 0.999999
#: artanh(FISHER_LIMIT), Workbench's Fisher z of r = 1 (the diagonal).
FISHER_Z_MAX = float(np.arctanh(FISHER_LIMIT))


@dataclass(frozen=True)
class RowMeasure:
    """What the product of two scaled rows measures (Workbench's options).

    Parameters
    ----------
    demean : bool, default=True
        Subtract each row's (weighted) mean (False: ``-no-demean``).
    covariance : bool, default=False
        Covariance instead of correlation (``-covariance``).
    fisher_z : bool, default=False
        Write artanh(r) (``-fisher-z``); not with ``covariance``.
    weights : ndarray of shape (n_timepoints,) or None
        Non-negative weight per time point (``-weights``); 0 drops a frame.
    """

    demean: bool = True
    covariance: bool = False
    fisher_z: bool = False
    weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.covariance and self.fisher_z:
            raise ValueError("fisher_z applies to correlations; it cannot be used with covariance.")
        if self.weights is not None:
            weights = np.asarray(self.weights, dtype=np.float64)
            if weights.ndim != 1 or not np.all(np.isfinite(weights)):
                raise ValueError("weights must be one finite number per time point.")
            if np.any(weights < 0):
                raise ValueError(f"weights cannot be negative; got min {weights.min()}.")
            if not np.any(weights > 0):
                raise ValueError("weights are all 0: no time point is left.")
            object.__setattr__(self, "weights", weights)

    def check_length(self, n_timepoints: int) -> None:
        """Raise ValueError unless there is one weight per time point."""
        if self.weights is not None and self.weights.size != n_timepoints:
            raise ValueError(
                f"There must be one weight per time point: {self.weights.size} weights "
                f"for {n_timepoints} time points."
            )

    @property
    def kept(self) -> np.ndarray | None:
        """Indices of the frames of non-zero weight, or None when all are kept."""
        if self.weights is None or np.all(self.weights > 0):
            return None
        return np.flatnonzero(self.weights > 0)

    @property
    def kept_weights(self) -> np.ndarray | None:
        """The weights of the kept frames, or None when they are all 1."""
        if self.weights is None:
            return None
        weights = self.weights[self.weights > 0]
        return None if np.all(weights == 1) else weights

    def n_terms(self, n_timepoints: int) -> int:
        """Return the number of frames each product sums over."""
        kept = self.kept
        return n_timepoints if kept is None else int(kept.size)


def scale_rows(
    timeseries: torch.Tensor, measure: RowMeasure, *, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale the columns of a (T, n) tensor so that their products are ``measure``.

    Parameters
    ----------
    timeseries : torch.Tensor of shape (n_timepoints, n_series)
    measure : RowMeasure
    dtype : torch.dtype or None
        Output dtype (default: the input's).

    Returns
    -------
    rows : torch.Tensor of shape (n_series, n_kept)
        Row i is series i over the kept frames, scaled (module docstring);
        rows whose correlations are undefined (constant, or all zero with
        ``demean=False``) are NaN.
    constant : torch.Tensor of shape (n_series,), bool
        Those rows (none for covariances, which are defined: 0).
    """
    dtype = dtype or timeseries.dtype
    x = timeseries.to(torch.float64)
    kept = measure.kept
    if kept is not None:
        x = x[torch.as_tensor(kept, device=x.device)]
    weights = measure.kept_weights
    w = None if weights is None else torch.as_tensor(weights, device=x.device)
    if measure.demean and not measure.covariance:
        centred, constant = normalize_windows(x, dim=0, weights=w)
        return centred.to(dtype).T.contiguous(), constant  # transposed in dtype: fewer bytes
    if measure.demean:
        x = _centre(x, w)
    if w is not None:
        x = x * w.sqrt()[:, None]
    if measure.covariance:
        total = float(x.shape[0] if w is None else w.sum())
        x = x / np.sqrt(total)
        constant = torch.zeros(x.shape[1], dtype=torch.bool, device=x.device)
    else:
        norm = torch.linalg.vector_norm(x, dim=0)
        constant = norm == 0
        x = x / torch.where(constant, torch.full_like(norm, float("nan")), norm)
    return x.to(dtype).T.contiguous(), constant


def _centre(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Subtract each column's (weighted) mean, in two passes (float64)."""
    centred = x - x.mean(dim=0, keepdim=True)
    if weights is None:
        return centred - centred.mean(dim=0, keepdim=True)
    w = weights[:, None]
    return centred - (centred * w).sum(dim=0, keepdim=True) / weights.sum()


def finish_block(
    block: torch.Tensor, measure: RowMeasure, row_ids: torch.Tensor, col0: int
) -> torch.Tensor:
    """Turn a block of products into Workbench's values, in place.

    Parameters
    ----------
    block : torch.Tensor of shape (n_rows, n_cols)
        Products of scaled rows ``row_ids`` with columns ``col0 ..``.
    measure : RowMeasure
    row_ids : torch.Tensor of int64, shape (n_rows,)
        The series (column of the input) of each row of the block, on the
        block's device.
    col0 : int
        The series of the block's first column.

    Returns
    -------
    torch.Tensor
        ``block``: correlations clamped to [-1, 1] with 1 on the diagonal
        (then artanh with ``fisher_z``); covariances as they are.
    """
    if measure.covariance:
        return block
    block.clamp_(-1.0, 1.0)
    on_diagonal = (row_ids >= col0) & (row_ids < col0 + block.shape[1])
    rows = torch.nonzero(on_diagonal).squeeze(1)
    block[rows, row_ids[rows] - col0] = 1.0
    if measure.fisher_z:
        limit = torch.tensor(FISHER_LIMIT, dtype=block.dtype)
        top = float(limit.atanh())  # artanh of the limit in the block's dtype
        block.clamp_(-limit.item(), limit.item()).atanh_()
        block.masked_fill_(block >= top, FISHER_Z_MAX)
        block.masked_fill_(block <= -top, -FISHER_Z_MAX)
    return block
