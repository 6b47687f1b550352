"""Eigenvector centrality without the matrix (fastECM, Wink et al. 2012)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
import torch

from connscale._docs import fill_doc
from connscale._validation import Interval, user_stacklevel, validate_params
from connscale.maps.prepare import NormalizedSeries, as_map, map_planner, normalized_series

if TYPE_CHECKING:
    from tqdm.auto import tqdm


@fill_doc
@validate_params(
    {
        "timeseries": ["array-like", NormalizedSeries],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "device": ["device"],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
        "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    }
)
def eigenvector_centrality(
    timeseries,
    *,
    tol: float = 1e-6,
    max_iter: int = 1000,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit=None,
    verbose: int = 0,
) -> np.ndarray:
    """Eigenvector centrality of every series (fastECM), matrix-free.

    The leading eigenvector of R + 1 (the correlation matrix shifted so that
    every entry is non-negative), by power iteration with
    (R + 1)x = U(Uᵀx) + 1(1ᵀx), U the N×T normalised series: O(N·T) work
    and memory per iteration, no N×N matrix.

    Parameters
    ----------
    %(timeseries)s
    tol : float, default=1e-6
        Stop when the Euclidean change of the unit-norm iterate falls below it.
    max_iter : int, default=1000
        Most iterations; a RuntimeWarning says when they ran out.
    %(device)s
    %(dtype)s
    %(memory_limit)s
    %(verbose)s
        The bar counts iterations (up to ``max_iter``) and shows the last change.

    Returns
    -------
    ndarray of shape (n_series,), float64
        The eigenvector with unit Euclidean norm and non-negative entries, as
        fastECM returns it. Constant series are left out of the matrix and
        are NaN.

    References
    ----------
    Wink A. M., de Munck J. C., van der Werf Y. D., van den Heuvel O. A.,
    Barkhof F. (2012). Fast eigenvector centrality mapping of voxel-wise
    connectivity in functional magnetic resonance imaging: implementation,
    validation, and interpretation. Brain Connectivity 2(5):265-274.

    Examples
    --------
    >>> import numpy as np, connscale
    >>> x = np.random.default_rng(0).standard_normal((100, 50))
    >>> ecm = connscale.eigenvector_centrality(x, device="cpu")
    >>> round(float(np.linalg.norm(ecm)), 6)
    1.0
    """
    planner = map_planner(timeseries, device, memory_limit)
    with planner.transient(), torch.no_grad():
        u, constant = normalized_series(
            timeseries, device=planner.device, dtype=dtype, memory_limit=planner
        )
        n, t = u.shape
        m = n - int(constant.sum())
        if m == 0:
            raise ValueError("eigenvector_centrality: every series is constant.")
        if m < n:
            planner.reserve_device(m * t * u.element_size())  # the non-constant rows
        # The iterate, its update and their difference; Zᵀx; the float64 map.
        planner.require(
            (3 * m + t) * u.element_size() + 8 * n,
            f"Eigenvector centrality of {n} series x {t} time points",
        )
        z = u[~constant] if m < n else u  # no copy when none is constant
        from tqdm.auto import tqdm

        with tqdm(
            total=max_iter,
            desc="eigenvector centrality",
            unit="it",
            disable=not verbose,
            leave=False,
        ) as progress:
            x, n_iter, change = power_iteration(
                z, tol, max_iter, progress=progress if verbose else None
            )
        if change >= tol:
            warnings.warn(
                f"eigenvector_centrality did not converge in {max_iter} iterations "
                f"(last change {change:.2e} > tol={tol:g}).",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
        full = torch.zeros(u.shape[0], dtype=torch.float64, device=u.device)
        full[~constant] = x.double()
    return as_map(full, constant)


def power_iteration(
    z: torch.Tensor, tol: float, max_iter: int, *, progress: tqdm | None = None
) -> tuple[torch.Tensor, int, float]:
    """Leading unit eigenvector of Z·Zᵀ + 1 by power iteration, matrix-free.

    Returns the vector, the iterations run and the last change. ``progress``
    (a tqdm bar) is advanced by each iteration and shows the change.
    """
    m = z.shape[0]
    x = torch.full((m,), 1.0 / np.sqrt(m), dtype=z.dtype, device=z.device)
    change = float("inf")
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - the count is returned
        y = z @ (z.T @ x) + x.sum()
        y /= torch.linalg.vector_norm(y)
        change = float(torch.linalg.vector_norm(y - x))
        x = y
        if progress is not None:
            progress.set_postfix(change=f"{change:.2e}", refresh=False)
            progress.update()
        if change < tol:
            break
    return x, n_iter, change
