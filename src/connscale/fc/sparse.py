"""Thresholded upper-triangle CSR of correlation tiles, built on the device.

GPU-DFC's Algorithm 3 zeroes the lower triangle and the entries below the
threshold of a dense N×N matrix, then converts it to CSR. Here the same
result is built tile by tile of rows: a tile holds rows ``[r0, r1)`` against
columns ``[r0, N)`` (the upper-triangle part only), the kept entries are
found with one comparison and an in-place triangle mask, and only the kept
values, their int32 column indices and the per-row counts leave the device.

Constant series have NaN correlations; ``NaN >= θ`` is false, so they are
left out of the sparse output automatically.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch


def keep_mask(tile: torch.Tensor, threshold: float, *, absolute: bool) -> torch.Tensor:
    """Boolean mask of the entries of a row tile that a sparse window keeps.

    Parameters
    ----------
    tile : torch.Tensor of shape (..., R, N - r0)
        Correlations of rows ``[r0, r0 + R)`` against columns ``[r0, N)``:
        local column ``c`` is global column ``r0 + c``.
    threshold : float
        Keep ``r >= threshold`` (or ``|r| >= threshold`` when ``absolute``).
    absolute : bool
        Also keep strong negative correlations.

    Returns
    -------
    torch.Tensor of bool, same shape as ``tile``
        True for kept entries of the strictly upper triangle.
    """
    if absolute:
        keep = tile >= threshold
        keep |= tile <= -threshold
    else:
        keep = tile >= threshold
    # Local (a, c) is global (r0 + a, r0 + c): strictly upper <=> c > a. Only
    # the first R columns (the diagonal block) hold entries with c <= a.
    n_rows = tile.shape[-2]
    upper = torch.ones((n_rows, n_rows), dtype=torch.bool, device=tile.device).triu_(1)
    keep[..., :n_rows] &= upper  # an elementwise op on a strided view: any device
    return keep


def compact_tile(
    tile: torch.Tensor, keep: torch.Tensor, row_offset: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Kept values, global column indices and per-row counts of a tile.

    Parameters
    ----------
    tile : torch.Tensor of shape (R, N - r0)
        Correlations of rows ``[r0, r0 + R)`` against columns ``[r0, N)``.
    keep : torch.Tensor of bool, same shape
        From :func:`keep_mask`.
    row_offset : int
        r0, added to the local column indices.

    Returns
    -------
    values : torch.Tensor of shape (nnz,)
        Kept correlations in row-major order.
    columns : torch.Tensor of shape (nnz,), int32 (int64 past 2**31 columns)
        Their global column indices.
    counts : torch.Tensor of shape (R,), int64
        Kept entries per row.
    """
    rows, cols = keep.nonzero(as_tuple=True)  # synchronises: nnz sizes the outputs
    counts = torch.bincount(rows, minlength=tile.shape[0])
    values = tile[rows, cols]
    index_dtype = torch.int32 if row_offset + tile.shape[-1] < 2**31 else torch.int64
    columns = cols.to(index_dtype)
    if row_offset:
        columns += row_offset
    return values, columns, counts


def tile_to_csr_parts(
    tile: torch.Tensor, threshold: float, *, absolute: bool, row_offset: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`keep_mask` then :func:`compact_tile` for one tile."""
    return compact_tile(tile, keep_mask(tile, threshold, absolute=absolute), row_offset)


def csr_from_parts(values, columns, counts, n: int) -> sp.csr_array:
    """Build a ``scipy.sparse.csr_array`` (n×n) from kept values, columns and row counts.

    Each argument is an array or a list of per-tile pieces; lists are
    concatenated one at a time and emptied as they are (so at most one
    array is built beside the pieces). Indices and the row pointer are
    int32 while the entries fit, int64 past that.
    """
    counts = _joined(counts)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    index_dtype = np.int32 if indptr[-1] <= np.iinfo(np.int32).max else np.int64
    indices = _joined(columns).astype(index_dtype, copy=False)
    values = _joined(values)
    return sp.csr_array((values, indices, indptr.astype(index_dtype, copy=False)), shape=(n, n))


def _joined(parts) -> np.ndarray:
    if not isinstance(parts, list):
        return np.asarray(parts)
    joined = np.concatenate(parts)
    parts.clear()
    return joined


def dense_thresholded(matrix: np.ndarray, threshold: float, *, absolute: bool) -> np.ndarray:
    """Return the symmetric matrix of kept edges, 0 elsewhere (numpy reference)."""
    matrix = np.asarray(matrix)
    with np.errstate(invalid="ignore"):
        keep = np.abs(matrix) >= threshold if absolute else matrix >= threshold
    keep &= ~np.eye(matrix.shape[0], dtype=bool)
    keep &= ~np.isnan(matrix)
    return np.where(keep, matrix, 0.0)
