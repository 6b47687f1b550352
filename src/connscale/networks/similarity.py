"""Spatial similarity of network maps and matching to templates (D-r1DL Eq. 4)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp


def _support(maps: npt.ArrayLike | sp.spmatrix | sp.sparray, name: str) -> sp.csr_matrix:
    """Boolean support (non-zero voxels) of one map or a stack of maps, as CSR."""
    if sp.issparse(maps):
        m = sp.csr_matrix(maps)
        m.eliminate_zeros()
    else:
        arr = np.asarray(maps)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise ValueError(
                f"'{name}' must be a map (n_voxels,) or maps (n_maps, n_voxels); "
                f"got an array of shape {arr.shape}."
            )
        m = sp.csr_matrix(arr != 0)
    out = m.astype(bool).astype(np.float64)
    return sp.csr_matrix(out)


def spatial_similarity(
    p1: npt.ArrayLike | sp.spmatrix | sp.sparray, p2: npt.ArrayLike | sp.spmatrix | sp.sparray
) -> float | np.ndarray:
    """R(P₁, P₂) = |P₁ ∩ P₂| / |P₂|, counting non-zero voxels.

    Parameters
    ----------
    p1, p2 : array-like or sparse of shape (n_voxels,) or (n_maps, n_voxels)
        Spatial maps; ``p2`` is the reference (template / atlas network).
        With stacks, every pair is compared.

    Returns
    -------
    float or ndarray of shape (n_maps1, n_maps2)
        In [0, 1]; 1 when P₂'s voxels are all in P₁. 0 when P₂ is empty.

    Examples
    --------
    >>> spatial_similarity([1, 1, 0, 0], [0, 2, 3, 0])
    0.5
    """
    a, b = _support(p1, "p1"), _support(p2, "p2")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"'p1' and 'p2' must have the same number of voxels; got {a.shape[1]} and {b.shape[1]}."
        )
    overlap = (a @ b.T).toarray()
    size2 = np.asarray(b.sum(axis=1)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(size2 > 0, overlap / np.where(size2 > 0, size2, 1), 0.0)
    one_d = all(not sp.issparse(p) and np.ndim(p) == 1 for p in (p1, p2))
    return float(sim[0, 0]) if one_d else sim


def match_networks(
    maps: npt.ArrayLike | sp.spmatrix | sp.sparray,
    templates: npt.ArrayLike | sp.spmatrix | sp.sparray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair each template with a distinct map maximising spatial similarity.

    Hungarian assignment (:func:`scipy.optimize.linear_sum_assignment`) on
    ``R(map, template)``.

    Parameters
    ----------
    maps : array-like or sparse of shape (n_maps, n_voxels)
        Learned networks (P₁).
    templates : array-like or sparse of shape (n_templates, n_voxels)
        Reference networks (P₂).

    Returns
    -------
    map_index : ndarray of int, shape (min(n_maps, n_templates),)
    template_index : ndarray of int, same shape
    similarity : ndarray, same shape
        R of each matched pair.

    Examples
    --------
    >>> m, t, s = match_networks([[1, 1, 0, 0], [0, 0, 1, 1]], [[0, 0, 3, 0], [2, 0, 0, 0]])
    >>> m.tolist(), t.tolist(), s.tolist()
    ([0, 1], [1, 0], [1.0, 1.0])
    """
    from scipy.optimize import linear_sum_assignment

    sim = spatial_similarity(
        np.atleast_2d(maps) if not sp.issparse(maps) else maps,
        np.atleast_2d(templates) if not sp.issparse(templates) else templates,
    )
    rows, cols = linear_sum_assignment(sim, maximize=True)
    order = np.argsort(rows)
    rows, cols = rows[order], cols[order]
    return rows, cols, sim[rows, cols]
