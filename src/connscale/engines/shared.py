"""Arrays that reader processes hand to the process that computes, without a copy.

A reader process (:class:`~connscale.engines.batch.ReadAheadEngine` with
``processes=True``) decodes a run's voxel series straight into a file of a
folder in memory (``/dev/shm``): :func:`empty` returns a
:class:`SharedArray` there. Pickled to the parent, such an array travels as
its file's name; the parent maps the same pages (:func:`attach`) and removes
the name at once, so the memory is freed when the last view of the array is
gone, and nothing is left behind if a process dies (the engine removes the
folder at the end of the call). In any other process, :func:`empty` is
``numpy.empty``.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["SharedArray", "attach", "empty", "handoff_folder", "share_into"]

#: The folder a reader process puts its arrays in (None: not a reader process).
_FOLDER: Path | None = None
#: Free shared memory left beside an array put there (others write at the same time).
SHARED_MARGIN_BYTES = 1 << 30
#: Arrays smaller than this are pickled by value (a file per array would cost more).
MIN_SHARED_BYTES = 1 << 20


class SharedArray(np.memmap):
    """A ``numpy.memmap`` of a file in shared memory, pickled by its file's name."""

    def __reduce__(self):
        if isinstance(self.base, mmap.mmap) and self.filename is not None:
            return attach, (str(self.filename), self.shape, self.dtype.str)
        return self.view(np.ndarray).__reduce__()


def attach(path: str, shape: tuple, dtype: str) -> np.ndarray:
    """Map the array a reader process wrote to ``path`` and remove the name.

    The pages stay mapped (and counted) until the returned array and its
    views are gone.
    """
    mapped = np.memmap(path, dtype=np.dtype(dtype), mode="r+", shape=tuple(shape))
    os.unlink(path)
    return mapped.view(np.ndarray)


def empty(shape: tuple, dtype) -> np.ndarray:
    """Return an uninitialised array, in shared memory in a reader process.

    In a reader process (:func:`share_into` was called) an array of at least
    :data:`MIN_SHARED_BYTES` is a :class:`SharedArray`, pickled by name. In
    any other process, for a small array or when shared memory is short
    (:data:`SHARED_MARGIN_BYTES` must stay free): ``numpy.empty``.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if _FOLDER is None or nbytes < MIN_SHARED_BYTES:
        return np.empty(shape, dtype)
    if shutil.disk_usage(_FOLDER).free < nbytes + SHARED_MARGIN_BYTES:
        return np.empty(shape, dtype)  # a full tmpfs would kill the reader (SIGBUS)
    path = _FOLDER / f"{uuid.uuid4().hex}.array"
    return SharedArray(path, dtype=dtype, mode="w+", shape=tuple(shape))


def share_into(folder: str | None) -> None:
    """Make this process a reader whose large arrays go to ``folder`` (None: stop).

    The initializer of the engine's reader processes.
    """
    global _FOLDER  # noqa: PLW0603 - one setting per reader process
    _FOLDER = None if folder is None else Path(folder)


@contextmanager
def handoff_folder(wanted: bool = True):
    """Yield a new folder in shared memory for a call's reader processes, removed at the end.

    In ``/dev/shm`` where it exists (and ``wanted``); else None: the arrays
    are then pickled by value, through the pipe.
    """
    root = Path("/dev/shm")
    if not wanted or not root.is_dir():
        yield None
        return
    folder = tempfile.mkdtemp(prefix="connscale-", dir=root)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
