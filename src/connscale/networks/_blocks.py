"""Voxel-block pieces of r1DL shared by every backend.

S (T x P) is split into column blocks (voxel blocks). This module holds

* column sources: where S comes from (an array, a memory-mapped ``.npy``, an
  HDF5 dataset), read one column block at a time, never modified;
* picklable block loaders (:class:`FileBlockLoader`, :class:`ArrayBlockLoader`)
  that a worker calls to build and keep its own block;
* the two block functions the engines run, both module-level numpy:
  :func:`block_candidates` (a block's exact top-r candidates of the deflated
  ``Sᵀu``, "map then concatenate") and :func:`block_matvec` (a block's part
  of ``Sv``, "map then sum");
* :func:`merge_candidates`, the driver's exact global top-r.

Standardisation (voxel columns zero-mean, unit-norm) is done per column in
float64 on load, so it is the same whatever the block boundaries.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from connscale._choices import R1DL_SELECTIONS
from connscale._validation import check_real

if TYPE_CHECKING:
    import h5py
    import torch

_SELECTIONS = R1DL_SELECTIONS


# ---------------------------------------------------------------------------
# Column sources
# ---------------------------------------------------------------------------


class ColumnSource:
    """Read-only access to column blocks of S (T x P).

    Parameters
    ----------
    data : ndarray, numpy.memmap or h5py.Dataset
        The 2-D matrix.
    kind : {'array', 'npy', 'h5'}
        Where it lives.
    path : str or None
        The file, for ``'npy'`` and ``'h5'``.
    dataset : str or None
        The HDF5 dataset name.
    """

    def __init__(
        self,
        data: np.ndarray | h5py.Dataset,
        kind: str,
        path: str | None = None,
        dataset: str | None = None,
    ) -> None:
        self.data = data
        self.kind = kind
        self.path = path
        self.dataset = dataset

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(int(n) for n in self.data.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data.dtype)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Columns ``start:stop`` as a (T, stop - start) array (a view or a copy)."""
        return self.data[:, start:stop]

    def loader(
        self, bounds: Sequence[int] | np.ndarray, *, standardize: bool, dtype: str
    ) -> FileBlockLoader | ArrayBlockLoader:
        """Return a picklable loader of block ``i`` = columns ``bounds[i]:bounds[i+1]``."""
        if self.kind in ("npy", "h5"):
            return FileBlockLoader(
                self.path, bounds, standardize=standardize, dtype=dtype, dataset=self.dataset
            )
        pieces = [
            np.asarray(self.data[:, bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)
        ]
        return ArrayBlockLoader(pieces, bounds, standardize=standardize, dtype=dtype)


def open_source(
    S: str | os.PathLike | npt.ArrayLike | h5py.Dataset | torch.Tensor, *, name: str = "S"
) -> ColumnSource:
    """Open S given as an array, a ``.npy`` path or an HDF5 path.

    HDF5 files are given as ``'file.h5'`` (one 2-D dataset, or one named
    ``'S'``/``'data'``) or ``'file.h5:dataset'``. The file is opened read-only
    and memory-mapped where possible.
    """
    if isinstance(S, (str, os.PathLike)):
        text = os.fspath(S)
        path, dataset = text, None
        lower = text.lower()
        for ext in (".h5", ".hdf5", ".hdf"):
            if ext + ":" in lower:
                cut = lower.index(ext + ":") + len(ext)
                path, dataset = text[:cut], text[cut + 1 :]
                break
        if not Path(path).exists():
            raise FileNotFoundError(f"'{name}' file not found: {path}")
        if path.lower().endswith(".npy"):
            try:
                data = np.load(path, mmap_mode="r")
            except (ValueError, OSError, EOFError) as exc:
                raise ValueError(
                    f"Cannot read '{name}' file {path} as a numeric .npy array: {exc}"
                ) from exc
            source = ColumnSource(data, "npy", path=os.path.abspath(path))
        elif path.lower().endswith((".h5", ".hdf5", ".hdf")):
            import h5py

            handle = h5py.File(path, "r")
            if dataset is None:
                names = [
                    k for k, v in handle.items() if isinstance(v, h5py.Dataset) and v.ndim == 2
                ]
                preferred = [k for k in ("S", "data") if k in names]
                if preferred:
                    dataset = preferred[0]
                elif len(names) == 1:
                    dataset = names[0]
                else:
                    raise ValueError(
                        f"'{name}': cannot tell which dataset of {path} is S; found 2-D "
                        f"datasets {names}. Give it as 'file.h5:dataset'."
                    )
            if dataset not in handle:
                raise ValueError(
                    f"'{name}': dataset {dataset!r} not in {path}; it holds {list(handle.keys())}."
                )
            source = ColumnSource(
                handle[dataset], "h5", path=os.path.abspath(path), dataset=dataset
            )
        else:
            raise ValueError(
                f"'{name}' must be an array or a path to a .npy or HDF5 (.h5) file; got {text!r}."
            )
    else:
        try:
            import h5py

            if isinstance(S, h5py.Dataset):
                source = ColumnSource(
                    S, "h5", path=os.path.abspath(S.file.filename), dataset=S.name
                )
                return _checked(source, name)
        except ImportError:  # pragma: no cover - h5py is a hard dependency
            pass
        try:
            import torch

            if isinstance(S, torch.Tensor):
                S = S.detach().cpu().numpy()
        except ImportError:  # pragma: no cover
            pass
        if sp.issparse(S):
            raise TypeError(
                f"'{name}' must be a dense array of shape (n_timepoints, n_voxels); "
                f"got a scipy.sparse {type(S).__name__}. Pass {name}.toarray()."
            )
        array = np.asarray(S)
        check_real(array, name)
        if array.dtype == object or not (np.issubdtype(array.dtype, np.number)):
            raise ValueError(f"'{name}' must be a numeric array; got dtype {array.dtype}.")
        if array.dtype not in (np.float32, np.float64):
            array = array.astype(np.float64)
        source = ColumnSource(array, "array")
    return _checked(source, name)


def _checked(source: ColumnSource, name: str) -> ColumnSource:
    dtype = np.dtype(source.data.dtype)
    if dtype.kind not in "biuf":
        raise ValueError(
            f"'{name}' must hold real numbers; got dtype {dtype}"
            + (
                " (complex values: pass the real part or magnitude explicitly)."
                if dtype.kind == "c"
                else "."
            )
        )
    if len(source.data.shape) != 2:
        raise ValueError(
            f"'{name}' must be a 2-D matrix of shape (n_timepoints, n_voxels); got "
            f"shape {tuple(source.data.shape)}."
        )
    n_timepoints, n_voxels = source.shape
    if n_timepoints < 2 or n_voxels < 1:
        raise ValueError(
            f"'{name}' must have at least 2 time points (rows) and 1 voxel (column); "
            f"got shape {source.shape}."
        )
    if source.kind == "array" and not np.isfinite(source.data).all():
        raise ValueError(f"'{name}' contains NaN or infinite values; clean them first.")
    return source


def block_bounds(n_voxels: int, block_size: int) -> np.ndarray:
    """Column boundaries ``[0, b, 2b, ..., P]`` of blocks of ``block_size``."""
    block_size = max(1, min(int(block_size), n_voxels))
    return np.unique(np.r_[np.arange(0, n_voxels, block_size), n_voxels]).astype(np.int64)


# ---------------------------------------------------------------------------
# Standardisation and block loading
# ---------------------------------------------------------------------------


def standardize_np(block: np.ndarray, dtype: npt.DTypeLike) -> np.ndarray:
    """Columns zero-mean and unit-norm, computed in float64 (constant -> 0)."""
    x = np.array(block, dtype=np.float64)
    x -= x.mean(axis=0)
    norm = np.sqrt(np.einsum("ij,ij->j", x, x))
    norm[norm == 0] = 1.0
    x /= norm
    return x.astype(dtype, copy=False)


@dataclass
class Block:
    """One voxel block kept by a worker: columns ``start:stop`` of S.

    Stored transposed (voxels x time, C-contiguous) so both products read
    rows.
    """

    start: int
    data_t: np.ndarray

    @property
    def stop(self) -> int:
        return self.start + self.data_t.shape[0]


def _make_block(columns: np.ndarray, start: int, standardize: bool, dtype: str) -> Block:
    if standardize:
        columns = standardize_np(columns, dtype)
    if not np.isfinite(columns).all():
        raise ValueError(f"S contains NaN or infinite values in columns starting at {start}.")
    return Block(start, np.ascontiguousarray(np.asarray(columns, dtype=dtype).T))


class FileBlockLoader:
    """Picklable loader: block ``i`` read from a shared ``.npy`` or HDF5 file.

    Each worker opens the file itself (memory-mapped for ``.npy``), so the
    driver never ships S.
    """

    def __init__(
        self,
        path: str,
        bounds: Sequence[int] | np.ndarray,
        *,
        standardize: bool,
        dtype: str,
        dataset: str | None = None,
    ) -> None:
        self.path = path
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.standardize = standardize
        self.dtype = dtype
        self.dataset = dataset

    def __call__(self, i: int) -> Block:
        start, stop = int(self.bounds[i]), int(self.bounds[i + 1])
        if self.dataset is None:
            columns = np.load(self.path, mmap_mode="r")[:, start:stop]
        else:
            import h5py

            with h5py.File(self.path, "r") as handle:
                columns = handle[self.dataset][:, start:stop]
        return _make_block(columns, start, self.standardize, self.dtype)


class ArrayBlockLoader:
    """Picklable loader over in-memory column pieces.

    The pieces travel with the load tasks once (never per iteration); for S
    larger than the driver's memory give a path on a shared file system.
    """

    def __init__(
        self,
        pieces: list[np.ndarray],
        bounds: Sequence[int] | np.ndarray,
        *,
        standardize: bool,
        dtype: str,
    ) -> None:
        self.pieces = pieces
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.standardize = standardize
        self.dtype = dtype

    def __call__(self, i: int) -> Block:
        return _make_block(self.pieces[i], int(self.bounds[i]), self.standardize, self.dtype)


# ---------------------------------------------------------------------------
# Block functions (run on the workers)
# ---------------------------------------------------------------------------


def selection_scores(values: np.ndarray, selection: str) -> np.ndarray:
    """Return the quantity whose r largest entries are kept."""
    return np.abs(values) if selection == "magnitude" else values


def block_candidates(
    block: Block, u: np.ndarray, corr_idx: np.ndarray, corr_val: np.ndarray, r: int, selection: str
) -> tuple[np.ndarray, np.ndarray]:
    """Return a block's top-r candidates of ``Sᵀu - Vᵀ(Uᵀu)``.

    Parameters
    ----------
    block : Block
    u : ndarray of shape (T,)
    corr_idx, corr_val : ndarray
        The deflation term ``Vᵀ(Uᵀu)`` as sorted global voxel indices and
        values (only its non-zero entries).
    r : int
        Number of candidates wanted (fewer when the block is narrower).
    selection : {'magnitude', 'signed'}

    Returns
    -------
    idx : ndarray of int64
        Global voxel indices.
    values : ndarray
        The deflated ``Sᵀu`` at those voxels.
    """
    y = block.data_t @ np.asarray(u, dtype=block.data_t.dtype)
    if corr_idx.size:
        lo, hi = np.searchsorted(corr_idx, [block.start, block.stop])
        if hi > lo:
            y[corr_idx[lo:hi] - block.start] -= corr_val[lo:hi].astype(y.dtype)
    k = min(int(r), y.size)
    score = selection_scores(y, selection)
    if k < y.size:
        local = np.argpartition(-score, k - 1)[:k]
    else:
        local = np.arange(y.size)
    return local.astype(np.int64) + block.start, y[local]


def block_matvec(block: Block, v_idx: np.ndarray, v_val: np.ndarray) -> np.ndarray:
    """Return a block's part of ``Sv`` for a sparse v (sorted global indices), float64."""
    lo, hi = np.searchsorted(v_idx, [block.start, block.stop])
    if hi <= lo:
        return np.zeros(block.data_t.shape[1], dtype=np.float64)
    rows = block.data_t[v_idx[lo:hi] - block.start]
    return (v_val[lo:hi].astype(rows.dtype) @ rows).astype(np.float64)


def merge_candidates(
    idx: np.ndarray, values: np.ndarray, r: int, selection: str
) -> tuple[np.ndarray, np.ndarray]:
    """Exact global top-r from the concatenated per-block candidates.

    Returns indices sorted ascending and their values. With ``'signed'`` the
    kept non-positive values are set to 0.
    """
    score = selection_scores(values, selection)
    if idx.size > r:
        keep = np.argpartition(-score, r - 1)[:r]
        idx, values = idx[keep], values[keep]
    order = np.argsort(idx, kind="stable")
    idx, values = idx[order], values[order]
    if selection == "signed":
        values = np.where(values > 0, values, 0).astype(values.dtype)
    return idx, values
