"""One writer per output: an exclusive lock file beside each output.

A run that writes ``<folder>/<name>`` (a file, a set of files sharing a
prefix, or a folder) first takes :class:`OutputLock` on it: an
``fcntl.flock`` on the hidden ``<folder>/.<name>.lock``, which also holds the
holder's pid. A second run on the same output fails at once with a message
naming that pid, or waits for it (``wait=True``, the CLI's ``--wait``). The
kernel releases the lock when the holder exits, however it exits (kill -9
included), so a lock is never stale; sweeps of leftover temporaries ask
:func:`is_locked` first and touch only what no live run holds.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

__all__ = ["OutputLock", "OutputLockedError", "is_locked", "lock_path"]


class OutputLockedError(RuntimeError):
    """Another live run is writing the same output."""


def lock_path(target: str | os.PathLike) -> Path:
    """Return the hidden lock file of ``target``: ``<folder>/.<name>.lock``."""
    target = Path(target)
    return target.parent / f".{target.name}.lock"


def _open_lock_file(path: Path) -> int:
    """Open (creating) a lock file, never through a symbolic link."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputLockedError(
                f"{path} is a symbolic link; connscale does not follow links for its lock and "
                "temporary files. Remove it and run again."
            ) from None
        raise


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 256).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "unknown pid"


class OutputLock:
    """Exclusive lock on one output (file, file set or folder).

    Parameters
    ----------
    target : path
        The output's final path (or the common prefix of a file set).
    wait : bool, default=False
        Wait for another holder to finish instead of failing at once.
    timeout : float or None, default=None
        With ``wait``, the most seconds to wait (None: no limit).
    label : str or None, default=None
        What the error message calls the output (default: its path).
    shared : bool, default=False
        Take it shared: shared holders run together and keep out an
        exclusive one (and are kept out by it). The first shared holder
        names itself in the file; the last one removes it.

    Raises
    ------
    OutputLockedError
        On entering, when another live process holds the lock (and ``wait``
        is False or the timeout passed); the message names its pid.

    Examples
    --------
    >>> with OutputLock(out_dir / "sub-01_dfc.h5"):       # doctest: +SKIP
    ...     write_the_output()
    """

    def __init__(
        self,
        target: str | os.PathLike,
        *,
        wait: bool = False,
        timeout: float | None = None,
        label: str | None = None,
        shared: bool = False,
    ) -> None:
        self.target = Path(target)
        self.label = str(self.target) if label is None else label
        self.path = lock_path(self.target)
        self.wait = bool(wait)
        self.timeout = timeout
        self.shared = bool(shared)
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        """Take the lock (see the class docstring)."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            fd = _open_lock_file(self.path)
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                if not self.wait or (deadline is not None and time.monotonic() >= deadline):
                    raise OutputLockedError(
                        f"{self.label} is being written by another connscale run ({holder}); "
                        "wait for it to finish (--wait) or choose another output."
                    ) from None
                time.sleep(0.1)
                continue
            # The holder before us may have removed the file after we opened
            # it: the lock then guards a dead inode, so take the new file.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            if not self.shared or os.fstat(fd).st_size == 0:
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()} on {os.uname().nodename}\n".encode())
            self._fd = fd
            return self

    def release(self) -> None:
        """Remove the lock file and release the lock."""
        if self._fd is None:
            return
        try:
            if self.shared and not _upgraded(self._fd):
                return  # other shared holders: the file stays theirs
            try:
                if os.path.samestat(os.fstat(self._fd), os.stat(self.path, follow_symlinks=False)):
                    self.path.unlink()
            except FileNotFoundError:
                pass
        finally:
            os.close(self._fd)  # closing releases the flock
            self._fd = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _upgraded(fd: int) -> bool:
    """Return whether the shared lock on ``fd`` became exclusive: no other holder is left."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def is_locked(target: str | os.PathLike) -> bool:
    """Return whether a live process holds the lock of ``target``."""
    path = lock_path(target)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a link or unreadable: treat as held, never sweep through it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
