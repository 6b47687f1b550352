"""Picklable helpers for the cluster tests (imported by name on the workers,
so they live in a module that conftest.py puts on PYTHONPATH)."""

from __future__ import annotations

import os
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
