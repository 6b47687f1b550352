"""Parcel coverage of a run and the ``min_coverage`` rule (XCP-D's).

A parcel's coverage is the fraction of its atlas voxels (on the run's grid)
inside the run's brain mask; on grayordinates, the fraction of its
grayordinates used (:func:`connscale.cifti.parcellate`). As XCP-D
(``xcp_d/interfaces/connectivity.py``, ``NiftiParcellate``), a parcel below
``min_coverage`` (default 0.5) keeps its column and is NaN in the region
series and the connectome; its coverage is written beside them, one row per
atlas parcel (``Node``, ``coverage``, as XCP-D's ``_stat-coverage_bold.tsv``)::

    <source>_seg-<atlas>_stat-coverage_desc-<strategy>_bold.tsv / .json
"""

from __future__ import annotations

import numpy as np

from connscale.io.atomic import atomic_path

__all__ = ["apply_min_coverage", "coverage_sidecar", "volume_coverage", "write_coverage_tsv"]


def volume_coverage(atlas: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the labels of a 3-D atlas (0 is background) and the fraction of each in the mask.

    Parameters
    ----------
    atlas : ndarray of int, shape (X, Y, Z)
        The atlas's labels on the run's grid.
    mask : ndarray of bool, shape (X, Y, Z)
        The run's brain mask.

    Returns
    -------
    labels : ndarray of int
        The atlas's labels other than 0, ascending.
    coverage : ndarray of float
        For each, its voxels inside the mask over its voxels.
    """
    atlas = np.asarray(atlas)
    mask = np.asarray(mask, bool)
    if _small_labels(atlas):  # counted by label value: no sort of the grid (a run's ~50 ms)
        total = np.bincount(atlas.ravel())
        inside = np.bincount(atlas[mask], minlength=total.size)
        keys = np.flatnonzero(total[1:]) + 1  # the labels present, 0 left out
        return keys.astype(int), inside[keys] / total[keys]
    keys, index = np.unique(atlas.ravel(), return_inverse=True)
    total = np.bincount(index, minlength=keys.size)
    inside = np.bincount(index, weights=mask.ravel(), minlength=keys.size)
    kept = keys != 0
    return keys[kept].astype(int), inside[kept] / total[kept]


#: The largest label counted by value (:func:`volume_coverage`); larger ones are sorted.
_MAX_COUNTED_LABEL = 1 << 20


def _small_labels(atlas: np.ndarray) -> bool:
    """Return whether ``atlas`` holds non-negative integer labels small enough to count."""
    if atlas.dtype.kind not in "iu" or atlas.size == 0:
        return False
    low, high = int(atlas.min()), int(atlas.max())
    return low >= 0 and high <= _MAX_COUNTED_LABEL


def apply_min_coverage(series: np.ndarray, coverage: np.ndarray, min_coverage: float) -> np.ndarray:
    """Zero the cleaned series of the parcels below ``min_coverage``; return which they are.

    A zeroed series is constant: its correlations are NaN, as XCP-D's NaN
    series give. The caller writes NaN in its region series.

    Parameters
    ----------
    series : ndarray, shape (n_timepoints, n_parcels)
        The cleaned parcel series, changed in place.
    coverage : ndarray, shape (n_parcels,)
        Each column's coverage.
    min_coverage : float

    Returns
    -------
    ndarray of bool, shape (n_parcels,)
    """
    low = np.asarray(coverage) < min_coverage
    series[:, low] = 0
    return low


def coverage_sidecar(names, coverage: np.ndarray, low: np.ndarray, min_coverage: float) -> dict:
    """Return the sidecar keys naming the parcels set to NaN for their coverage, and why."""
    return {
        "MinimumCoverage": float(min_coverage),
        "LowCoverageRegions": {
            name: round(float(c), 6) for name, c, is_low in zip(names, coverage, low) if is_low
        },
        "LowCoverageDescription": "regions with less than MinimumCoverage of their atlas "
        "voxels (grayordinates) inside the run's mask, with their coverage: NaN in the "
        "region series and the connectome (XCP-D's --min-coverage)",
    }


def write_coverage_tsv(path, names, coverage: np.ndarray) -> None:
    """Write one row per parcel, ``Node`` and ``coverage``, as XCP-D's coverage table."""
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        handle.write("Node\tcoverage\n")
        for name, value in zip(names, coverage):
            handle.write(f"{name}\t{float(value):.8g}\n")
