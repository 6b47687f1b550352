"""Connectivity outputs named after the BIDS connectivity proposal (BEP017).

Names follow giga-connectome's spelling, ``<source>_meas-PearsonCorrelation
_relmat.{tsv,h5}``: ``.tsv`` (a square matrix with a header of node names)
for small region matrices, ``_relmat.h5`` (see :mod:`connscale.io.hdf5`) for
large ones, each with a JSON sidecar, and ``dataset_description.json`` at the
output root (:func:`connscale.io.bids.write_dataset_description`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import numpy.typing as npt

from connscale._version import __version__
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import write_dataset_description  # noqa: F401 (for the CLI)
from connscale.io.tables import write_float_table

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


def relmat_path(
    out_dir: str | os.PathLike,
    source: str,
    *,
    extension: str,
    seg: str | None = None,
    measure: str = "PearsonCorrelation",
) -> Path:
    """Return ``<out_dir>/<source>[_seg-<seg>]_meas-<measure>_relmat<extension>``.

    Parameters
    ----------
    out_dir : str or path
        The output folder.
    source : str
        The input's BIDS entities (see :func:`source_entities`).
    extension : str
        ``'.h5'``, ``'.tsv'``, ...
    seg : str or None, default=None
        The atlas' name (the ``seg-`` entity), when the nodes are regions.
    measure : str, default='PearsonCorrelation'
        The ``meas-`` entity.

    Returns
    -------
    Path
        The relmat file's path.

    Examples
    --------
    >>> from connscale.io import relmat_path
    >>> relmat_path("out", "sub-01_task-rest", extension=".tsv", seg="Schaefer100").name
    'sub-01_task-rest_seg-Schaefer100_meas-PearsonCorrelation_relmat.tsv'
    """
    stem = source if seg is None else f"{source}_seg-{seg}"
    return Path(out_dir) / f"{stem}_meas-{measure}_relmat{extension}"


def sidecar(
    kind: str,
    n: int,
    *,
    threshold: float | None = None,
    absolute: bool = False,
    source: str | os.PathLike | None = None,
    dtype: npt.DTypeLike = "float32",
    nodes: str = "voxels",
) -> dict:
    """Return the JSON sidecar of a relmat file."""
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
        "NonNegative": False,
        "Threshold": threshold,
        "AbsoluteThreshold": bool(absolute),
        "NumberOfNodes": int(n),
        "DataType": str(dtype),
        "Sources": [] if source is None else [str(source)],
        "Code": f"connscale {__version__}",
    }


def write_relmat_tsv(
    path: str | os.PathLike,
    matrix: np.ndarray,
    labels: list[str] | None = None,
    *,
    fmt: str = "%.7g",
) -> Path:
    """Write a square matrix as TSV with a header row of node names, atomically.

    Parameters
    ----------
    path : str or path
        The TSV file to write (replaced atomically when it exists).
    matrix : ndarray of shape (n, n)
        The connectivity matrix.
    labels : list of str or None, default=None
        Node names of the header row (``'0', '1', ...`` when None).
    fmt : str, default='%.7g'
        The number format (float32's precision by default).

    Returns
    -------
    Path
        ``path``.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale.io import read_relmat_tsv, write_relmat_tsv
    >>> r = np.array([[1.0, 0.25], [0.25, 1.0]])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_relmat_tsv(Path(tmp) / "relmat.tsv", r, ["A", "B"])
    ...     print(path.read_text())
    A B
    1 0.25
    0.25 1
    """
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Expected a square matrix; got an array of shape {matrix.shape}.")
    labels = labels or [str(i) for i in range(matrix.shape[0])]
    return write_float_table(path, matrix, labels, fmt=fmt)


def read_relmat_npy(path: str | os.PathLike) -> np.ndarray:
    """Read a connectivity matrix saved with ``numpy.save``.

    The file holds a square matrix or the 1-D row-major strictly-upper triangle
    (no pickles).
    """
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"Cannot read {str(path)!r} as a numeric .npy array: {exc}") from exc


def read_relmat_tsv(path: str | os.PathLike) -> tuple[np.ndarray, list[str]]:
    r"""Read a square relmat TSV (:func:`write_relmat_tsv`, or another tool's).

    Parameters
    ----------
    path : str or path
        ``.tsv`` or ``.tsv.gz``: a header row of node names, then one row of
        values per node; an optional first column of row names (the header
        then starts with an empty corner cell, or has one cell fewer than the
        rows); ``n/a`` and empty cells read as NaN.

    Returns
    -------
    matrix : ndarray of shape (n, n), float64
    labels : list of str

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.io import read_relmat_tsv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "relmat.tsv"
    ...     # A first column of row names, and a missing value:
    ...     _ = path.write_text("\tA\tB\nA\t1\tn/a\nB\t0.5\t1\n")
    ...     matrix, labels = read_relmat_tsv(path)
    >>> matrix
    array([[1. , nan],
           [0.5, 1. ]])
    >>> labels
    ['A', 'B']
    """
    import csv
    import gzip

    path = Path(path)
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", newline="") as handle:
        rows = [row for row in csv.reader(handle, delimiter="\t") if row]
    if not rows:
        raise ValueError(f"{str(path)!r} is empty.")
    header, body = rows[0], rows[1:]
    if body and (header[0] == "" or len(body[0]) == len(header) + 1):
        if header[0] == "":
            header = header[1:]
        body = [row[1:] for row in body]
    n = len(header)
    if len(body) != n or any(len(row) != n for row in body):
        raise ValueError(
            f"{str(path)!r}: expected a square matrix with a header of {n} region "
            f"labels and {n} rows of {n} values; got {len(body)} rows of lengths "
            f"{sorted({len(row) for row in body})}."
        )
    try:
        matrix = np.array(
            [[float(v) if v not in ("", "n/a") else np.nan for v in row] for row in body],
            dtype=np.float64,
        ).reshape(n, n)
    except ValueError as exc:
        raise ValueError(f"{str(path)!r}: non-numeric matrix entry ({exc}).") from None
    return matrix, header


def write_sidecar(path: str | os.PathLike, metadata: dict) -> Path:
    """Write the JSON sidecar beside a relmat file (same stem, ``.json``)."""
    path = Path(path)
    stem = path.name
    for ext in (".tsv", ".h5"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    return write_json_atomic(path.with_name(stem + ".json"), metadata)
