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
disk is found before the computation starts (see :mod:`connscale.io._h5`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.io._h5 import early_dcpl
from connscale.io._publish import check_published

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

    def __init__(self, h5file, n: int, kind: str, dtype, attrs: dict | None = None) -> None:
        self.file = h5file
        self.n = int(n)
        self.kind = kind
        self.dtype = np.dtype(dtype)
        item = self.dtype.itemsize
        if kind == "triu":
            length = self.n * (self.n - 1) // 2
            chunk = max(1, min(length, _CHUNK_BYTES // item))
            self.dataset = h5file.create_dataset("relmat", shape=(length,), dtype=self.dtype,
                                                 chunks=(chunk,) if length else None,
                                                 dcpl=early_dcpl() if length else None)
        elif kind == "dense":
            rows = max(1, min(self.n, _CHUNK_BYTES // (item * max(self.n, 1))))
            self.dataset = h5file.create_dataset("relmat", shape=(self.n, self.n), dtype=self.dtype,
                                                 chunks=(rows, self.n), dcpl=early_dcpl())
        elif kind == "sparse":
            group = h5file.create_group("relmat")
            group.attrs["format"] = "csr"
            group.attrs["shape"] = (self.n, self.n)
            chunk = _CHUNK_BYTES // 4
            self.data = group.create_dataset("data", shape=(0,), maxshape=(None,), dtype=self.dtype,
                                             chunks=(chunk,))
            self.indices = group.create_dataset("indices", shape=(0,), maxshape=(None,),
                                                dtype=np.int32 if self.n < 2**31 else np.int64,
                                                chunks=(chunk,))
            self.indptr = group.create_dataset("indptr", shape=(self.n + 1,), dtype=np.int64)
            self._nnz = 0
            self._row = 0
            self.indptr[0] = 0
        else:
            raise ValueError(f"kind must be 'triu', 'dense' or 'sparse'; got {kind!r}.")
        h5file.attrs.update({
            "N": self.n,
            "kind": kind,
            "order": ORDER_TRIU if kind != "dense" else "full symmetric matrix",
            "dtype": self.dtype.name,
            "measure": "PearsonCorrelation",
            "software": f"connscale {__version__}",
            "complete": False,
        })
        for key, value in (attrs or {}).items():
            h5file.attrs[key] = "None" if value is None else value

    def write_triu(self, start: int, values: np.ndarray) -> None:
        """Write ``values`` at positions ``start:start+len(values)``."""
        self.dataset[start:start + values.shape[0]] = values

    def write_rows(self, row: int, values: np.ndarray) -> None:
        """Write dense rows ``row:row+len(values)``."""
        self.dataset[row:row + values.shape[0]] = values

    def append_csr_rows(self, counts: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
        """Append the next ``len(counts)`` rows of the CSR matrix."""
        nnz = int(data.shape[0])
        if nnz:
            self.data.resize((self._nnz + nnz,))
            self.indices.resize((self._nnz + nnz,))
            self.data[self._nnz:] = data
            self.indices[self._nnz:] = indices
        ends = self._nnz + np.cumsum(counts, dtype=np.int64)
        self.indptr[self._row + 1:self._row + 1 + len(counts)] = ends
        self._nnz += nnz
        self._row += len(counts)

    def close(self) -> None:
        """Flush the data, then mark the store complete (the last write)."""
        if self.kind == "sparse" and self._row != self.n:
            raise RuntimeError(f"Only {self._row} of {self.n} CSR rows were written.")
        self.file.flush()
        self.file.attrs["complete"] = True


def load_relmat(path: str | os.PathLike, *, mmap: bool = False):
    """Read a connectivity store written by connscale.

    Parameters
    ----------
    path : str or path
        A ``_relmat.h5`` file.
    mmap : bool, default=False
        Return the open ``h5py.Dataset`` (sliceable without reading it all)
        instead of an in-memory array; not for sparse stores.

    Returns
    -------
    relmat : ndarray, scipy.sparse.csr_array or h5py.Dataset
    attrs : dict
        The root attributes.

    Raises
    ------
    ValueError
        When the store is not flagged complete, or belongs to a file set
        whose publication did not finish
        (:class:`~connscale.io._publish.IncompleteOutputError`).
    """
    import h5py
    import scipy.sparse as sp

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"No connectivity store at {path}.")
    check_published(path)
    handle = h5py.File(path, "r")
    attrs = dict(handle.attrs)
    if not attrs.get("complete", False):
        handle.close()
        raise ValueError(f"{path} is incomplete (the run that wrote it did not finish).")
    kind = attrs["kind"]
    if mmap and kind != "sparse":
        return handle["relmat"], attrs
    try:
        if kind == "sparse":
            group = handle["relmat"]
            shape = tuple(int(x) for x in group.attrs["shape"])
            matrix = sp.csr_array((group["data"][()], group["indices"][()], group["indptr"][()]),
                                  shape=shape)
            return matrix, attrs
        return handle["relmat"][()], attrs
    finally:
        handle.close()
