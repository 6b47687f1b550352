"""Atomic writes: a temporary file in the target's folder, flushed to disk, then a rename.

A crash or a full disk never leaves a half-written file that looks complete.

Temporaries are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (through
:func:`tempfile.mkstemp`), never opened through a symbolic link; a result's
size, when known, is checked against the free space up front
(:func:`check_free_space`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600; give the result the permissions a plain open() would.
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        fsync_path(tmp_path)
        os.replace(tmp_path, path)
        fsync_path(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


class InsufficientSpaceError(OSError):
    """The output's file system has less free space than the result needs."""


def check_free_space(
    folder: str | os.PathLike, nbytes: int, *, what: str = "the output", margin: int = 16 * 1024**2
) -> None:
    """Raise when ``folder``'s file system cannot take ``nbytes`` more.

    Parameters
    ----------
    folder : path
        Where the result will be written (the nearest existing parent is
        measured).
    nbytes : int
        The result's size in bytes.
    what : str
        What is being written, for the message.
    margin : int, default=16 MiB
        Extra room asked for metadata and sidecars.

    Raises
    ------
    InsufficientSpaceError
        Naming the path, the bytes needed and the bytes available.
    """
    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    needed = int(nbytes) + int(margin)
    if needed > free:
        raise InsufficientSpaceError(
            errno.ENOSPC,
            f"not enough free space in {folder} for {what}: {format_bytes(needed)} needed, "
            f"{format_bytes(free)} available",
        )


def format_bytes(nbytes: int | float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's (or a folder's entries') data to disk; errors raise."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if Path(path).is_dir():
        flags |= getattr(os, "O_DIRECTORY", 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(path: str | os.PathLike) -> Path:
    """Create, or safely reopen, a hidden working folder (for resume state).

    The folder is created with mode 0700; an existing one is used only when
    it is a real folder (not a symbolic link) owned by this user, so a link
    planted at a predictable name never redirects connscale's writes.

    Raises
    ------
    PermissionError
        When ``path`` exists as a link, a file, or another user's folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            kind = (
                "a symbolic link"
                if stat.S_ISLNK(info.st_mode)
                else ("not a folder" if not stat.S_ISDIR(info.st_mode) else "owned by another user")
            )
            raise PermissionError(
                f"{path} is {kind}; connscale keeps its working files there and does not "
                "follow links or write into others' folders. Remove it and run again."
            ) from None
    return path


def open_new(path: str | os.PathLike, mode: str = "wb") -> IO:
    """Open a new file for writing with ``O_CREAT | O_EXCL | O_NOFOLLOW``.

    Fails (FileExistsError) when anything, a symbolic link included, is at
    ``path``.
    """
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    fd = os.open(path, flags, 0o666)
    return os.fdopen(fd, mode)


def _umask() -> int:
    """Return the process umask, read without changing it where Linux allows."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: read by setting, then restore at once
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, data: dict) -> Path:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    return write_text_atomic(
        path, json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n"
    )


def _jsonable(value: object) -> object:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
