"""Connectivity outputs named after the BIDS connectivity proposal (BEP017).

Names follow giga-connectome's spelling, ``<source>_meas-PearsonCorrelation
_relmat.{tsv,h5}``: ``.tsv`` (a square matrix with a header of node names)
for small region matrices, ``_relmat.h5`` (see :mod:`connscale.io.hdf5`) for
large ones, each with a JSON sidecar, and ``dataset_description.json`` at the
output root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.io._atomic import atomic_path, write_json_atomic

_STORAGE = {
    "dense": "Full",
    "triu": "UpperTriangle (row-major, diagonal excluded)",
    "sparse": "CSR, upper triangle, diagonal excluded",
}


def source_entities(path: str | os.PathLike) -> str:
    """BIDS entities of an input file, without its suffix and extension.

    ``sub-01_task-rest_bold.nii.gz`` gives ``sub-01_task-rest``; a name
    without entities is kept whole (``fmri1.nii.gz`` gives ``fmri1``).
    """
    name = Path(path).name
    for ext in (".nii.gz", ".nii", ".tsv", ".csv", ".txt", ".npy", ".h5"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
            break
    parts = name.split("_")
    if len(parts) > 1 and "-" not in parts[-1]:
        parts = parts[:-1]  # drop the suffix (bold, timeseries, ...)
    return re.sub(r"[^A-Za-z0-9_\-]", "", "_".join(parts)) or "connscale"


def relmat_path(out_dir, source: str, *, extension: str, seg: str | None = None,
                measure: str = "PearsonCorrelation") -> Path:
    """``<out_dir>/<source>[_seg-<seg>]_meas-<measure>_relmat<extension>``."""
    stem = source if seg is None else f"{source}_seg-{seg}"
    return Path(out_dir) / f"{stem}_meas-{measure}_relmat{extension}"


def sidecar(kind: str, n: int, *, threshold=None, absolute=False, source=None,
            dtype="float32", nodes: str = "voxels") -> dict:
    """The JSON sidecar of a relmat file."""
    description = "Pearson correlation of the time series of each pair of " + nodes
    if kind == "sparse":
        rule = "|r|" if absolute else "r"
        description += f"; only pairs with {rule} >= {threshold} are stored"
    return {
        "Measure": "Pearson correlation",
        "MeasureDescription": description,
        "Weighted": True,
        "Directed": False,
        "ValidDiagonal": kind == "dense",
        "StorageFormat": _STORAGE[kind],
        "NonNegative": "",
        "Threshold": threshold,
        "AbsoluteThreshold": bool(absolute),
        "NumberOfNodes": int(n),
        "DataType": str(dtype),
        "Sources": [] if source is None else [str(source)],
        "Code": f"connscale {__version__}",
    }


def write_relmat_tsv(path, matrix: np.ndarray, labels: list[str] | None = None) -> Path:
    """A square matrix as TSV with a header row of node names, atomically."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Expected a square matrix; got an array of shape {matrix.shape}.")
    labels = labels or [str(i) for i in range(matrix.shape[0])]
    with atomic_path(path) as tmp:
        np.savetxt(tmp, matrix, delimiter="\t", header="\t".join(labels), comments="",
                   fmt="%.7g")
    return Path(path)


def read_relmat_tsv(path) -> tuple[np.ndarray, list[str]]:
    """Read a square relmat TSV written by :func:`write_relmat_tsv`."""
    path = Path(path)
    with open(path) as fh:
        labels = fh.readline().rstrip("\n").split("\t")
    matrix = np.loadtxt(path, delimiter="\t", skiprows=1, ndmin=2)
    if matrix.shape != (len(labels), len(labels)):
        raise ValueError(f"{path.name} is not a square matrix with one header row.")
    return matrix, labels


def write_sidecar(path, metadata: dict) -> Path:
    """Write the JSON sidecar beside a relmat file (same stem, ``.json``)."""
    path = Path(path)
    stem = path.name
    for ext in (".tsv", ".h5"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    return write_json_atomic(path.with_name(stem + ".json"), metadata)


def write_dataset_description(out_dir) -> Path:
    """``dataset_description.json`` of a BIDS derivatives folder (kept if present)."""
    path = Path(out_dir) / "dataset_description.json"
    if path.exists():
        return path
    return write_json_atomic(path, {
        "Name": "connscale outputs",
        "BIDSVersion": "1.9.0",
        "DatasetType": "derivative",
        "GeneratedBy": [{"Name": "connscale", "Version": __version__}],
    })
