"""Module-level task functions for the engine tests.

Worker processes (process pool, Dask, Spark) import them by name, so they
live in a module of their own that conftest.py puts on PYTHONPATH.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_ROWS = 6
N_COLS = 5


def make_block(i: int) -> np.ndarray:
    """Block i: a seeded (N_ROWS, N_COLS) float64 array."""
    return np.random.default_rng(1000 + i).standard_normal((N_ROWS, N_COLS))


def block_times(block: np.ndarray, vector: np.ndarray, scale: float) -> np.ndarray:
    """scale * block @ vector (shape (N_ROWS,))."""
    return scale * (block @ vector)


def block_gram(block: np.ndarray) -> np.ndarray:
    """block.T @ block, (N_COLS, N_COLS)."""
    return block.T @ block


def item_stats(item: np.ndarray) -> tuple[float, int]:
    return float(np.sum(item ** 2)), int(item.size)


def fail_once(marker: str) -> str:
    """Raise the first time it runs for ``marker`` (a file path), succeed after."""
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError(f"planned failure for {path.name}")
    return path.name


def always_fail(item):
    raise RuntimeError(f"always fails ({item})")


def exit_once(marker: str) -> str:
    """Kill the worker process the first time it runs for ``marker``."""
    import os

    path = Path(marker)
    if not path.exists():
        path.write_text("crashed once")
        os._exit(3)
    return path.name


def block_gram_exit_once(block: np.ndarray, marker: str) -> np.ndarray:
    exit_once(marker)
    return block_gram(block)
