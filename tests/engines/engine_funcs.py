"""Module-level task functions for the engine tests.

Worker processes (process pool, Dask, Spark) import them by name, so they
live in a module of their own that conftest.py puts on PYTHONPATH.
"""

from __future__ import annotations

import os
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
    return float(np.sum(item**2)), int(item.size)


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


def count_attempt(log: str) -> int:
    """Append one line to ``log`` (a file); return how many it holds now."""
    import os

    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    with open(log) as f:
        return len(f.read().splitlines())


def exit_if_bad(item: tuple[str, str]) -> str:
    """``item = (name, attempts_log)``: count the attempt; 'bad...' kills its worker."""
    import os

    name, log = item
    count_attempt(log)
    if name.startswith("bad"):
        os._exit(3)
    return name


def raise_if_bad(item: tuple[str, str]) -> str:
    """``item = (name, attempts_log)``: count the attempt; 'bad...' raises."""
    name, log = item
    count_attempt(log)
    if name.startswith("bad"):
        raise ValueError(f"{name} is bad")
    return name


def fc_or_exit(timeseries, labels, params, output, attrs) -> dict:
    """The cohort's 'fc' job, except that a scan named '*crash*' kills its worker.

    Each attempt at a crashing scan appends a line to ``<input>.attempts``.
    """
    import os

    from connscale.cohort import _job_fc

    source = Path(attrs["source"])
    if "crash" in source.name:
        count_attempt(str(source.with_name(source.name + ".attempts")))
        os._exit(3)
    return _job_fc(timeseries, labels, params, output, attrs)


def run_one_or_exit(task, prepared=None) -> dict:
    """The BIDS participant level's run task, except that a run of task 'crash'
    kills its worker; each attempt appends a line to ``<bold>.attempts``."""
    import os

    from connscale.bidsapp.participant import run_one

    config, run = task
    if "task-crash" in run.name:
        count_attempt(str(run.bold) + ".attempts")
        os._exit(3)
    return run_one(task, prepared)


def square_or_fail(payload, prepared=None) -> dict:
    """A batch task: ``payload = (x, threads_log)``; x < 0 raises a two-line error.

    Writes the torch threads it ran with to ``threads_log`` (when given).
    """
    import torch

    x, log = payload
    if log:
        Path(log).write_text(str(torch.get_num_threads()))
    if x < 0:
        raise ValueError(f"negative input {x}\nsecond line")
    return {"square": x * x}


def big_block(i: int) -> np.ndarray:
    """Block i as a reader process returns it: in shared memory when it is one."""
    from connscale.engines.shared import empty

    block = empty((512, 1024), np.float32)  # 2 MiB: over MIN_SHARED_BYTES
    block[...] = np.random.default_rng(i).standard_normal(block.shape, dtype=np.float32)
    return block


def exit_always(item) -> None:
    """Kill the worker process every time."""
    import os

    os._exit(5)


def prefetch_or_exit(task) -> object:
    """The BIDS participant level's read of a run, except that it kills its reader
    process for a run of task 'crash' (every time) or 'flaky' (the first time);
    each attempt at those appends a line to ``<bold>.reads``."""
    import os

    from connscale.bidsapp.cleaning import prefetch

    config, run = task
    if "task-crash" in run.name or "task-flaky" in run.name:
        attempt = count_attempt(str(run.bold) + ".reads")
        if "task-crash" in run.name or attempt == 1:
            os._exit(3)
    return prefetch(task)


def big_block_and_pid(i: int) -> tuple[np.ndarray, int]:
    """Block i as a reader process returns it (:func:`big_block`), and that process's id."""
    import os

    return big_block(i), os.getpid()


def check_shared_read(payload: int, prepared) -> dict:
    """A task that checks its read arrived whole through shared memory, from another process."""
    import os

    block, reader = prepared.result()
    np.testing.assert_array_equal(block, big_block(payload))
    return {
        "shared": isinstance(block.base, np.memmap),
        "reader": reader,
        "worker": os.getpid(),
    }


def reader_pid(_) -> int:
    """The process id of the reader that runs this."""
    return os.getpid()


def wait_for_file(path: str, timeout: float = 60.0) -> str:
    """Return ``path`` once the file exists (a read held back until a test lets it go).

    Raises TimeoutError after ``timeout`` seconds, so that a test whose
    release never comes fails instead of hanging.
    """
    import time

    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return path


def has_module(name: str) -> bool:
    """Return whether module ``name`` is imported in this process (a reader's inheritance)."""
    import sys

    return name in sys.modules


def native_threads(_=None) -> list[int]:
    """The thread counts of this process's BLAS and OpenMP pools, after a BLAS product."""
    import numpy as np
    from threadpoolctl import threadpool_info

    matrix = np.ones((300, 300))
    matrix @ matrix
    return [info["num_threads"] for info in threadpool_info()]


class ExitWhenLoaded:
    """Kills the process that unpickles it (a helper process given a report or a table), after
    counting the attempt in ``log``: every time, or only the first with ``once``."""

    def __init__(self, log: str, once: bool) -> None:
        self.log, self.once = log, once

    def __reduce__(self):
        return exit_on_attempt, (self.log, self.once)


def exit_on_attempt(log: str, once: bool) -> str:
    """Count the attempt in ``log``; end this process unless ``once`` and it is not the first."""
    import os

    if count_attempt(log) == 1 or not once:
        os._exit(3)
    return "loaded"


def call_after(_loaded: object, call):
    """Return ``call()``: a call handed over with something to unpickle first (``_loaded``)."""
    return call()
