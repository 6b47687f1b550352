"""Block operators: the two passes over S that r1DL needs, per backend.

The streamed and engine operators answer two questions about the residual's
source S (T x P), never modifying S (:class:`connscale.networks._update.BlockUpdater`
drives them):

* ``top_r(u, deflation, r, selection)``: the exact global top-r of
  ``y = Sᵀu - Vᵀ(Uᵀu)`` as (sorted voxel indices, values);
* ``matvec(idx, values)``: ``Sv`` for that sparse v, a (T,) vector.

The deflation term arrives as ``(voxel indices, weights)`` with repeated
indices (one entry per stored loading of a previous atom, weighted by
``Uᵀu``), O(K·r) in size.

:class:`ResidentOperator` keeps Sᵀ (P x T, standardised) on the device and
hands the whole update to :class:`connscale.networks._update.ResidentUpdater`
(fused GEMV and deflation, radix top-r, gather of the r chosen rows).
:class:`StreamedOperator` streams column blocks from a memory-mapped file or
host array, overlapping the next block's host-to-device copy with compute on
CUDA. :class:`EngineOperator` runs the block functions of
:mod:`connscale.networks._blocks` through a :class:`connscale.engines.Engine`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import torch

from connscale._compute.device import numpy_dtype
from connscale._compute.transfer import HostToDevice
from connscale.networks import _blocks
from connscale.networks._select import top_r_sorted
from connscale.networks._update import BlockUpdater, ResidentUpdater

if TYPE_CHECKING:
    from connscale.engines.base import Engine


def standardize_torch(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Columns of a (T, w) block zero-mean and unit-norm, in float64 (constant -> 0)."""
    x = x.to(torch.float64)
    x = x - x.mean(dim=0)
    norm = torch.linalg.vector_norm(x, dim=0)
    norm = torch.where(norm == 0, torch.ones_like(norm), norm)
    return (x / norm).to(dtype)


def _apply_deflation(y: torch.Tensor, deflation: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    if deflation is not None:
        index, weight = deflation
        y.index_add_(0, index, weight, alpha=-1)


def _prepare(
    columns: np.ndarray, device: torch.device, dtype: torch.dtype, standardize: bool
) -> torch.Tensor:
    columns = np.ascontiguousarray(columns)
    if not columns.flags.writeable:  # a read-only memory map: never hand torch a view
        columns = columns.copy()
    block = torch.from_numpy(columns).to(device)
    if standardize:
        return standardize_torch(block, dtype)
    return block.to(dtype)


def _check_finite(block: torch.Tensor, start: int) -> None:
    if not bool(torch.isfinite(block).all()):
        raise ValueError(
            f"S contains NaN or infinite values in the voxel block starting at column "
            f"{start}; clean them first."
        )


class ResidentOperator:
    """Sᵀ (P x T, standardised) built block by block and kept where the update reads it.

    It is kept in device memory, or (``pinned_host=True``, CUDA with
    Triton) in pinned host memory, streamed to the GPU by the copy engine
    each pass with no staging copies (S larger than the GPU, smaller than
    host memory).
    """

    def __init__(
        self,
        source: _blocks.ColumnSource,
        *,
        device: torch.device,
        dtype: torch.dtype,
        standardize: bool,
        block_size: int,
        pinned_host: bool = False,
        verbose: int = 0,
    ) -> None:
        n_timepoints, n_voxels = source.shape
        self.shape = (n_timepoints, n_voxels)
        self.device, self.dtype = device, dtype
        self.mode = "host" if pinned_host else "resident"
        # On CUDA, rows padded to 16 bytes so the GEMV kernel's loads vectorise.
        width = n_timepoints
        if device.type == "cuda":
            per_16 = max(1, 16 // torch.tensor([], dtype=dtype).element_size())
            width = -(-n_timepoints // per_16) * per_16
        self._registered = None
        if pinned_host:
            storage = self._page_locked((n_voxels, width), dtype)
        else:
            storage = torch.empty((n_voxels, width), dtype=dtype, device=device)
        self.St = storage[:, :n_timepoints]
        bounds = _blocks.block_bounds(n_voxels, block_size)
        for a, b in _progress(bounds, "loading S", verbose):
            block = _prepare(source.read(int(a), int(b)), device, dtype, standardize)
            if source.kind != "array":
                _check_finite(block, int(a))
            self.St[a:b].copy_(block.T)
        self.n_blocks = len(bounds) - 1

    def _page_locked(self, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
        """Return a host array of exactly ``shape``, page-locked by cudaHostRegister.

        The pinned allocator of torch rounds sizes up to a power of two: up to
        twice the memory for Sᵀ.
        """
        array = np.empty(shape, dtype=numpy_dtype(dtype))
        status = int(torch.cuda.cudart().cudaHostRegister(array.ctypes.data, array.nbytes, 0))
        if status != 0:  # pragma: no cover - depends on the machine
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        self._registered = array
        return torch.from_numpy(array)

    def updater(self, *, n_atoms: int, r: int, selection: str) -> ResidentUpdater:
        """Return the fused resident update (CUDA graphs and Triton kernels on CUDA)."""
        return ResidentUpdater(
            self.St, n_atoms=n_atoms, r=r, selection=selection, device=self.device
        )

    def close(self) -> None:
        self.St = None
        if self._registered is not None:
            torch.cuda.synchronize(self.device)  # no copy may still read it
            torch.cuda.cudart().cudaHostUnregister(self._registered.ctypes.data)
            self._registered = None


def _progress(bounds: np.ndarray, desc: str, verbose: int) -> Iterable[tuple[int, int]]:
    """(start, stop) of each column block, with a progress bar when verbose."""
    from tqdm.auto import tqdm

    pairs = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
    return tqdm(pairs, desc=desc, unit="block", disable=not verbose or len(pairs) < 2)


def column_stats(
    source: _blocks.ColumnSource, bounds: np.ndarray, device: torch.device, verbose: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the per-voxel mean and 1 / centred norm (0 for constant voxels), float64.

    Both come from one pass over S in column blocks.
    """
    n_voxels = source.shape[1]
    mean = torch.empty(n_voxels, dtype=torch.float64, device=device)
    inv_norm = torch.empty(n_voxels, dtype=torch.float64, device=device)
    for a, b in _progress(bounds, "voxel statistics", verbose):
        x = torch.from_numpy(np.array(source.read(a, b), dtype=np.float64)).to(device)
        _check_finite(x, a)
        m = x.mean(dim=0)
        x -= m
        norm = (x * x).sum(dim=0).sqrt_()
        mean[a:b] = m
        inv_norm[a:b] = torch.where(norm == 0, torch.zeros_like(norm), 1.0 / norm)
        del x, m, norm  # before the next block is read: one block's temporaries at a time
    return mean, inv_norm


class StreamedOperator:
    """Column blocks streamed from host memory or a memory-mapped file.

    ``top_r`` reads all of S in column blocks; ``matvec`` reads only the r
    chosen columns (gathered by rows from an array or ``.npy``, in chunks as
    wide as a block), so an update costs about 1.07 reads of S. Reads are
    split over threads by rows. Standardisation uses per-voxel statistics
    computed once (float64) and is applied in place to preallocated
    buffers, so a pass allocates nothing. On CUDA the next block is read
    into a pinned staging buffer and copied on a side stream while the
    current block is computed (double buffering); on the CPU blocks are read
    and computed in turn. Memory: two blocks (pinned and on the device).
    """

    mode = "streamed"

    def __init__(
        self,
        source: _blocks.ColumnSource,
        *,
        device: torch.device,
        dtype: torch.dtype,
        standardize: bool,
        block_size: int,
        verbose: int = 0,
    ) -> None:
        n_timepoints, n_voxels = source.shape
        self.source = source
        self.shape = (n_timepoints, n_voxels)
        self.device, self.dtype = device, dtype
        self.standardize = standardize
        self.bounds = _blocks.block_bounds(n_voxels, block_size)
        self.n_blocks = len(self.bounds) - 1
        width = int(np.diff(self.bounds).max())
        self._width = width
        n_elements = n_timepoints * width
        self._checked = source.kind == "array"
        if standardize:
            mean, inv_norm = column_stats(source, self.bounds, device, verbose)
            self._mean, self._inv = mean.to(dtype), inv_norm.to(dtype)
            self._checked = True
        # Reading the memory map is the slow step (page faults, one core
        # ~5 GB/s): split it over threads by rows.
        n_threads = min(16, os.cpu_count() or 1) if source.kind in ("npy", "array") else 1
        self._row_chunks = np.array_split(np.arange(n_timepoints), n_threads)
        self._executor = (
            ThreadPoolExecutor(n_threads, thread_name_prefix="r1dl-read") if n_threads > 1 else None
        )
        self._y = torch.empty(n_voxels, dtype=dtype, device=device)
        self._bounds_t = torch.as_tensor(self.bounds, device=device)
        self._work = torch.empty(n_elements, dtype=dtype, device=device)
        if device.type == "cuda":
            host_dtype = torch.float64 if source.dtype == np.float64 else torch.float32
            self._copier = HostToDevice(device, n_elements, host_dtype, staging=True)

    # -- block iteration ---------------------------------------------------
    # A block is "columns" of S: a range a:b (the full pass) or chosen voxel
    # indices (the gathered pass); ``cols`` is a slice or an index tensor on
    # the device, ``fill(dst)`` writes the raw (T, width) columns into dst.
    def _range_fill(self, a: int, b: int) -> Callable[[np.ndarray], None]:
        data = self.source.data

        def write(rows: slice, out: np.ndarray) -> None:
            np.copyto(out, data[rows, a:b], casting="unsafe")

        return lambda dst: self._copy_rows(dst, write)

    def _gather_fill(self, index: np.ndarray) -> Callable[[np.ndarray], None]:
        data = self.source.data

        def write(rows: slice, out: np.ndarray) -> None:
            if out.dtype == data.dtype:  # mode='clip' does not buffer; indices are valid
                np.take(data[rows], index, axis=1, out=out, mode="clip")
            else:
                np.copyto(out, np.take(data[rows], index, axis=1), casting="unsafe")

        return lambda dst: self._copy_rows(dst, write)

    def _copy_rows(self, dst: np.ndarray, write: Callable[[slice, np.ndarray], None]) -> None:
        """Call ``write(rows, dst[rows])`` over row chunks, split over threads.

        The GIL is released by numpy while copying; reading a memory map is
        the slow step.
        """

        def copy(rows: np.ndarray) -> None:
            if rows.size:
                part = slice(int(rows[0]), int(rows[-1]) + 1)
                write(part, dst[part])

        if self._executor is None:
            copy(np.arange(self.shape[0]))
        else:
            list(self._executor.map(copy, self._row_chunks))

    def _finish(self, raw: torch.Tensor, cols: slice | torch.Tensor) -> torch.Tensor:
        """Standardise (in place, into a work buffer when the dtype differs)."""
        if raw.dtype == self.dtype:
            block = raw
        else:
            block = self._work[: raw.numel()].view(raw.shape)
            block.copy_(raw)
        if self.standardize:
            block.sub_(self._mean[cols]).mul_(self._inv[cols])
        elif not self._checked:
            _check_finite(block, cols.start if isinstance(cols, slice) else 0)
        return block

    def _iterate(
        self, pieces: Sequence[tuple[slice | torch.Tensor, int, Callable[[np.ndarray], None]]]
    ) -> Iterator[tuple[slice | torch.Tensor, torch.Tensor]]:
        """Yield (cols, block) for pieces = [(cols, width, fill)].

        On CUDA the next piece's read and copy overlap this one's compute.
        """
        if self.device.type == "cuda":
            yield from self._iterate_cuda(pieces)
            return
        n_timepoints = self.shape[0]
        for cols, width, fill in pieces:
            block = self._work[: n_timepoints * width].view(n_timepoints, width)
            fill(block.numpy())
            yield cols, self._finish(block, cols)

    def _iterate_cuda(
        self, pieces: Sequence[tuple[slice | torch.Tensor, int, Callable[[np.ndarray], None]]]
    ) -> Iterator[tuple[slice | torch.Tensor, torch.Tensor]]:
        n_timepoints = self.shape[0]
        blocks = self._copier.blocks([((n_timepoints, width), fill) for _, width, fill in pieces])
        for i, raw in enumerate(blocks):  # to its end: the last block's release is recorded
            cols = pieces[i][0]
            yield cols, self._finish(raw, cols)

    # -- the two passes ------------------------------------------------------
    def top_r(
        self,
        u: torch.Tensor,
        deflation: tuple[torch.Tensor, torch.Tensor] | None,
        r: int,
        selection: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Full pass over S in column blocks: y = Sᵀu, deflated, exact top-r."""
        y = self._y
        pieces = [
            (slice(a, b), b - a, self._range_fill(a, b))
            for a, b in zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist())
        ]
        for cols, block in self._iterate(pieces):
            torch.mv(block.T, u, out=y[cols])
        self._checked = True
        y = y.clone() if deflation is not None else y
        _apply_deflation(y, deflation)
        return top_r_sorted(y, r, selection)

    def matvec(self, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Return Sv, reading only the r chosen columns.

        The columns are gathered from an array or ``.npy`` in chunks of a
        block's width; HDF5 sources are read in full column blocks, as fancy
        column reads there are slow.
        """
        acc = torch.zeros(self.shape[0], dtype=torch.float64, device=self.device)
        if self.source.kind in ("npy", "array"):
            index = idx.cpu().numpy()
            width = self._width
            pieces = [
                (
                    idx[lo : lo + width],
                    min(width, index.size - lo),
                    self._gather_fill(index[lo : lo + width]),
                )
                for lo in range(0, index.size, width)
            ]
            for (_cols, block), lo in zip(self._iterate(pieces), range(0, index.size, width)):
                acc += torch.mv(block, values[lo : lo + block.shape[1]]).to(torch.float64)
            return acc.to(self.dtype)
        cuts = torch.searchsorted(idx, self._bounds_t).tolist()
        pieces = [
            (slice(a, b), b - a, self._range_fill(a, b))
            for a, b in zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist())
        ]
        for i, (cols, block) in enumerate(self._iterate(pieces)):
            lo, hi = cuts[i], cuts[i + 1]
            if hi > lo:
                chosen = block.index_select(1, idx[lo:hi] - cols.start)
                acc += torch.mv(chosen, values[lo:hi]).to(torch.float64)
        return acc.to(self.dtype)

    def updater(self, *, n_atoms: int, r: int, selection: str) -> BlockUpdater:
        return BlockUpdater(self, n_atoms=n_atoms, r=r, selection=selection)

    def close(self) -> None:
        self._y = None
        self._work = None
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=True)
            self._executor = None


class EngineOperator:
    """Voxel blocks loaded and kept by an engine's workers.

    The driver broadcasts u and the sparse deflation term, gathers each
    block's top-r candidates and merges them exactly; Sv is a tree sum of
    the blocks' parts. Driver vectors are CPU tensors.
    """

    mode = "engine"

    def __init__(
        self,
        engine: Engine,
        loader: _blocks.FileBlockLoader | _blocks.ArrayBlockLoader,
        shape: Sequence[int],
        n_blocks: int,
        *,
        dtype: torch.dtype,
    ) -> None:
        self.engine = engine
        self.shape = tuple(shape)
        self.device = torch.device("cpu")
        self.dtype = dtype
        self.n_blocks = n_blocks
        self.blocks = engine.load_blocks(loader, n_blocks)

    def top_r(
        self,
        u: torch.Tensor,
        deflation: tuple[torch.Tensor, torch.Tensor] | None,
        r: int,
        selection: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n_voxels = self.shape[1]
        if deflation is None:
            corr_idx = np.empty(0, dtype=np.int64)
            corr_val = np.empty(0, dtype=np.float64)
        else:
            index, weight = deflation
            dense = torch.zeros(n_voxels, dtype=torch.float64)
            dense.index_add_(0, index, weight.to(torch.float64))
            nz = torch.nonzero(dense).ravel()
            corr_idx, corr_val = nz.numpy(), dense[nz].numpy()
        u_np = u.detach().cpu().numpy()
        parts = self.engine.map_blocks(
            self.blocks, _blocks.block_candidates, u_np, corr_idx, corr_val, int(r), selection
        )
        idx = np.concatenate([p[0] for p in parts])
        values = np.concatenate([p[1] for p in parts])
        idx, values = _blocks.merge_candidates(idx, values, int(r), selection)
        return (
            torch.from_numpy(idx),
            torch.from_numpy(np.ascontiguousarray(values, dtype=numpy_dtype(self.dtype))),
        )

    def matvec(self, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        su = self.engine.sum_blocks(self.blocks, _blocks.block_matvec, idx.numpy(), values.numpy())
        return torch.as_tensor(np.asarray(su), dtype=self.dtype)

    def updater(self, *, n_atoms: int, r: int, selection: str) -> BlockUpdater:
        return BlockUpdater(self, n_atoms=n_atoms, r=r, selection=selection)

    def close(self) -> None:
        if self.blocks is not None:
            self.engine.release(self.blocks)
            self.blocks = None
