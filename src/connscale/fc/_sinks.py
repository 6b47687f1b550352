"""Where a correlation result goes: the one sink protocol of fc.

Every windowed-correlation front-end (:func:`connscale.correlation`,
:func:`connscale.dynamic_correlation`, :func:`connscale.pairwise_dfc`)
computes pieces of its result on the device and hands them to a
:class:`Sink` through one :class:`Sender`, which copies them to the host
with the shared double-buffered pinned copier
(:class:`connscale._compute.transfer.DeviceToHost`). The destinations:

* :class:`ArraySink`: host memory - a new array (pinned on CUDA, so copies
  go straight into it) or the caller's array or tensor;
* :class:`SparseSink`: a ``scipy.sparse.csr_array`` assembled from the
  kept entries of each piece;
* :class:`RelmatFileSink`: an HDF5 relmat store written through
  :class:`connscale.io.hdf5.RelmatWriter` (locked, free space checked,
  renamed into place only once it reads back complete);
* :class:`DeviceSink`: left on the device, as a tensor;
* dynamic's window sinks, whose targets are window numbers:
  :class:`connscale.fc.dynamic_result.MemoryBackend` (host arrays, or the
  caller's pinned ``host_buffer``) and :class:`WindowFileSink` (a ``_dfc.h5``
  store through :class:`connscale.io.dfc.HDF5Backend`, window by window,
  locked, resumable, published when complete).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from connscale._compute.memory import planner_for
from connscale._compute.transfer import DeviceToHost
from connscale.fc._triton_kernels import block_triu_size, extract_triu
from connscale.fc.dynamic_result import DynamicConnectivity, load_dynamic
from connscale.fc.sparse import csr_from_parts
from connscale.fc.triu import n_pairs
from connscale.io.atomic import atomic_path, check_free_space, fsync_path
from connscale.io.dfc import HDF5Backend, partial_path
from connscale.io.h5 import close_h5, create_h5, flush_h5, h5_errors
from connscale.io.hdf5 import RelmatWriter
from connscale.io.lock import OutputLock
from connscale.io.publish import IncompleteOutputError

logger = logging.getLogger(__name__)


class Sink(Protocol):
    """What a result is written into.

    ``in_memory`` tells the planner whether the result is counted in host
    memory. :meth:`destination` gives a host tensor to copy a piece straight
    into (pinned for an asynchronous copy), or None: the piece then arrives
    through :meth:`write` once copied. Thresholded pieces arrive through
    :meth:`append_sparse`. :meth:`finish` returns the result (after which the
    sink holds nothing), :meth:`abort` releases what the sink holds after a
    failure.
    """

    in_memory: bool

    def destination(self, target, size: int) -> torch.Tensor | None: ...

    def write(self, target, values) -> None: ...

    def append_sparse(
        self, counts: np.ndarray, indices: np.ndarray, values: np.ndarray
    ) -> None: ...

    def finish(self): ...

    def abort(self) -> None: ...


@dataclass(frozen=True)
class Rows:
    """Rows ``start .. start + n_rows`` of an (N, ``n_cols``) matrix."""

    start: int
    n_rows: int
    n_cols: int

    @property
    def flat_start(self) -> int:
        return self.start * self.n_cols


@dataclass(frozen=True)
class Triangle:
    """Edges from ``start`` on of a strictly-upper triangle vector."""

    start: int

    @property
    def flat_start(self) -> int:
        return self.start


@dataclass(frozen=True)
class Region:
    """The block ``index`` (a tuple of slices) of an N-d result."""

    index: tuple


class _DenseSink:
    """A dense result (``self.result``) filled in place, region by region."""

    def write(self, target, values):
        self.result[target.index] = values

    def append_sparse(self, counts, indices, values):
        raise TypeError(f"A {type(self).__name__} holds dense values; use a SparseSink.")

    def abort(self):
        pass

    def finish(self):
        return self.result


class ArraySink(_DenseSink):
    """Result in host memory: a new (pinned on CUDA) array or the caller's.

    Parameters
    ----------
    out : ndarray, CPU torch.Tensor or None
        The caller's array (filled in place), or None to allocate one, after
        checking its size against the host budget.
    shape : tuple of int
    np_dtype : numpy.dtype
    dev : torch.device
        The compute device (a new array is pinned for CUDA).
    memory_limit : MemoryPlanner, int, str or None
        The call's planner (:func:`connscale._compute.planner_for`), or the
        user's limit.
    what : str
        What the result is, for the message when it does not fit.
    hint : str
        What to do when it does not fit, for the message.
    check : bool, default=True
        Check a new array's size against the host budget (False when the
        caller's planner has counted it).
    """

    in_memory = True

    def __init__(
        self,
        out,
        shape,
        np_dtype,
        dev,
        memory_limit,
        *,
        what: str,
        hint: str = "Pass out='result_relmat.h5' to stream it to disk.",
        check: bool = True,
    ) -> None:
        shape = tuple(shape)
        nbytes = int(np.prod(shape)) * np_dtype.itemsize
        if out is None:
            if check:
                planner_for(dev, memory_limit).require(nbytes, what, on="host", hint=hint)
            self.tensor = torch.empty(
                shape, dtype=torch_dtype(np_dtype), pin_memory=dev.type == "cuda"
            )
            self.result = self.tensor.numpy()
        else:
            if isinstance(out, np.ndarray):
                self.tensor, self.result = torch.from_numpy(out), out
            elif isinstance(out, torch.Tensor) and out.device.type == "cpu":
                self.tensor, self.result = out, out
            else:
                raise ValueError(
                    "'out' must be a path, a numpy array, a CPU torch tensor or None; "
                    f"got {type(out).__name__}."
                )
            if tuple(self.tensor.shape) != shape or self.tensor.dtype != torch_dtype(np_dtype):
                raise ValueError(
                    f"'out' must have shape {shape} and dtype {np_dtype}; got shape "
                    f"{tuple(self.tensor.shape)} and dtype {self.tensor.dtype}."
                )
            if not self.tensor.is_contiguous():
                raise ValueError("'out' must be C-contiguous.")
        self.flat = self.tensor.view(-1)

    def write(self, target, values):
        # A torch copy (threaded) rather than numpy's one-thread assignment: a
        # new result's pages are first touched here.
        self.tensor[target.index].copy_(torch.as_tensor(values))

    def destination(self, target, size):
        if isinstance(target, Region):
            return None  # not contiguous: written from staging
        first = target.flat_start
        return self.flat[first : first + size]


class DeviceSink(_DenseSink):
    """Result left on the compute device, as a tensor of ``shape``."""

    in_memory = False
    on_device = True

    def __init__(self, shape, dtype: torch.dtype, dev: torch.device) -> None:
        self.result = torch.empty(shape, dtype=dtype, device=dev)

    def destination(self, target, size):
        return None


class SparseSink:
    """CSR matrix of the upper triangle, assembled from per-round pieces.

    ``meter`` counts the pieces, and the one array that :meth:`finish`
    builds beside them, against the plan's result budget.
    """

    in_memory = True

    def __init__(self, n):
        self.n = n
        self.counts, self.indices, self.values = [], [], []
        self.meter = None

    def destination(self, target, size):
        return None

    def write(self, target, values):
        raise TypeError("A SparseSink takes thresholded pieces (append_sparse).")

    def append_sparse(self, counts, indices, values):
        if self.meter is not None:
            widest = max(indices.itemsize, values.itemsize)
            self.meter.add(
                counts.nbytes
                + indices.nbytes
                + values.nbytes
                + widest * values.size
                + 8 * counts.size
            )
        self.counts.append(counts)
        self.indices.append(indices)
        self.values.append(values)

    def abort(self):
        pass

    def finish(self):
        return csr_from_parts(self.values, self.indices, self.counts, self.n)


class RelmatFileSink:
    """Result streamed into a chunked HDF5 relmat store, renamed into place at the end.

    The run holds the output's lock throughout (a second run fails naming its
    pid), first removes what killed runs left (hidden ``.<name>.*.tmp``:
    no live run owns them while the lock is held), checks the free space a
    dense or triangle store needs (``nbytes``), and writes through
    :mod:`connscale.io.h5` so that a failed write raises at once; the store
    is renamed only after it closed without error and its ``complete`` flag
    reads back.
    """

    in_memory = False

    def __init__(self, path, kind, n, np_dtype, nbytes, extra):
        if path.suffix not in (".h5", ".hdf5"):
            raise ValueError(f"'out' must name an HDF5 file ending in .h5; got {path}.")
        if path.is_dir():
            raise ValueError(f"'out' must name an HDF5 file; {path} is a folder.")
        self.path = path
        self.file = None
        self._atomic = None
        self.lock = OutputLock(path).acquire()
        try:
            _remove_stale_temporaries(path)
            if nbytes:
                check_free_space(path.parent, nbytes, what=path.name)
            self._atomic = atomic_path(path)
            self.tmp = self._atomic.__enter__()
            self.file = create_h5(self.tmp, overwrite_own=True)
            with h5_errors(path):
                self.writer = RelmatWriter(self.file, n, kind, np_dtype, extra)
            flush_h5(self.file, path)
        except BaseException:
            self.abort()
            raise

    def destination(self, target, size):
        return None

    def write(self, target, values):
        with h5_errors(self.path):
            if isinstance(target, Triangle):
                self.writer.write_triu(target.start, values)
            else:
                self.writer.write_rows(target.start, values.reshape(target.n_rows, target.n_cols))

    def append_sparse(self, counts, indices, values):
        with h5_errors(self.path):
            self.writer.append_csr_rows(counts, indices, values)

    def abort(self):
        try:
            if self.file is not None and self.file.id.valid:
                with contextlib.suppress(OSError, RuntimeError):
                    self.file.close()
            if self._atomic is not None:
                self._atomic.__exit__(RuntimeError, RuntimeError("aborted"), None)
                self._atomic = None
        finally:
            self.lock.release()

    def finish(self):
        try:
            flush_h5(self.file, self.path)  # the data, before the flag that says complete
            with h5_errors(self.path):
                self.writer.close()
            close_h5(self.file, self.path)
            import h5py

            with h5py.File(self.tmp, "r") as check:
                if not check.attrs.get("complete", False):
                    raise OSError(errno.EIO, f"{self.tmp} did not read back complete.")
            self._atomic.__exit__(None, None, None)
            self._atomic = None
        except BaseException:
            self.abort()
            raise
        self.lock.release()
        return self.path


class Sender:
    """Moves device pieces into a :class:`Sink` through one :class:`DeviceToHost`.

    On CUDA a piece is copied to the host on the copy stream (straight into
    the sink's pinned destination when it has one, else into pinned staging
    and then :meth:`Sink.write`) while the compute stream runs the next
    piece; pieces taken from a reused device buffer are first put into one of
    the copier's two scratch buffers. On the CPU everything is synchronous.
    A :class:`DeviceSink` is written on the device, without copies.

    Parameters
    ----------
    sink : Sink
    dev : torch.device
    max_elements : int, default=0
        Size of the scratch buffers (for :meth:`send_block`, :meth:`send_triu`).
    keep_staging : bool, default=False
        As :class:`DeviceToHost` (calls made often with small results).
    """

    def __init__(self, sink, dev, max_elements: int = 0, *, keep_staging: bool = False):
        self.sink = sink
        self.max_elements = max_elements
        self.on_device = getattr(sink, "on_device", False)
        self.copier = (
            None if self.on_device else DeviceToHost(dev, depth=2, keep_staging=keep_staging)
        )
        self.cuda = self.copier is not None and self.copier.cuda

    def send(self, source, target):
        """Queue ``source`` (a device tensor) for ``target`` of the sink."""
        if self.on_device:
            self.sink.write(target, source)
            return
        destination = self.sink.destination(target, source.numel())
        callback = (
            None if destination is not None else (lambda arrays: self.sink.write(target, arrays[0]))
        )
        self.copier.submit([source], callback, [destination])

    def send_block(self, flat, target):
        """Queue ``flat``, a view of a device buffer the next piece reuses."""
        if self.cuda:
            buffer = self.copier.scratch(self.max_elements, flat.dtype)[: flat.numel()]
            buffer.copy_(flat)
            flat = buffer
        self.send(flat, target)

    def send_triu(self, block, target):
        """Queue the strictly-upper triangle of ``block``, extracted on the device.

        ``block`` holds rows of the matrix from its diagonal on.
        """
        size = block_triu_size(*block.shape)
        if not self.cuda and self.sink.in_memory:
            extract_triu(block, self.sink.destination(target, size))
            return
        buffer = self.copier.scratch(self.max_elements, block.dtype)
        extract_triu(block, buffer)
        self.send(buffer[:size], target)

    def flush(self):
        """Wait for every queued copy and its write."""
        if self.copier is not None:
            self.copier.flush()


class WindowFileSink:
    """Windows written one by one into a ``_dfc.h5`` store, resumably.

    The window sink of ``dynamic_correlation(..., out=path)``: holds the
    output's lock from creation to :meth:`finish` or :meth:`abort` (a second
    run fails naming the first's pid); reuses a finished file of the same
    run (:attr:`reused`); else resumes this run's partial file or starts a
    new one, after checking the free space the windows still to write need.
    Windows go through :class:`connscale.io.dfc.HDF5Backend` (each flagged
    done only after its data are flushed); :meth:`finish` renames the
    partial file into place once every window reads back done.
    """

    in_memory = False

    def __init__(self, final_path: Path, meta: dict, fingerprint: str, width: int | None) -> None:
        self.final_path = final_path
        self.tmp = partial_path(final_path)
        self.backend = None
        # One writer per output: a second run fails here, naming the first's pid.
        self.lock = OutputLock(final_path).acquire()
        try:
            self.reused = _reuse_finished(final_path, meta, fingerprint)
            if self.reused is None:
                self.backend = _open_partial(self.tmp, meta, fingerprint, width)
        except BaseException:
            self.lock.release()
            raise
        if self.reused is not None:
            self.lock.release()
            return
        k = meta["n_windows"]
        self.todo = [int(i) for i in np.flatnonzero(~self.backend.done)]
        if len(self.todo) < k:
            logger.info(
                "Resuming %s: %d of %d windows already done.", self.tmp, k - len(self.todo), k
            )

    def write(self, index: int, arrays: dict) -> None:
        self.backend.write(index, arrays)

    def set_attrs(self, attrs: dict) -> None:
        self.backend.set_attrs(attrs)

    def finish(self):
        """Close and publish the file; return it reopened for reading."""
        self.backend.finish()
        _publish_partial(self.tmp, self.final_path)
        self.lock.release()
        return load_dynamic(self.final_path)

    def abort(self) -> None:
        """Release the file (its windows flagged done stay, for a re-run) and the lock."""
        try:
            if self.backend is not None:
                self.backend.close()
        finally:
            self.lock.release()


def _reuse_finished(final_path: Path, meta: dict, fingerprint: str) -> DynamicConnectivity | None:
    """Return the finished file of the same run, if ``final_path`` holds it."""
    if not final_path.exists():
        return None
    try:
        result = load_dynamic(final_path)
    except IncompleteOutputError:
        raise ValueError(
            f"{final_path} exists but is not a finished dynamic-connectivity result; remove it "
            "or choose another 'out'."
        ) from None
    if result._backend.matches(meta, fingerprint):
        logger.info("%s is complete for these parameters; reusing it.", final_path)
        return result
    result.close()
    raise ValueError(
        f"{final_path} exists and holds a different run (other input or "
        "parameters); remove it or choose another 'out'."
    )


def _open_partial(tmp: Path, meta: dict, fingerprint: str, width: int | None) -> HDF5Backend:
    """Resume this run's partial file, or start a new one (the caller holds the lock)."""
    backend = None
    if os.path.lexists(tmp):
        try:
            backend = HDF5Backend.resume(tmp)  # refuses a link or another user's file
        except PermissionError:
            raise
        except (OSError, ValueError, KeyError):
            backend = None
        if backend is not None and not backend.matches(meta, fingerprint):
            backend.close()
            backend = None
        if backend is None:
            logger.info(
                "Discarding %s (an earlier run's partial output, other input or "
                "parameters, or unreadable).",
                tmp,
            )
            tmp.unlink()
    todo = meta["n_windows"] if backend is None else int((~backend.done).sum())
    needed = HDF5Backend.stored_nbytes(meta, meta["stored_width"])
    if needed is not None and todo:
        try:
            check_free_space(
                tmp.parent,
                needed * todo // meta["n_windows"],
                what=f"the {todo} windows still to write",
            )
        except OSError:
            if backend is not None:
                backend.close()
            raise
    if backend is None:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        backend = HDF5Backend.create(tmp, meta, fingerprint, width)
    return backend


def _publish_partial(tmp: Path, final_path: Path) -> None:
    """Rename a closed partial file to its final name once every window reads back done."""
    check = HDF5Backend.open(tmp)
    try:
        done = check.done
    finally:
        check.close()
    if not done.all():
        raise IncompleteOutputError(
            f"{tmp} holds {int(done.sum())} of {done.size} windows after the run; it is kept "
            "for a re-run to finish."
        )
    fsync_path(tmp)
    os.replace(tmp, final_path)
    fsync_path(final_path.parent)


def relmat_sink(out, kind, n, np_dtype, dev, planner, threshold, absolute, attrs, *, result_bytes):
    """Return the sink of :func:`connscale.correlation`'s ``out``.

    A relmat file for a path, a CSR for ``kind='sparse'``, else a host array
    (new or the caller's, a new one checked against the host budget of
    ``planner``).
    """
    if isinstance(out, (str, os.PathLike)):
        extra = {
            "threshold": "None" if threshold is None else threshold,
            "absolute": bool(absolute),
        }
        extra.update(attrs or {})
        return RelmatFileSink(Path(out), kind, n, np_dtype, result_bytes, extra)
    if kind == "sparse":
        if out is not None:
            raise ValueError(
                "kind='sparse' writes to a path or returns a new matrix; "
                f"'out' must be a path or None, got {type(out).__name__}."
            )
        return SparseSink(n)
    shape = (n, n) if kind == "dense" else (n_pairs(n),)
    return ArraySink(out, shape, np_dtype, dev, planner, what=f"The {kind} result of {n} series")


def _remove_stale_temporaries(path: Path) -> None:
    """Remove ``.<name>.*.tmp`` left beside ``path`` by killed runs (lock held)."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        logger.info("Removing %s, left by an interrupted run.", tmp)
        tmp.unlink(missing_ok=True)


def torch_dtype(np_dtype) -> torch.dtype:
    """Return the torch dtype of a float32 or float64 numpy dtype."""
    return torch.float64 if np.dtype(np_dtype) == np.float64 else torch.float32
