"""Picklable helpers for the cluster tests (imported by name on the workers,
so they live in a module that conftest.py puts on PYTHONPATH)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from connscale.networks._blocks import Block


class FailOnceLoader:
    """Wrap a block loader: loading block ``i`` raises the first time."""

    def __init__(self, inner, marker: str, block: int = 0) -> None:
        self.inner = inner
        self.marker = marker
        self.block = block

    def __call__(self, i: int):
        if i == self.block and not Path(self.marker).exists():
            Path(self.marker).write_text("failed once")
            raise RuntimeError(f"planned failure loading block {i}")
        return self.inner(i)


class CrashOnceBlock(Block):
    """A block whose worker process dies the first time its data are used."""

    def __init__(self, start, data_t, marker: str) -> None:
        super().__init__(start, data_t)
        self.__dict__["_marker"] = marker

    def __getattribute__(self, name):
        if name == "data_t":
            marker = Path(object.__getattribute__(self, "_marker"))
            if not marker.exists():
                marker.write_text("crashed once")
                os._exit(3)
        return object.__getattribute__(self, name)


class CrashOnceLoader:
    """Block ``block`` kills its worker at its first use (after loading)."""

    def __init__(self, inner, marker: str, block: int = 0) -> None:
        self.inner = inner
        self.marker = marker
        self.block = block

    def __call__(self, i: int):
        block = self.inner(i)
        if i == self.block:
            return CrashOnceBlock(block.start, block.data_t, self.marker)
        return block


class KillAllOnceBlock(Block):
    """A block that, at the ``after``-th use of its data (counted across
    processes in ``marker + '.uses'``), SIGKILLs every worker process in
    ``pids`` and then its own: all data held by the workers is lost. Once
    only (``marker`` is created exclusively)."""

    def __init__(self, start, data_t, marker: str, pids: list[int], after: int) -> None:
        super().__init__(start, data_t)
        self.__dict__.update(_marker=marker, _pids=list(pids), _after=after)

    def __getattribute__(self, name):
        if name == "data_t":
            get = object.__getattribute__
            marker = get(self, "_marker")
            with open(marker + ".uses", "a+") as uses:
                uses.write(".")
                uses.seek(0)
                count = len(uses.read())
            if count >= get(self, "_after"):
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    pass
                else:
                    for pid in get(self, "_pids"):
                        if pid != os.getpid():
                            os.kill(pid, signal.SIGKILL)
                    os.kill(os.getpid(), signal.SIGKILL)
        return object.__getattribute__(self, name)


class KillAllOnceLoader:
    """Block ``block`` kills every worker once, at the ``after``-th use of its data."""

    def __init__(self, inner, marker: str, pids: list[int], block: int = 0, after: int = 1) -> None:
        self.inner = inner
        self.marker = marker
        self.pids = list(pids)
        self.block = block
        self.after = after

    def __call__(self, i: int):
        block = self.inner(i)
        if i == self.block:
            return KillAllOnceBlock(block.start, block.data_t, self.marker, self.pids, self.after)
        return block
