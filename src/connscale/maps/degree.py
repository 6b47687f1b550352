"""Degree centrality of every voxel without storing the correlation matrix.

As AFNI's ``3dDegreeCentrality``, and C-PAC's and DPABI's degree centrality.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np
import torch

from connscale._choices import DEFAULT_THRESHOLD, PRECISIONS
from connscale._compute import allow_tf32
from connscale._docs import fill_doc
from connscale._validation import Interval, SequenceOf, StrOptions, validate_params
from connscale.fc.degree import below, degree_counts, degree_kernel, top_threshold
from connscale.maps.prepare import NormalizedSeries, as_map, map_planner, normalized_series

logger = logging.getLogger(__name__)


def _as_list(value) -> tuple[list[float], bool]:
    """Return a number or a sequence of numbers as a list, and whether it was a number."""
    if isinstance(value, Real):
        return [float(value)], True
    return [float(v) for v in value], False


_CORRELATION = Interval(Real, -1, 1, closed="both")
_FRACTION = Interval(Real, 0, 1, closed="right")
# Declared once for degree_centrality and compute_degree (the CLI's entry).
_PARAMETER_CONSTRAINTS = {
    "timeseries": ["array-like", NormalizedSeries],
    "threshold": [_CORRELATION, SequenceOf(_CORRELATION), StrOptions({"auto"}), None],
    "weighted": ["boolean"],
    "absolute": ["boolean"],
    "sparsity": [_FRACTION, SequenceOf(_FRACTION), None],
    "device": ["device"],
    "dtype": ["dtype"],
    "memory_limit": ["memory", None],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    "precision": [StrOptions(PRECISIONS)],
}


@fill_doc
@validate_params(_PARAMETER_CONSTRAINTS)
def degree_centrality(
    timeseries,
    threshold: float | Sequence[float] | str | None = "auto",
    *,
    weighted: bool = False,
    absolute: bool = False,
    sparsity: float | Sequence[float] | None = None,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit: int | str | None = None,
    verbose: int = 0,
    precision: str = "exact",
) -> np.ndarray:
    """Degree centrality of every series, without storing the correlation matrix.

    For each series, the number of other series correlated with it above a
    threshold (binary degree), or the sum of those correlations (weighted
    degree). Every pair is formed once, in tiles of the upper triangle of R
    consumed as they are computed: on CUDA one fused Triton kernel per pass,
    elsewhere row blocks sized from ``memory_limit``.

    Parameters
    ----------
    %(timeseries)s
    threshold : float, sequence of float or 'auto', default='auto'
        Count pairs with r > threshold (|r| > threshold with ``absolute``).
        Several thresholds are computed in one pass. ``'auto'`` is 0.25
        without ``sparsity`` and no fixed threshold with it; a number
        together with ``sparsity`` is an error.
    weighted : bool, default=False
        Sum the kept correlations (|r| with ``absolute``) instead of counting
        them.
    absolute : bool, default=False
        Threshold |r|, so that strong negative correlations count too.
    sparsity : float or sequence of float in (0, 1], or None
        Keep the top fraction of all pairs instead of a fixed threshold
        (``0.01``: the 1%% strongest edges of the whole brain; AFNI's
        ``-sparsity`` gives the same in percent). The exact global threshold
        is found by a histogram pass and a pass over the boundary bin, then
        the degree is computed with r >= that threshold.
    %(device)s
    %(dtype)s
    %(memory_limit)s
    %(verbose)s
        The bar counts the rows of R (every pass with ``sparsity``).
    precision : {'exact', 'fp32', 'tf32'}, default='exact'
        Arithmetic of the correlations in float32 on CUDA. ``'exact'``: TF32
        tensor cores decide every pair farther than a proven bound from the
        threshold and the few closer ones are recomputed to fp32 accuracy (the
        counts of ``'fp32'``, faster); ``'fp32'``: fp32 products throughout;
        ``'tf32'``: TF32 products only (fastest; pairs within ~1e-3 of a
        threshold may be miscounted). The CPU computes in fp32 for
        ``'exact'``.

    Returns
    -------
    ndarray of shape (n_series,) or (n_thresholds, n_series), float64
        One map per threshold (or sparsity), in the order given; a single
        number gives one map. Constant series are NaN.

    Notes
    -----
    Binary degree is an integer count stored as float64 (so that constant
    series can be NaN). The series never leave the device; the torch path
    holds blocks of B×N correlations, B planned from the memory budget.

    References
    ----------
    Zuo X.-N. et al. (2012). Network centrality in the human functional
    connectome. Cerebral Cortex 22(8):1862-1875.

    Examples
    --------
    >>> import numpy as np, connscale
    >>> x = np.random.default_rng(0).standard_normal((100, 50))
    >>> connscale.degree_centrality(x, [0.1, 0.2], device="cpu").shape
    (2, 50)
    >>> connscale.degree_centrality(x, sparsity=0.05, device="cpu").shape
    (50,)
    """
    maps, _ = compute_degree(
        timeseries,
        threshold,
        weighted=weighted,
        absolute=absolute,
        sparsity=sparsity,
        device=device,
        dtype=dtype,
        memory_limit=memory_limit,
        verbose=verbose,
        precision=precision,
    )
    return maps


@validate_params({**_PARAMETER_CONSTRAINTS, "both": ["boolean"]})
def compute_degree(
    timeseries,
    threshold="auto",
    *,
    weighted=False,
    absolute=False,
    sparsity=None,
    device="auto",
    dtype="float32",
    memory_limit=None,
    verbose=0,
    precision="exact",
    both=False,
):
    """Compute :func:`degree_centrality`, also returning a dict of what was used.

    :func:`degree_centrality`, also returning a dict with the thresholds
    used (those found for ``sparsity``), the method, the block size, the
    precision and, when the exact scheme ran, its confirmation counts
    (:meth:`connscale.fc._exact.Confirmation.as_dict`).

    With ``both``, the maps are a pair (binary, weighted) from the same pass.
    """
    if sparsity is not None:
        if not (threshold is None or isinstance(threshold, str)):
            raise ValueError(
                f"Give a 'threshold' or a 'sparsity', not both; got threshold={threshold!r} "
                f"and sparsity={sparsity!r}."
            )
        fractions, scalar = _as_list(sparsity)
    else:
        if isinstance(threshold, str):  # "auto"
            threshold = DEFAULT_THRESHOLD
        if threshold is None:
            raise ValueError("degree_centrality needs a 'threshold' or a 'sparsity'; got neither.")
        thresholds, scalar = _as_list(threshold)
        if absolute and min(thresholds) < 0:
            raise ValueError(
                f"With absolute=True the thresholds must be in [0, 1]; got {min(thresholds)}."
            )
    planner = map_planner(timeseries, device, memory_limit)
    with planner.transient(), torch.no_grad():
        u, constant = normalized_series(
            timeseries, device=planner.device, dtype=dtype, memory_limit=planner
        )
        n = u.shape[0]
        if n < 2:
            raise ValueError(f"degree_centrality needs at least 2 series; got {n}.")
        n_maps = len(fractions) if sparsity is not None else len(thresholds)
        kernel = degree_kernel(u, n_maps, planner, precision=precision)
        m = n - int(constant.sum())
        pairs = m * (m - 1) // 2
        # Rows of the histogram pass and the degree pass (top_threshold adds its collect passes).
        passes = 2 if sparsity is not None else 1
        from tqdm.auto import tqdm  # the progress bar only (the numerical core imports none)

        progress = tqdm(
            total=passes * n, desc="degree centrality", unit="row", disable=not verbose, leave=False
        )
        n_passes = 1
        with progress, allow_tf32(precision == "tf32"):
            if sparsity is not None:
                kept = [max(1, min(pairs, round(p * pairs))) for p in fractions]
                thresholds, search_passes = top_threshold(
                    u, kept, kernel, absolute=absolute, progress=progress
                )
                n_passes += search_passes
                cut = [below(v, u.dtype) for v in thresholds]  # r > cut <=> r >= found
            else:
                cut = thresholds
            counts, sums = degree_counts(
                u, cut, kernel, absolute=absolute, weighted=weighted or both, progress=progress
            )
    info = {
        "thresholds": thresholds,
        "method": kernel.method,
        "block_rows": kernel.block_rows,
        "n_constant": int(constant.sum()),
        "precision": precision,
        "confirmation": kernel.confirmation(pairs * n_passes),
    }
    logger.debug("degree_centrality: %s", info)
    if both:
        maps = (as_map(counts, constant), as_map(sums, constant))
        return (tuple(m[0] for m in maps) if scalar else maps), info
    maps = as_map(sums if weighted else counts, constant)
    return (maps[0] if scalar else maps), info
