"""Simulated fMRI with planted sparse functional networks (ground truth for r1DL)."""

from __future__ import annotations

from numbers import Real

import numpy as np
import numpy.typing as npt

from connscale._validation import check_int, check_random_state


def _check_fraction(value: object, name: str, *, upper: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value <= upper:
        raise ValueError(f"'{name}' must be a number in (0, {upper}]; got {value!r}.")
    return float(value)


def simulate_networks(
    n_timepoints: int,
    n_voxels: int,
    n_networks: int,
    *,
    sparsity: float = 0.05,
    noise: float = 0.5,
    random_state: int | np.random.Generator | None = None,
    dtype: npt.DTypeLike = "float64",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulate S = time courses x sparse maps + noise.

    Each network has a smooth random time course (zero-mean, unit variance;
    white noise convolved with a canonical-HRF-like gamma kernel, then
    orthogonalised when K < T) and a map
    with ``round(sparsity * n_voxels)`` non-zero voxels of weight in
    [0.5, 1.5]. Supports are disjoint when they fit, random otherwise.
    Voxels outside every network carry noise only.

    Parameters
    ----------
    n_timepoints : int
        T (rows of S).
    n_voxels : int
        P (columns of S).
    n_networks : int
        K, the number of planted networks.
    sparsity : float, default=0.05
        Fraction of the voxels in each network, in (0, 1].
    noise : float, default=0.5
        Standard deviation of the Gaussian noise added to every entry.
    random_state : int, numpy.random.Generator or None, default=None
        Seed.
    dtype : {'float64', 'float32'}, default='float64'
        dtype of S.

    Returns
    -------
    S : ndarray of shape (n_timepoints, n_voxels)
    time_courses : ndarray of shape (n_timepoints, n_networks)
    maps : ndarray of shape (n_networks, n_voxels)
        The planted sparse maps (zeros outside each network).

    Examples
    --------
    >>> S, tc, maps = simulate_networks(100, 1000, 4, sparsity=0.05, random_state=0)
    >>> S.shape, tc.shape, maps.shape, int((maps[0] != 0).sum())
    ((100, 1000), (100, 4), (4, 1000), 50)
    """
    n_timepoints = check_int(n_timepoints, "n_timepoints", minimum=3)
    n_voxels = check_int(n_voxels, "n_voxels", minimum=1)
    n_networks = check_int(n_networks, "n_networks", minimum=1)
    sparsity = _check_fraction(sparsity, "sparsity")
    if isinstance(noise, bool) or not isinstance(noise, Real) or noise < 0:
        raise ValueError(f"'noise' must be a number >= 0; got {noise!r}.")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"'dtype' must be 'float32' or 'float64'; got {dtype!r}.")
    rng = check_random_state(random_state)

    # Smooth time courses: white noise through a gamma (HRF-like) kernel.
    t = np.arange(12, dtype=np.float64)
    kernel = t**5 * np.exp(-t) / 120.0
    raw = rng.standard_normal((n_timepoints + kernel.size, n_networks))
    tc = np.stack(
        [np.convolve(raw[:, k], kernel, mode="valid")[:n_timepoints] for k in range(n_networks)],
        axis=1,
    )
    tc -= tc.mean(axis=0)
    if n_networks < n_timepoints:
        # Orthogonal (uncorrelated) time courses: each network identifiable.
        tc = np.linalg.qr(tc)[0]
    tc /= tc.std(axis=0)

    size = max(1, int(round(sparsity * n_voxels)))
    maps = np.zeros((n_networks, n_voxels))
    order = rng.permutation(n_voxels)
    disjoint = size * n_networks <= n_voxels
    for k in range(n_networks):
        support = (
            order[k * size : (k + 1) * size]
            if disjoint
            else rng.choice(n_voxels, size, replace=False)
        )
        maps[k, support] = rng.uniform(0.5, 1.5, size)

    S = tc @ maps + noise * rng.standard_normal((n_timepoints, n_voxels))
    return S.astype(dtype, copy=False), tc, maps
