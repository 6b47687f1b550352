"""Chunked HDF5 stores for connectivity matrices too large for memory.

Layout (readable with h5py alone)::

    /relmat             kind='triu':  1-D (N(N-1)/2,) row-major strictly-upper
                        kind='dense': 2-D (N, N), chunked by row blocks
    /relmat/data, /relmat/indices, /relmat/indptr
                        kind='sparse': CSR of the upper triangle (a group)

Root attributes: ``N``, ``kind``, ``order``, ``dtype``, ``threshold``,
``absolute``, ``measure``, ``source``, ``software``, ``complete``.
``complete`` is set last, after the data are flushed, and the file is written
under a temporary name and renamed once it closed without error, so an
interrupted or failed run never leaves a file that looks finished. Dense and
triangle stores are allocated when created (their size is known), so a full
disk is found before the computation starts (see :mod:`connscale.io.h5`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from connscale._triu import n_from_pairs
from connscale._version import __version__
from connscale.io.atomic import atomic_path
from connscale.io.h5 import close_h5, create_h5, early_dcpl, flush_h5, h5_errors
from connscale.io.publish import check_published

if TYPE_CHECKING:
    import h5py
    import scipy.sparse as sp

ORDER_TRIU = "row-major strictly-upper: pair (i, j), i < j, at k = i*N - i*(i+1)/2 + j - i - 1"
_CHUNK_BYTES = 4 * 1024**2


class RelmatWriter:
    """Write a connectivity matrix into an open HDF5 file, round by round.

    Parameters
    ----------
    h5file : h5py.File
        Open, writable file.
    n : int
        Number of series (matrix size).
    kind : {'triu', 'dense', 'sparse'}
    dtype : numpy dtype
    attrs : dict
        Extra root attributes (threshold, source, ...).
    """

    def __init__(
        self, h5file: h5py.File, n: int, kind: str, dtype: npt.DTypeLike, attrs: dict | None = None
    ) -> None:
        self.file = h5file
        self.n = int(n)
        self.kind = kind
        self.dtype = np.dtype(dtype)
        item = self.dtype.itemsize
        if kind == "triu":
            length = self.n * (self.n - 1) // 2
            chunk = max(1, min(length, _CHUNK_BYTES // item))
            self.dataset = h5file.create_dataset(
                "relmat",
                shape=(length,),
                dtype=self.dtype,
                chunks=(chunk,) if length else None,
                dcpl=early_dcpl() if length else None,
            )
        elif kind == "dense":
            rows = max(1, min(self.n, _CHUNK_BYTES // (item * max(self.n, 1))))
            self.dataset = h5file.create_dataset(
                "relmat",
                shape=(self.n, self.n),
                dtype=self.dtype,
                chunks=(rows, self.n),
                dcpl=early_dcpl(),
            )
        elif kind == "sparse":
            group = h5file.create_group("relmat")
            group.attrs["format"] = "csr"
            group.attrs["shape"] = (self.n, self.n)
            chunk = _CHUNK_BYTES // 4
            self.data = group.create_dataset(
                "data", shape=(0,), maxshape=(None,), dtype=self.dtype, chunks=(chunk,)
            )
            self.indices = group.create_dataset(
                "indices",
                shape=(0,),
                maxshape=(None,),
                dtype=np.int32 if self.n < 2**31 else np.int64,
                chunks=(chunk,),
            )
            self.indptr = group.create_dataset("indptr", shape=(self.n + 1,), dtype=np.int64)
            self._nnz = 0
            self._row = 0
            self.indptr[0] = 0
        else:
            raise ValueError(f"kind must be 'triu', 'dense' or 'sparse'; got {kind!r}.")
        h5file.attrs.update(
            {
                "N": self.n,
                "kind": kind,
                "order": ORDER_TRIU if kind != "dense" else "full symmetric matrix",
                "dtype": self.dtype.name,
                "measure": "PearsonCorrelation",
                "software": f"connscale {__version__}",
                "complete": False,
            }
        )
        for key, value in (attrs or {}).items():
            h5file.attrs[key] = "None" if value is None else value

    def write_triu(self, start: int, values: np.ndarray) -> None:
        """Write ``values`` at positions ``start:start+len(values)``."""
        self.dataset[start : start + values.shape[0]] = values

    def write_rows(self, row: int, values: np.ndarray) -> None:
        """Write dense rows ``row:row+len(values)``."""
        self.dataset[row : row + values.shape[0]] = values

    def append_csr_rows(self, counts: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
        """Append the next ``len(counts)`` rows of the CSR matrix."""
        nnz = int(data.shape[0])
        if nnz:
            self.data.resize((self._nnz + nnz,))
            self.indices.resize((self._nnz + nnz,))
            self.data[self._nnz :] = data
            self.indices[self._nnz :] = indices
        ends = self._nnz + np.cumsum(counts, dtype=np.int64)
        self.indptr[self._row + 1 : self._row + 1 + len(counts)] = ends
        self._nnz += nnz
        self._row += len(counts)

    def close(self) -> None:
        """Flush the data, then mark the store complete (the last write)."""
        if self.kind == "sparse" and self._row != self.n:
            raise RuntimeError(f"Only {self._row} of {self.n} CSR rows were written.")
        self.file.flush()
        self.file.attrs["complete"] = True


def write_relmat_h5(
    path: str | os.PathLike,
    matrix: np.ndarray,
    *,
    attrs: Mapping[str, object] | None = None,
    datasets: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """Write an in-memory connectivity matrix as a ``_relmat.h5``, atomically.

    The layout of :class:`RelmatWriter`: kind 'dense' for a square
    ``matrix``, 'triu' for a 1-D strictly-upper-triangle vector; with the
    root attributes ``attrs`` (``measure``...) and the further ``datasets``
    (``node_labels``...).
    """
    matrix = np.asarray(matrix)
    if matrix.ndim == 1:
        kind, n = "triu", n_from_pairs(matrix.shape[0], source="'matrix'")
    elif matrix.ndim == 2 and matrix.shape[0] == matrix.shape[1]:
        kind, n = "dense", matrix.shape[0]
    else:
        raise ValueError(
            "Expected a square matrix or a 1-D upper-triangle vector; got an "
            f"array of shape {matrix.shape}."
        )
    path = Path(path)
    with atomic_path(path) as tmp:
        h5 = create_h5(tmp, overwrite_own=True)
        try:
            writer = RelmatWriter(h5, n, kind, matrix.dtype, attrs)
            with h5_errors(path):
                if kind == "triu":
                    writer.write_triu(0, matrix)
                else:
                    writer.write_rows(0, matrix)
                for key, value in (datasets or {}).items():
                    h5.create_dataset(key, data=value, track_times=False)
            flush_h5(h5, path)
            with h5_errors(path):
                writer.close()
        finally:
            close_h5(h5, path)
    return path


def load_relmat(
    path: str | os.PathLike, *, mmap: bool = False
) -> tuple[np.ndarray | sp.csr_array | h5py.Dataset, dict]:
    """Read a connectivity store: one written by connscale, or by another tool.

    Parameters
    ----------
    path : str or path
        A ``_relmat.h5`` file: a dataset (``kind`` 'triu' or 'dense') or a
        CSR group (``kind`` 'sparse') named ``"relmat"``. connscale keeps
        ``kind``, ``N`` and ``complete`` on the root; a file of another tool
        may keep ``kind`` and ``N`` (or ``n``), ``labels`` on the dataset,
        and may leave ``kind`` out (then a group is 'sparse', a 2-D dataset
        'dense', a 1-D one 'triu'). Or a ``_relmat.tsv`` (``.tsv.gz``), read
        by :func:`connscale.io.read_relmat_tsv`: kind 'dense', its header's
        node names as ``labels``.
    mmap : bool, default=False
        Return the open ``h5py.Dataset`` (sliceable without reading it all)
        instead of an in-memory array; not for sparse stores. A TSV is read
        whole.

    Returns
    -------
    relmat : ndarray, scipy.sparse.csr_array or h5py.Dataset
        'triu': the 1-D row-major strictly-upper triangle; 'dense': the
        square matrix; 'sparse': the CSR of the upper triangle (unstored
        pairs are 0).
    attrs : dict
        The dataset's attributes, then the root's (which win), with ``kind``
        set; ``labels`` decoded to a list of str when present.

    Raises
    ------
    ValueError
        When the file is neither a relmat TSV nor an HDF5 store, the store
        is flagged incomplete (``complete`` False: the run that wrote it did
        not finish), belongs to a file set whose publication did not finish
        (:class:`~connscale.io.publish.IncompleteOutputError`), or its
        layout does not match its attributes.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import connscale
    >>> x = np.random.default_rng(0).standard_normal((100, 5))
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = connscale.correlation(x, kind="triu", device="cpu", out=Path(tmp) / "r.h5")
    ...     relmat, attrs = connscale.load_relmat(path)
    >>> relmat.shape, attrs["kind"], int(attrs["N"])
    ((10,), 'triu', 5)
    """
    import h5py
    import scipy.sparse as sp

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No connectivity store at {path}.")
    check_published(path)
    if path.name.lower().endswith((".tsv", ".tsv.gz")):
        return _load_relmat_tsv(path)
    if not h5py.is_hdf5(path):
        raise ValueError(
            f"Cannot read {str(path)!r}: load_relmat reads a relmat TSV (.tsv, .tsv.gz) "
            "or an HDF5 store (_relmat.h5)."
        )
    handle = h5py.File(path, "r")
    try:
        if "relmat" not in handle:
            raise ValueError(f"{str(path)!r}: no dataset 'relmat'; found {sorted(handle.keys())}.")
        node = handle["relmat"]
        attrs = {k: _decoded(v) for k, v in node.attrs.items() if not isinstance(node, h5py.Group)}
        attrs.update({k: _decoded(v) for k, v in handle.attrs.items()})
        if not attrs.get("complete", True):
            raise ValueError(f"{path} is incomplete (the run that wrote it did not finish).")
        group = isinstance(node, h5py.Group)
        kind = attrs.setdefault(
            "kind", "sparse" if group else "dense" if node.ndim == 2 else "triu"
        )
        if kind not in ("triu", "dense", "sparse"):
            raise ValueError(
                f"{str(path)!r}: attribute 'kind' must be 'triu', 'dense' or "
                f"'sparse'; got {kind!r}."
            )
        if kind == "sparse" and not group:
            raise ValueError(f"{str(path)!r}: kind 'sparse' needs a CSR group 'relmat'.")
        if kind != "sparse" and group:
            raise ValueError(f"{str(path)!r}: 'relmat' is a group but kind is {kind!r}.")
        if kind == "triu" and node.ndim != 1:
            raise ValueError(
                f"{str(path)!r}: kind 'triu' needs a 1-D dataset; got shape {node.shape}."
            )
        if kind == "sparse":
            n = int(node.attrs["shape"][0])
        elif kind == "dense":
            n = int(node.shape[0])
        else:
            n = n_from_pairs(int(node.shape[0]), source=repr(str(path)))
        stated = attrs.get("N", attrs.get("n"))
        if stated is not None and int(stated) != n:
            raise ValueError(
                f"{str(path)!r}: attribute n={int(stated)} does not match the data ({n} regions)."
            )
        if "labels" in attrs:
            attrs["labels"] = [str(label) for label in attrs["labels"]]
        if mmap and kind != "sparse":
            handle = None  # the caller closes the file through the dataset
            return node, attrs
        if kind == "sparse":
            shape = tuple(int(x) for x in node.attrs["shape"])
            matrix = sp.csr_array(
                (node["data"][()], node["indices"][()], node["indptr"][()]), shape=shape
            )
            return matrix, attrs
        return node[()], attrs
    finally:
        if handle is not None:
            handle.close()


def _load_relmat_tsv(path: Path) -> tuple[np.ndarray, dict]:
    """Load a relmat TSV as :func:`load_relmat` returns a dense store."""
    from connscale.io.relmat import read_relmat_tsv

    matrix, labels = read_relmat_tsv(path)
    return matrix, {"kind": "dense", "N": matrix.shape[0], "labels": labels}


def _decoded(value: object) -> object:
    """Return an HDF5 attribute with bytes (or arrays of bytes) decoded to str."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.dtype.kind in "OS":
        return [v.decode() if isinstance(v, bytes) else v for v in value.tolist()]
    return value


def add_datasets(
    path: str | os.PathLike,
    datasets: Mapping[str, np.ndarray],
    *,
    attrs: Mapping[str, object] | None = None,
    compress: tuple[str, ...] = (),
) -> None:
    """Add datasets (and root attributes) to a finished HDF5 store.

    For the unpublished store of an :class:`~connscale.io.publish.OutputSet`
    (a relmat or DFC store), before the set is committed. Object arrays are
    stored as strings; the datasets named in ``compress`` are gzip-compressed.
    """
    import h5py

    with h5py.File(path, "a") as h5:
        for key, value in datasets.items():
            value = np.asarray(value)
            options = {"compression": "gzip"} if key in compress else {}
            if value.dtype == object:
                options["dtype"] = h5py.string_dtype()
            h5.create_dataset(key, data=value, track_times=False, **options)
        h5.attrs.update(attrs or {})


def store_kind(path: str | os.PathLike) -> str:
    """'relmat', 'pairs' or 'dfc': what a connscale HDF5 output holds.

    Recognised by content (the name is not read): a ``connscale-dfc-1``
    file (:mod:`connscale.io.dfc`), ``courses`` and ``pairs`` datasets
    (:mod:`connscale.io.pairs`) or a ``relmat`` dataset or group.
    """
    import h5py

    from connscale.io.dfc import is_dfc_store

    try:
        with h5py.File(path, "r") as h5:
            if is_dfc_store(h5.attrs):
                return "dfc"
            if "courses" in h5 and "pairs" in h5:
                return "pairs"
            if "relmat" in h5:
                return "relmat"
            keys = sorted(h5.keys())
    except OSError as exc:
        raise ValueError(f"Cannot read {str(path)!r} as HDF5: {exc}") from None
    raise ValueError(
        f"{str(path)!r} is no connscale connectivity store: expected a 'relmat' dataset "
        f"(_relmat.h5), 'courses' and 'pairs' (_pairs.h5) or a connscale-dfc-1 file "
        f"(_dfc.h5); found {keys}."
    )
