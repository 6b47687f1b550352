"""A plain float64 numpy r1DL with explicit deflation (the paper's Eq. 1-3).

It is the reference the backends are tested against. Not for large data.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from connscale._validation import check_random_state
from connscale.networks._blocks import standardize_np


def r1dl_reference(
    S: npt.ArrayLike,
    n_atoms: int,
    r: int,
    *,
    tol: float = 0.01,
    max_iter: int = 100,
    selection: str = "magnitude",
    standardize: bool = True,
    n_init: int = 1,
    random_state: int | np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (dictionary (T, K), loadings (K, P) dense, n_iter (K,))."""
    R = np.array(S, dtype=np.float64)
    if standardize:
        R = standardize_np(R, np.float64)
    n_timepoints, n_voxels = R.shape
    rng = check_random_state(random_state)
    U = np.zeros((n_timepoints, n_atoms))
    V = np.zeros((n_atoms, n_voxels))
    n_iter = np.zeros(n_atoms, dtype=np.int64)
    for k in range(n_atoms):
        best = None
        for _ in range(n_init):
            u, v, it = _one_start(R, rng, r, tol, max_iter, selection)
            if best is None or np.linalg.norm(v) > best[0]:
                best = (np.linalg.norm(v), u, v, it)
        _, u, v, n_iter[k] = best
        if np.any(v) and v[np.argmax(np.abs(v))] < 0:
            u, v = -u, -v
        U[:, k] = u
        V[k] = v
        R -= np.outer(u, v)
    return U, V, n_iter


def _one_start(
    R: np.ndarray, rng: np.random.Generator, r: int, tol: float, max_iter: int, selection: str
) -> tuple[np.ndarray, np.ndarray, int]:
    n_timepoints, n_voxels = R.shape
    u = rng.standard_normal(n_timepoints)
    u /= np.linalg.norm(u)
    v = np.zeros(n_voxels)
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        y = R.T @ u
        score = np.abs(y) if selection == "magnitude" else y
        keep = np.argsort(-score, kind="stable")[:r]
        v = np.zeros(n_voxels)
        v[keep] = y[keep]
        if selection == "signed":
            v = np.maximum(v, 0)
        su = R @ v
        norm = np.linalg.norm(su)
        if norm == 0:
            v[:] = 0
            break
        u_new = su / norm
        delta = np.linalg.norm(u_new - u)
        u = u_new
        if delta < tol:
            break
    return u, v, it
