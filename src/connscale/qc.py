"""Quality control of denoising: DVARS, the per-run QC row, QC-FC and its distance dependence.

The run's numbers are XCP-D's (``xcp_d/utils/qcmetrics.py`` ``compute_dvars``,
``xcp_d/interfaces/utils.py`` ``LINCQC``: the columns of its
``desc-linc_qc.tsv``); QC-FC and its distance dependence are those of
Ciric et al. 2017 (NeuroImage 154: 174-187), as XCP-D's predecessor
xcpEngine reported them.
"""

from __future__ import annotations

import math

import numpy as np

from connscale._docs import fill_doc

__all__ = [
    "QC_COLUMNS",
    "dvars",
    "edge_distances",
    "qc_fc",
    "qc_fc_distance",
    "qc_row",
    "region_centroids",
]

#: FSL's robust standard deviation: the interquartile range over this.
_IQR_TO_STD = 1.349
#: Values per time point of a block's series (the copy, the centred one, the differences).
_DVARS_VALUES_PER_TIMEPOINT = 6

#: The per-run QC columns, in order (XCP-D's names, ``max_fd`` and ``retained_seconds`` added).
QC_COLUMNS = (
    "mean_fd",
    "max_fd",
    "mean_fd_post_censoring",
    "mean_dvars_initial",
    "mean_dvars_final",
    "num_dummy_volumes",
    "num_censored_volumes",
    "num_retained_volumes",
    "retained_seconds",
    "fd_dvars_correlation_initial",
    "fd_dvars_correlation_final",
)


@fill_doc
def dvars(
    signals,
    *,
    variance_tol: float = 1e-7,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return DVARS and standardised DVARS of series, as XCP-D's ``compute_dvars``.

    With x_v(t) the series of voxel v over the voxels whose robust standard
    deviation σ_v = (P75 − P25)/1.349 (percentiles over time, numpy's
    ``method='lower'``, as FSL) exceeds ``variance_tol``:

    - DVARS(t) = sqrt(mean over v of (x_v(t) − x_v(t − 1))²), the RMS over
      voxels of the temporal difference (Power et al. 2012);
    - standardised DVARS(t) = DVARS(t) / mean over v of σ_v·sqrt(2(1 − ρ_v)),
      ρ_v the lag-1 autocorrelation of the centred x_v (Yule-Walker:
      Σ x(t)x(t+1) / Σ x(t)², as nitime's ``AR_est_YW``) (Nichols 2013).

    Both start with 0 at the first volume (XCP-D's convention; fMRIPrep
    writes NaN there).

    Parameters
    ----------
    signals : array-like or torch.Tensor of shape (n_timepoints, n_voxels)
        A tensor is read where it lies (cleaned series left on the device).
    variance_tol : float, default=1e-7
        Voxels with a robust standard deviation at or below it are left out.
    %(device)s
    %(dtype)s
    %(memory_limit)s

    Returns
    -------
    dvars, std_dvars : ndarray of shape (n_timepoints,), float64

    Raises
    ------
    ValueError
        Fewer than 2 time points, or no voxel varies.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.qc import dvars
    >>> x = np.random.default_rng(0).standard_normal((50, 200))
    >>> x[20:] += 3.0  # a jump at volume 20
    >>> plain, standardised = dvars(x, device="cpu")
    >>> plain.shape, int(np.argmax(plain)), float(plain[0])
    ((50,), 20, 0.0)
    """
    import torch

    from connscale._compute import planner_for, resolve_device, resolve_dtype

    n_timepoints, n_voxels = signals.shape
    if n_timepoints < 2:
        raise ValueError(f"DVARS needs at least 2 time points; got {n_timepoints}.")
    work = resolve_dtype(dtype)
    dev = signals.device if isinstance(signals, torch.Tensor) else resolve_device(device)
    planner = planner_for(dev, memory_limit, hint="Raise memory_limit.")
    itemsize = torch.empty((), dtype=work).element_size()
    with planner.transient(), torch.no_grad():
        columns = planner.fit(
            _DVARS_VALUES_PER_TIMEPOINT * n_timepoints * itemsize,
            f"DVARS of {n_voxels} series x {n_timepoints} time points",
            at_most=max(n_voxels, 1),
        )
        squares = torch.zeros(n_timepoints - 1, dtype=torch.float64, device=dev)
        sd_hat, kept = 0.0, 0
        for c0 in range(0, n_voxels, columns):
            block = torch.as_tensor(signals[:, c0 : c0 + columns], device=dev).to(work)
            block_squares, block_sd_hat, block_kept = _dvars_block(block, variance_tol)
            squares += block_squares
            sd_hat += block_sd_hat
            kept += block_kept
    if not kept:
        raise ValueError("DVARS: no series varies over time (robust standard deviation 0).")
    plain = np.sqrt(squares.cpu().numpy() / kept)
    standardised = plain / (sd_hat / kept)
    return np.insert(plain, 0, 0.0), np.insert(standardised, 0, 0.0)


def _dvars_block(block, variance_tol: float) -> tuple[object, float, int]:
    """Return a block's sums: squared differences per time, Σ σ_v·sqrt(2(1 − ρ_v)), voxels kept."""
    import torch

    sd = _quartile_spread(block) / _IQR_TO_STD
    varies = sd > variance_tol
    if not bool(varies.all()):  # (a copy only when a series is left out)
        block, sd = block[:, varies], sd[varies]
    # Products in the working dtype, every sum in float64.
    f64 = torch.float64
    centred = block - (block.sum(dim=0, dtype=f64) / block.shape[0]).to(block.dtype)
    lag = (centred[1:] * centred[:-1]).sum(dim=0, dtype=f64)
    ar1 = lag / centred.square().sum(dim=0, dtype=f64)
    sd_hat = torch.sqrt(2.0 * (1.0 - ar1)) * sd.double()
    squares = block.diff(dim=0).square().sum(dim=1, dtype=f64)
    return squares, float(sd_hat.sum()), int(block.shape[1])


def _quartile_spread(block):
    """Return each column's P75 − P25 over the rows (numpy's ``method='lower'``: order statistics).

    On the CPU the two order statistics are selected (numpy's introselect,
    ~2.3× faster than a sort on one core: ``benchmarks/RESULTS.md`` §25); on
    a GPU the columns are sorted.
    """
    import torch

    n = block.shape[0]
    lower, upper = math.floor(0.25 * (n - 1)), math.floor(0.75 * (n - 1))
    if block.device.type == "cpu":
        selected = np.partition(block.numpy(), (lower, upper), axis=0)
        return torch.from_numpy(selected[upper] - selected[lower])
    ordered = block.sort(dim=0).values
    return ordered[upper] - ordered[lower]


def _correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Return Pearson's r of the pairs where both are finite (NaN when either is constant)."""
    both = np.isfinite(x) & np.isfinite(y)
    if both.sum() < 2:
        return math.nan
    x, y = x[both] - x[both].mean(), y[both] - y[both].mean()
    denominator = math.sqrt(float(x @ x) * float(y @ y))
    return float(x @ y) / denominator if denominator > 0 else math.nan


def _finite_stat(stat, values: np.ndarray | None) -> float:
    """Return ``stat`` of the finite values (NaN when there is none, or no values)."""
    if values is None:
        return math.nan
    finite = values[np.isfinite(values)]
    return float(stat(finite)) if finite.size else math.nan


def qc_row(
    fd: np.ndarray,
    sample_mask,
    t_r: float,
    *,
    dummy_scans: int = 0,
    dvars_initial: np.ndarray | None = None,
    dvars_final: np.ndarray | None = None,
) -> dict:
    """Return a run's QC row: XCP-D's ``desc-linc_qc.tsv`` values (:data:`QC_COLUMNS`).

    Parameters
    ----------
    fd : ndarray of shape (n_volumes,)
        Framewise displacement of every volume of the BOLD (the one the
        censoring used; NaN allowed).
    sample_mask : array-like of int
        The volumes kept after dummy scans and censoring, indices into ``fd``.
    t_r : float
        Repetition time (s).
    dummy_scans : int, default=0
        The leading volumes dropped as non-steady-state.
    dvars_initial : ndarray of shape (n_volumes - dummy_scans,) or None
        Standardised DVARS of the BOLD after the dummy scans (:func:`dvars`);
        None leaves its columns NaN.
    dvars_final : ndarray of shape (len(sample_mask),) or None
        Standardised DVARS of the denoised kept volumes; None leaves its
        columns NaN.

    Returns
    -------
    dict
        ``mean_fd`` and ``max_fd`` over the volumes after the dummy scans,
        ``mean_fd_post_censoring`` over the kept ones, the mean DVARS (the
        leading 0 included, as XCP-D), the volume counts (censored: after
        the dummy scans, not kept), ``retained_seconds`` (kept volumes ×
        ``t_r``) and the correlations of FD with DVARS (initial: the volumes
        after the dummy scans; final: the kept ones).

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.qc import qc_row
    >>> fd = np.array([0.0, 0.1, 0.2, 0.9, 0.1, 0.2])
    >>> row = qc_row(fd, [1, 2, 4, 5], 2.0, dummy_scans=1)
    >>> round(row["mean_fd"], 3), row["num_censored_volumes"], row["retained_seconds"]
    (0.3, 1, 8.0)
    """
    fd = np.asarray(fd, dtype=np.float64)
    kept = np.asarray(sample_mask, dtype=np.int64)
    after_dummy = fd[dummy_scans:]
    if dvars_initial is not None and dvars_initial.size != after_dummy.size:
        raise ValueError(
            f"FD has {after_dummy.size} volumes after the dummy scans, DVARS {dvars_initial.size}."
        )
    if dvars_final is not None and dvars_final.size != kept.size:
        raise ValueError(f"{kept.size} volumes are kept, the final DVARS has {dvars_final.size}.")
    nan = math.nan
    return {
        "mean_fd": _finite_stat(np.mean, after_dummy),
        "max_fd": _finite_stat(np.max, after_dummy),
        "mean_fd_post_censoring": _finite_stat(np.mean, fd[kept]),
        "mean_dvars_initial": _finite_stat(np.mean, dvars_initial),
        "mean_dvars_final": _finite_stat(np.mean, dvars_final),
        "num_dummy_volumes": int(dummy_scans),
        "num_censored_volumes": int(after_dummy.size - np.count_nonzero(kept >= dummy_scans)),
        "num_retained_volumes": int(kept.size),
        "retained_seconds": float(kept.size * t_r),
        "fd_dvars_correlation_initial": (
            nan if dvars_initial is None else _correlation(after_dummy, dvars_initial)
        ),
        "fd_dvars_correlation_final": (
            nan if dvars_final is None else _correlation(fd[kept], dvars_final)
        ),
    }


def qc_fc(edges: np.ndarray, mean_fd: np.ndarray) -> np.ndarray:
    """Across runs, the Pearson correlation of each edge with mean FD.

    Parameters
    ----------
    edges : ndarray of shape (n_runs, n_edges)
    mean_fd : ndarray of shape (n_runs,)

    Returns
    -------
    ndarray of shape (n_edges,)
        NaN where an edge or FD does not vary.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.qc import qc_fc
    >>> mean_fd = np.array([0.1, 0.2, 0.3, 0.4])
    >>> edges = np.c_[mean_fd * 2, -mean_fd, np.ones(4)]  # 3 edges over 4 runs
    >>> qc_fc(edges, mean_fd)
    array([ 1., -1., nan])
    """
    e = edges - edges.mean(axis=0)
    f = mean_fd - mean_fd.mean()
    denom = np.sqrt((e**2).sum(axis=0) * (f**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (f @ e) / denom, np.nan)


def region_centroids(atlas: np.ndarray, affine: np.ndarray, regions) -> np.ndarray:
    """Return the centroid (mm, world coordinates) of each region of a 3-D label image.

    Parameters
    ----------
    atlas : ndarray of int, 3-D
    affine : ndarray of shape (4, 4)
    regions : sequence of int
        The labels, in output order.

    Returns
    -------
    ndarray of shape (n_regions, 3)
        NaN for a label with no voxel.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.qc import region_centroids
    >>> atlas = np.zeros((4, 4, 4), dtype=int)
    >>> atlas[0, 0, 0], atlas[2:4, 0, 0] = 1, 2
    >>> region_centroids(atlas, np.diag([2.0, 2.0, 2.0, 1.0]), [1, 2, 3])
    array([[ 0.,  0.,  0.],
           [ 5.,  0.,  0.],
           [nan, nan, nan]])
    """
    ijk = np.argwhere(atlas > 0)
    labels = atlas[tuple(ijk.T)]
    centroids = np.full((len(regions), 3), np.nan)
    for k, region in enumerate(regions):
        inside = ijk[labels == region]
        if inside.size:
            centroids[k] = inside.mean(axis=0)
    return centroids @ affine[:3, :3].T + affine[:3, 3]


def edge_distances(centroids: np.ndarray) -> np.ndarray:
    """Return the Euclidean distance of each pair of regions (i < j, row-major), as QC-FC's.

    Parameters
    ----------
    centroids : ndarray of shape (n_regions, 3)
        The regions' centroids (mm), e.g. from :func:`region_centroids`.

    Returns
    -------
    ndarray of shape (n_regions * (n_regions - 1) / 2,)
        In the order of connscale's edge vectors.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.qc import edge_distances
    >>> edge_distances(np.array([[0.0, 0, 0], [3, 4, 0], [0, 0, 1]]))
    array([5.        , 1.        , 5.09901951])
    """
    i, j = np.triu_indices(len(centroids), 1)
    return np.linalg.norm(centroids[i] - centroids[j], axis=1)


def qc_fc_distance(qcfc: np.ndarray, distances: np.ndarray) -> float:
    """Return QC-FC's distance dependence: Spearman's ρ of QC-FC with the edge lengths.

    As Ciric et al. 2017: a negative value means motion inflates short-range
    connections more than long-range ones. Edges whose QC-FC or distance is
    not finite are left out; NaN when fewer than 3 remain.

    Parameters
    ----------
    qcfc : ndarray of shape (n_edges,)
        QC-FC of each edge (:func:`qc_fc`).
    distances : ndarray of shape (n_edges,)
        Each edge's length (:func:`edge_distances`).

    Returns
    -------
    float
        Spearman's ρ.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.qc import qc_fc_distance
    >>> qc_fc_distance(np.array([0.3, 0.2, 0.1, np.nan]), np.array([10.0, 20.0, 40.0, 5.0]))
    -1.0
    """
    from scipy.stats import rankdata

    both = np.isfinite(qcfc) & np.isfinite(distances)
    if both.sum() < 3:
        return math.nan
    return _correlation(rankdata(qcfc[both]), rankdata(distances[both]))
