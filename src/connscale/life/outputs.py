"""Outputs of a LiFE fit.

Weights (NPY/TSV), the pruned tractogram in the input's format, and a region
× region connectome from a labels image as BIDS-named ``relmat`` TSV/HDF5
with a JSON sidecar. Every file is written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from connscale._choices import LIFE_MEASURES
from connscale.io.life import save_weights  # noqa: F401 (public here too)
from connscale.io.streamlines import StreamlineArray, save_streamlines

if TYPE_CHECKING:
    from connscale.life.api import LiFEFit

_MEASURES = LIFE_MEASURES


def save_pruned_tractogram(
    streamlines: StreamlineArray,
    weights: npt.ArrayLike,
    path: str | os.PathLike,
    *,
    reference_affine: npt.ArrayLike | None = None,
    reference_shape: npt.ArrayLike | None = None,
) -> Path:
    """Write the streamlines with weight > 0.

    In the format of ``path``'s suffix (.trk or .tck), reusing the input
    file's header when there was one.

    Returns
    -------
    Path
    """
    weights = np.asarray(weights)
    if len(weights) != len(streamlines):
        raise ValueError(
            f"Need one weight per streamline ({len(streamlines)}); got {len(weights)}."
        )
    keep = np.flatnonzero(weights > 0)
    return save_streamlines(
        streamlines.subset(keep),
        path,
        weights=weights[keep],
        reference=streamlines.source,
        reference_affine=reference_affine,
        reference_shape=reference_shape,
    )


def endpoint_labels(
    streamlines: StreamlineArray, labels: npt.ArrayLike, labels_affine: npt.ArrayLike
) -> np.ndarray:
    """(n_streamlines, 2) labels of each streamline's two end points (0: none)."""
    labels = np.asarray(labels)
    starts = streamlines.offsets[:-1]
    ends = streamlines.offsets[1:] - 1
    ok = streamlines.lengths > 0
    pts = np.stack(
        [streamlines.points[np.where(ok, starts, 0)], streamlines.points[np.where(ok, ends, 0)]],
        axis=1,
    ).astype(np.float64)
    inv = np.linalg.inv(np.asarray(labels_affine, dtype=np.float64))
    ijk = np.floor(pts @ inv[:3, :3].T + inv[:3, 3] + 0.5).astype(np.int64)
    inside = np.all((ijk >= 0) & (ijk < np.array(labels.shape)), axis=2) & ok[:, None]
    ijk = np.where(inside[..., None], ijk, 0)
    out = labels[ijk[..., 0], ijk[..., 1], ijk[..., 2]].astype(np.int64)
    return np.where(inside, out, 0)


def connectome(
    streamlines: StreamlineArray,
    weights: npt.ArrayLike,
    labels: npt.ArrayLike,
    labels_affine: npt.ArrayLike,
    *,
    measure: str = "weight",
    fit: LiFEFit | None = None,
    region_labels: npt.ArrayLike | None = None,
    random_state: int | np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Region × region structural connectome of the surviving streamlines.

    Parameters
    ----------
    streamlines : StreamlineArray
        In RAS+ mm.
    weights : array of shape (n_streamlines,)
    labels : array of shape (X, Y, Z), int
        Region labels (0 = background).
    labels_affine : array of shape (4, 4)
    measure : {'weight', 'count', 'evidence'}, default='weight'
        Sum of weights, number of streamlines with weight > 0, or strength
        of evidence of each edge's streamlines (needs ``fit``).
    fit : LiFEFit or None
    region_labels : array of int or None
        Regions in matrix order (default: the non-zero labels, sorted).

    Returns
    -------
    matrix : ndarray of shape (n_regions, n_regions), symmetric
    region_labels : ndarray of int
    """
    if measure not in _MEASURES:
        raise ValueError(f"'measure' must be one of {_MEASURES}; got {measure!r}.")
    labels = np.asarray(labels)
    if labels.ndim != 3:
        raise ValueError(f"'labels' must be a 3-D volume; got shape {labels.shape}.")
    if not np.issubdtype(labels.dtype, np.integer) and not np.allclose(labels, np.round(labels)):
        raise ValueError("'labels' must hold integer region labels.")
    labels = np.round(labels).astype(np.int64)
    if region_labels is None:
        region_labels = np.unique(labels[labels != 0])
    region_labels = np.asarray(region_labels, dtype=np.int64)
    n = len(region_labels)
    if n == 0:
        raise ValueError("The labels image holds no region (all zero).")
    weights = np.asarray(weights, dtype=np.float64)
    ends = endpoint_labels(streamlines, labels, labels_affine)
    pos = np.searchsorted(region_labels, ends)
    pos = np.clip(pos, 0, n - 1)
    valid = (ends != 0) & (region_labels[pos] == ends)
    use = valid.all(axis=1) & (weights > 0)
    i, j = pos[use, 0], pos[use, 1]
    M = np.zeros((n, n))
    if measure == "weight":
        np.add.at(M, (i, j), weights[use])
    elif measure == "count":
        np.add.at(M, (i, j), 1.0)
    else:
        if fit is None:
            raise ValueError("measure='evidence' needs the LiFEFit ('fit').")
        idx = np.flatnonzero(use)
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        for a, b in sorted(set(zip(lo.tolist(), hi.tolist()))):
            members = idx[(lo == a) & (hi == b)]
            M[a, b] = fit.strength_of_evidence(
                members, n_boot=1000, n_mc=5, random_state=random_state
            )["strength"]
        return M + np.triu(M, 1).T, region_labels
    M = M + M.T - np.diag(np.diag(M))
    return M, region_labels


def write_relmat(
    matrix: npt.ArrayLike,
    region_labels: npt.ArrayLike,
    out_dir: str | os.PathLike,
    source: str,
    *,
    measure: str,
    formats: Collection[str] = ("tsv", "h5"),
    metadata: Mapping | None = None,
) -> list[Path]:
    """Write ``<source>_meas-<Measure>_relmat.{tsv,h5}`` and their JSON sidecars.

    The TSV has a header row of region labels (as ``connscale.io.relmat``);
    the HDF5 store is a dense ``/relmat`` readable by
    :func:`connscale.io.load_relmat`.
    """
    from connscale._version import __version__
    from connscale.io.hdf5 import write_relmat_h5
    from connscale.io.relmat import relmat_path, write_relmat_tsv, write_sidecar

    matrix = np.asarray(matrix, dtype=np.float64)
    names = {
        "weight": "LiFEWeightSum",
        "count": "LiFEStreamlineCount",
        "evidence": "LiFEStrengthOfEvidence",
    }
    meas = names.get(measure, measure)
    labels = [str(int(x)) for x in region_labels]
    side = {
        "Measure": meas,
        "MeasureDescription": {
            "weight": "Sum of LiFE weights of the streamlines joining each pair of regions",
            "count": "Number of streamlines with LiFE weight > 0 joining each pair of regions",
            "evidence": "Strength of evidence (virtual lesion) of each pair's streamlines",
        }.get(measure, measure),
        "Weighted": True,
        "Directed": False,
        "ValidDiagonal": True,
        "StorageFormat": "Full",
        "NumberOfNodes": len(labels),
        "NodeLabels": labels,
        "Code": f"connscale {__version__}",
        **(metadata or {}),
    }
    written = []
    if "tsv" in formats:
        path = relmat_path(out_dir, source, extension=".tsv", measure=meas)
        written.append(write_relmat_tsv(path, matrix, labels))
        written.append(write_sidecar(path, side))
    if "h5" in formats:
        path = write_relmat_h5(
            relmat_path(out_dir, source, extension=".h5", measure=meas),
            matrix,
            attrs={"measure": meas},
            datasets={"node_labels": np.asarray(region_labels, dtype=np.int64)},
        )
        written.append(path)
        if "tsv" not in formats:
            written.append(write_sidecar(path, side))
    return written
