"""Index arithmetic of the strictly-upper triangle, and nilearn's vector order.

connscale's edge vectors use Fast-GPU-PCC's row-major order of the strictly
upper triangle, ``(0,1), (0,2), ..., (0,N-1), (1,2), ...``, the order of
``np.triu_indices(n, 1)``: pair (i, j), i < j, is element
``k = i*N - i*(i+1)/2 + j - i - 1``.

nilearn's ``sym_matrix_to_vec(discard_diagonal=True)`` stacks the strictly
*lower* triangle row by row, i.e. the upper triangle column by column:
``(0,1), (0,2), (1,2), (0,3), ...``. :func:`to_nilearn_vec` and
:func:`from_nilearn_vec` convert between the two.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "from_nilearn_vec",
    "matrix_to_vec",
    "n_from_pairs",
    "n_pairs",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "triu_row_offsets",
    "vec_to_matrix",
]


def n_pairs(n: int) -> int:
    """Return the number of strictly-upper-triangle pairs of an n×n matrix, n(n-1)/2.

    Parameters
    ----------
    n : int
        Matrix size (non-negative).

    Returns
    -------
    int
        ``n * (n - 1) // 2``.

    Examples
    --------
    >>> n_pairs(4), n_pairs(91282)
    (6, 4166156121)
    """
    n = int(n)
    if n < 0:
        raise ValueError(f"'n' must be non-negative; got {n}.")
    return n * (n - 1) // 2


def triu_index(i: npt.ArrayLike, j: npt.ArrayLike, n: int) -> int | np.ndarray:
    """Position of pair (i, j), i < j, in the row-major strictly-upper order.

    Parameters
    ----------
    i, j : int or array-like of int
        Row and column, ``0 <= i < j < n`` (vectorised).
    n : int
        Matrix size.

    Returns
    -------
    k : int or ndarray of int64

    Examples
    --------
    >>> triu_index(0, 1, 4), triu_index(1, 2, 4), triu_index(2, 3, 4)
    (0, 3, 5)
    """
    scalar = np.isscalar(i) and np.isscalar(j)
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    if np.any(i < 0) or np.any(j >= n) or np.any(i >= j):
        raise ValueError(f"Pairs must satisfy 0 <= i < j < n={n}.")
    k = i * n - i * (i + 1) // 2 + j - i - 1
    return int(k) if scalar else k


def triu_pairs(k: npt.ArrayLike, n: int) -> tuple[int, int] | tuple[np.ndarray, np.ndarray]:
    """Pair (i, j) at position k of the row-major strictly-upper order.

    The inverse of :func:`triu_index` (vectorised, exact in int64 for any
    n up to ~3·10⁹).

    Parameters
    ----------
    k : int or array-like of int
        Positions, ``0 <= k < n(n-1)/2``.
    n : int
        Matrix size.

    Returns
    -------
    i, j : int or ndarray of int64

    Examples
    --------
    >>> triu_pairs(3, 4)
    (1, 2)
    """
    scalar = np.isscalar(k)
    k = np.asarray(k, dtype=np.int64)
    total = n_pairs(n)
    if np.any(k < 0) or np.any(k >= total):
        raise ValueError(f"Positions must satisfy 0 <= k < n(n-1)/2 = {total}.")
    # Count from the end: pair k is in row i where the number of pairs left
    # after row i's start, m = total - k, satisfies r(r-1)/2 < m <= r(r+1)/2
    # with r = n - 1 - i.
    m = total - k
    r = np.ceil((np.sqrt(8.0 * m.astype(np.float64) + 1.0) - 1.0) / 2.0).astype(np.int64)
    # Correct floating-point rounding so that r(r-1)/2 < m <= r(r+1)/2.
    r = np.where(r * (r + 1) // 2 < m, r + 1, r)
    r = np.where((r - 1) * r // 2 >= m, r - 1, r)
    i = n - 1 - r
    start = i * n - i * (i + 1) // 2
    j = k - start + i + 1
    if scalar:
        return int(i), int(j)
    return i, j


def triu_row_offsets(n: int) -> np.ndarray:
    """Start of each row's pairs in the row-major order (length n + 1).

    Row i's pairs ``(i, i+1) ... (i, n-1)`` occupy
    ``[offsets[i], offsets[i+1])``.
    """
    i = np.arange(n + 1, dtype=np.int64)
    i[-1] = n  # offsets[n] = total
    offsets = i * n - i * (i + 1) // 2
    offsets[-1] = n_pairs(n)
    return offsets


def vec_to_matrix(vec: npt.ArrayLike, n: int | None = None, *, diagonal: float = 1.0) -> np.ndarray:
    """Symmetric n×n matrix from a row-major strictly-upper vector.

    Parameters
    ----------
    vec : array-like of shape (n(n-1)/2,)
    n : int or None
        Matrix size (inferred from the length when None).
    diagonal : float, default=1.0
        Value put on the diagonal.

    Returns
    -------
    ndarray of shape (n, n)
        The symmetric matrix (float; the vector's dtype when it is floating-point).

    Examples
    --------
    >>> vec_to_matrix([0.5, 0.2, -0.1])
    array([[ 1. ,  0.5,  0.2],
           [ 0.5,  1. , -0.1],
           [ 0.2, -0.1,  1. ]])
    """
    vec = np.asarray(vec)
    if n is None:
        n = int(round((1 + np.sqrt(1 + 8 * vec.size)) / 2))
    if vec.shape != (n_pairs(n),):
        raise ValueError(
            f"Expected a vector of n(n-1)/2 = {n_pairs(n)} values for n={n}; got shape {vec.shape}."
        )
    out = np.empty((n, n), dtype=vec.dtype if vec.dtype.kind == "f" else np.float64)
    rows, cols = np.triu_indices(n, 1)
    out[rows, cols] = vec
    out[cols, rows] = vec
    np.fill_diagonal(out, diagonal)
    return out


def matrix_to_vec(matrix: npt.ArrayLike) -> np.ndarray:
    """Return the row-major strictly-upper vector of a square matrix.

    Parameters
    ----------
    matrix : array-like of shape (n, n)
        A square matrix (only its strictly upper triangle is read).

    Returns
    -------
    ndarray of shape (n(n-1)/2,)
        ``matrix[np.triu_indices(n, 1)]``, the order of connscale's edge vectors.

    Examples
    --------
    >>> import numpy as np
    >>> matrix_to_vec(np.arange(9).reshape(3, 3))
    array([1, 2, 5])
    """
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Expected a square matrix; got an array of shape {matrix.shape}.")
    return matrix[np.triu_indices(matrix.shape[0], 1)]


def _nilearn_permutation(n: int) -> np.ndarray:
    """Return ``perm`` such that ``nilearn_vec = our_vec[perm]``."""
    # nilearn: tril(k=-1) row-major = pairs (row a, col b) with b < a, a ascending.
    rows, cols = np.tril_indices(n, -1)
    # as upper-triangle pairs (i, j) = (b, a)
    return triu_index(cols, rows, n) if n > 1 else np.zeros(0, dtype=np.int64)


def to_nilearn_vec(vec: npt.ArrayLike, n: int | None = None) -> np.ndarray:
    """Reorder a connscale edge vector (…, n_pairs) to nilearn's order.

    The result equals ``nilearn.connectome.sym_matrix_to_vec(matrix,
    discard_diagonal=True)`` of the matching symmetric matrix.

    Parameters
    ----------
    vec : array-like of shape (..., n(n-1)/2)
        Edge vectors in connscale's row-major strictly-upper order (last axis).
    n : int or None, default=None
        Matrix size (inferred from the last axis' length when None).

    Returns
    -------
    ndarray of shape (..., n(n-1)/2)
        The same values in nilearn's order (the upper triangle column by column).

    Examples
    --------
    >>> to_nilearn_vec([1, 2, 3, 4, 5, 6])  # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    array([1, 2, 4, 3, 5, 6])
    """
    vec = np.asarray(vec)
    n = _infer_n(vec.shape[-1]) if n is None else n
    return vec[..., _nilearn_permutation(n)]


def from_nilearn_vec(vec: npt.ArrayLike, n: int | None = None) -> np.ndarray:
    """Reorder a nilearn ``discard_diagonal=True`` vector (…, n_pairs) to connscale's order.

    The inverse of :func:`to_nilearn_vec`.

    Parameters
    ----------
    vec : array-like of shape (..., n(n-1)/2)
        Edge vectors in nilearn's order (last axis), as ``sym_matrix_to_vec(matrix,
        discard_diagonal=True)`` returns them.
    n : int or None, default=None
        Matrix size (inferred from the last axis' length when None).

    Returns
    -------
    ndarray of shape (..., n(n-1)/2)
        The same values in connscale's row-major strictly-upper order.

    Examples
    --------
    >>> from_nilearn_vec([1, 2, 4, 3, 5, 6])
    array([1, 2, 3, 4, 5, 6])
    """
    vec = np.asarray(vec)
    n = _infer_n(vec.shape[-1]) if n is None else n
    out = np.empty_like(vec)
    out[..., _nilearn_permutation(n)] = vec
    return out


def n_from_pairs(length: int, *, source: str = "") -> int:
    """Matrix size n of a strictly-upper-triangle vector of ``length`` elements.

    Raises
    ------
    ValueError
        When ``length`` is not n(n-1)/2 for an integer n (the message starts
        with ``source``, the file or argument read).
    """
    n = int(round((1 + np.sqrt(1 + 8 * length)) / 2))
    if n_pairs(n) != length:
        raise ValueError(
            f"{source + ': ' if source else ''}a 1-D upper-triangle vector must have "
            f"n(n-1)/2 elements; got {length}, which is not a triangular number."
        )
    return n


def _infer_n(length: int) -> int:
    try:
        return n_from_pairs(length)
    except ValueError:
        raise ValueError(
            f"A vector of length {length} is not the strict triangle of any "
            "square matrix (n(n-1)/2 for integer n)."
        ) from None
