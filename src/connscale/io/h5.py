"""HDF5 files written so that a failed write raises, at the write.

h5py, by default, lets HDF5 keep written chunks in a chunk cache and small
writes in a sieve buffer and write them later: when the disk is full that
later write fails inside a destructor ("Exception ignored in ...
ObjectID.__dealloc__"), the data are lost without an error, and the
objects whose close failed stay registered in HDF5, which closes them again
at interpreter exit after their file is gone: a segmentation fault (rc 139).

Files opened here have no chunk cache and no sieve buffer, so every raw
write goes to the operating system inside the call that makes it and an
error raises there (as :class:`H5WriteError`, an ``OSError`` with a
one-line message naming the file); closing never has data left to write.
Fixed-size datasets are allocated when they are created (:func:`early_dcpl`),
so after the first flush a file's structure no longer changes: a kill at
any later point leaves its metadata intact and only unflagged data to redo.

New files are created with ``O_CREAT | O_EXCL`` (never through a symbolic
link); files reopened for resume are checked with ``lstat`` first and
matched against the descriptor HDF5 opened.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import h5py

__all__ = [
    "H5WriteError",
    "close_h5",
    "create_h5",
    "early_dcpl",
    "flush_h5",
    "h5_errors",
    "open_h5_resume",
]

_ERRNO = re.compile(r"errno = (\d+)")
_STORED_EOF = re.compile(r"truncated file: eof = \d+, .*stored_eof = (\d+)")


class H5WriteError(OSError):
    """Writing, flushing or closing an HDF5 file failed (disk full, I/O error)."""


def _access_list() -> h5py.h5p.PropFAID:
    import h5py

    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
    mdc, nslots, _, w0 = fapl.get_cache()
    fapl.set_cache(mdc, nslots, 0, w0)  # no raw-data chunk cache
    fapl.set_sieve_buf_size(0)  # no deferred small contiguous writes
    return fapl


def _one_line(exc: BaseException) -> tuple[int, str]:
    """(errno, reason) of an h5py/OS error, the reason on one line."""
    code = getattr(exc, "errno", None)
    if not code:
        match = _ERRNO.search(str(exc))
        code = int(match.group(1)) if match else None
    if code:
        return code, os.strerror(code)
    # h5py's text: "Reason (details over several lines)"; keep the reason.
    return errno_codes.EIO, " ".join(str(exc).split("(")[0].split()) or type(exc).__name__


@contextlib.contextmanager
def h5_errors(path: str | os.PathLike, what: str = "writing") -> Iterator[None]:
    """Turn h5py's errors inside the block into :class:`H5WriteError`.

    The message is one line: ``"<what> <path> failed: <reason>"``.
    """
    try:
        yield
    except H5WriteError:
        raise
    except (OSError, RuntimeError) as exc:
        code, reason = _one_line(exc)
        raise H5WriteError(code, f"{what} {path} failed: {reason}") from None


def create_h5(path: str | os.PathLike, *, overwrite_own: bool = False) -> h5py.File:
    """Create a new HDF5 file for writing, never through a symbolic link.

    Parameters
    ----------
    path : path
        Must not exist (``O_CREAT | O_EXCL``), unless ``overwrite_own``.
    overwrite_own : bool, default=False
        Truncate an existing regular file (one this process just made with
        :func:`tempfile.mkstemp`); a symbolic link is still refused.

    Returns
    -------
    h5py.File
        Without chunk cache or sieve buffer (see the module docstring).
    """
    import h5py

    path = Path(path)
    if overwrite_own:
        _check_regular(path)
    flags = h5py.h5f.ACC_TRUNC if overwrite_own else h5py.h5f.ACC_EXCL
    with h5_errors(path, "creating"):
        fid = h5py.h5f.create(os.fsencode(path), flags, fapl=_access_list())
    return h5py.File(fid)


def open_h5_resume(path: str | os.PathLike) -> h5py.File:
    """Reopen an unfinished HDF5 file of this user for writing.

    Raises
    ------
    PermissionError
        When ``path`` is a symbolic link, not a regular file, or another
        user's file (connscale never writes through those).
    """
    import h5py

    path = Path(path)
    before = _check_regular(path)
    try:
        fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDWR, fapl=_access_list())
    except OSError as exc:
        # A write past a file-size limit leaves the file shorter than the end
        # its metadata records; the missing tail held data never flagged
        # done, so the file is extended back (with zeros) and reopened.
        match = _STORED_EOF.search(str(exc))
        if match is None or int(match.group(1)) <= before.st_size:
            code, reason = _one_line(exc)
            raise H5WriteError(code, f"opening {path} failed: {reason}") from None
        os.truncate(path, int(match.group(1)))
        before = _check_regular(path)
        with h5_errors(path, "opening"):
            fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDWR, fapl=_access_list())
    handle = h5py.File(fid)
    try:
        opened = os.fstat(handle.id.get_vfd_handle())
    except (OSError, TypeError, ValueError):
        opened = None
    if opened is None or not os.path.samestat(before, opened):
        handle.close()
        raise PermissionError(f"{path} changed while it was being opened; run again.")
    return handle


def _check_regular(path: Path) -> os.stat_result:
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        kind = (
            "a symbolic link"
            if stat.S_ISLNK(info.st_mode)
            else "not a regular file"
            if not stat.S_ISREG(info.st_mode)
            else "owned by another user"
        )
        raise PermissionError(
            f"{path} is {kind}; connscale does not write through links or into others' "
            "files. Remove it and run again."
        )
    return info


def early_dcpl() -> h5py.h5p.PropDCID:
    """Dataset creation list: space allocated at creation, nothing filled."""
    import h5py

    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


def flush_h5(handle: h5py.File, path: str | os.PathLike) -> None:
    """Flush an open file's metadata to the operating system; errors raise."""
    with h5_errors(path, "writing"):
        handle.flush()


def close_h5(handle: h5py.File, path: str | os.PathLike) -> None:
    """Flush and close an open file; errors raise (the file is closed anyway)."""
    if not handle.id.valid:
        return
    try:
        flush_h5(handle, path)
    finally:
        with h5_errors(path, "closing"):
            handle.close()
