"""Reader processes (connscale.engines.readers, .shared): what they read arrives
whole, through shared memory, and a reader that dies is replaced and its read
tried again, then reported, while the other reads complete."""

from __future__ import annotations

import os
import sys
import types
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import pytest

from connscale.engines import shared
from connscale.engines.batch import ReadAheadEngine, Task, TaskCall
from connscale.engines.readers import ReaderLost, ReaderPool, forks_here
from tests.engines import engine_funcs


@pytest.fixture
def pool():
    with shared.handoff_folder() as folder:
        readers = ReaderPool(2, processes=True, folder=folder)
        yield readers, folder
        readers.shutdown()


def test_large_arrays_come_back_through_shared_memory_and_are_freed(pool):
    readers, folder = pool
    if folder is None:
        pytest.skip("no /dev/shm here: arrays come back through the pipe")
    blocks = [readers.submit(engine_funcs.big_block, i).result() for i in range(3)]
    for i, block in enumerate(blocks):
        assert type(block) is np.ndarray and isinstance(block.base, np.memmap)
        np.testing.assert_array_equal(block, engine_funcs.big_block(i))
    assert os.listdir(folder) == []  # each name is removed as soon as it is mapped


def test_small_arrays_and_other_processes_use_plain_memory():
    assert type(shared.empty((4, 4), np.float64)) is np.ndarray
    assert type(shared.empty((512, 1024), np.float32)) is np.ndarray  # not a reader


def test_a_reader_killed_once_is_replaced_and_the_read_retried(pool, tmp_path):
    readers, _ = pool
    marker = str(tmp_path / "crash")
    crashed = readers.submit(engine_funcs.exit_once, marker)
    others = [readers.submit(engine_funcs.make_block, i) for i in range(3)]
    assert crashed.result() == "crash"
    for i, future in enumerate(others):
        np.testing.assert_array_equal(future.result(), engine_funcs.make_block(i))


def test_a_reader_killed_every_time_is_reported_and_the_others_complete(pool):
    readers, _ = pool
    doomed = readers.submit(engine_funcs.exit_always, None)
    others = [readers.submit(engine_funcs.make_block, i) for i in range(4)]
    with pytest.raises(ReaderLost, match=r"reader process died .*\(2 tries\)"):
        doomed.result()
    for i, future in enumerate(others):
        np.testing.assert_array_equal(future.result(), engine_funcs.make_block(i))


def _check_block(payload: int, prepared) -> dict:
    np.testing.assert_array_equal(prepared.result(), engine_funcs.big_block(payload))
    return {"status": "ok"}


def test_the_engine_hands_each_task_its_read_and_removes_its_folder(monkeypatch):
    folders = []
    real = shared.handoff_folder

    def spy(wanted=True):
        context = real(wanted)
        folder = context.__enter__()
        folders.append(folder)

        class Wrapped:
            def __enter__(self):
                return folder

            def __exit__(self, *exc):
                return context.__exit__(*exc)

        return Wrapped()

    monkeypatch.setattr(shared, "handoff_folder", spy)
    tasks = [
        Task(f"t{i}", None, None, _check_block, i, {}, engine_funcs.big_block) for i in range(5)
    ]
    engine = ReadAheadEngine(2, processes=True)
    records = engine.map(
        lambda call: call.task.function(call.task.payload, call.prepared),
        [TaskCall(t) for t in tasks],
    )
    assert records == [{"status": "ok"}] * 5
    assert folders and (folders[0] is None or not Path(folders[0]).exists())


def test_reads_queued_behind_a_dead_reader_all_complete(tmp_path):
    """Every read queued on the reader that died is retried on one successor
    (the slot is replaced once, not once per read)."""
    readers = ReaderPool(1, processes=True)
    try:
        crashed = readers.submit(engine_funcs.exit_once, str(tmp_path / "crash"))
        queued = [readers.submit(engine_funcs.make_block, i) for i in range(3)]
        assert crashed.result(timeout=120) == "crash"
        for i, future in enumerate(queued):
            np.testing.assert_array_equal(future.result(timeout=120), engine_funcs.make_block(i))
    finally:
        readers.shutdown()


class _DeadPool:
    """A reader's pool whose process has just died: broken, its reads' callbacks not yet run."""

    def __init__(self) -> None:
        self.shut = False

    def submit(self, function, *args):
        raise BrokenProcessPool("A child process terminated abruptly")

    def shutdown(self, wait=True, cancel_futures=False):
        self.shut = True


def test_a_read_sent_to_a_reader_that_just_died_goes_to_a_new_one():
    """Between a reader's death and its reads' callbacks, its pool refuses new reads: a
    read submitted then (another run, another report) starts a new process instead of
    failing."""
    readers = ReaderPool(1, processes=True)
    started, dead = readers._slots[0], _DeadPool()
    readers._slots[0] = dead
    try:
        future = readers.submit(engine_funcs.make_block, 2)
        np.testing.assert_array_equal(future.result(timeout=120), engine_funcs.make_block(2))
        assert dead.shut and readers._slots[0] not in (dead, started)
    finally:
        started.shutdown()
        readers.shutdown()


def test_a_read_goes_to_an_idle_reader_not_behind_a_busy_one(pool, tmp_path):
    """Two readers, one held on a read: the next reads all go to the other one and
    complete while the first is still held (in turn, one would queue behind it)."""
    readers, _ = pool
    release = tmp_path / "release"
    held = readers.submit(engine_funcs.wait_for_file, str(release))
    for i in range(3):  # each submitted once the previous one is done
        block = readers.submit(engine_funcs.make_block, i).result(timeout=120)
        np.testing.assert_array_equal(block, engine_funcs.make_block(i))
    assert not held.done()
    release.touch()
    assert held.result(timeout=120) == str(release)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="readers fork on Linux only")
def test_readers_fork_from_this_process_once_it_has_their_modules(tmp_path):
    """With every preload module imported here, a reader is forked from this process: it
    has what this process imported (a module no fresh process has); one that dies is
    replaced (forked again) and its read retried."""
    marker = "connscale_test_marker_module"
    sys.modules[marker] = types.ModuleType(marker)
    try:
        readers = ReaderPool(2, processes=True, preload=("json",), fork_here=True)
        try:
            assert readers._context.get_start_method() == "fork"
            assert readers.submit(engine_funcs.has_module, marker).result(timeout=120)
            crashed = readers.submit(engine_funcs.exit_once, str(tmp_path / "crash"))
            assert crashed.result(timeout=120) == "crash"
        finally:
            readers.shutdown()
    finally:
        del sys.modules[marker]


def test_readers_start_from_the_fork_server_while_a_module_is_missing(monkeypatch):
    """A preload module not imported here yet: the fork server imports it (beside this
    process's work) and the readers fork from there."""
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    assert not forks_here(("json", "colorsys"))
    assert forks_here(("json",)) == sys.platform.startswith("linux")
    readers = ReaderPool(1, processes=True, preload=("colorsys",), fork_here=True)
    try:
        assert readers._context.get_start_method() in ("forkserver", "spawn")
        assert readers.submit(engine_funcs.has_module, "colorsys").result(timeout=120)
    finally:
        readers.shutdown()


@pytest.mark.parametrize("fork_here", [True, False])
def test_a_reader_runs_its_blas_on_one_thread(fork_here):
    """Each reader is one core's work: its BLAS pools (numpy's, scipy's) have one thread
    whether forked here or from the fork server, whatever this process's pools have."""
    readers = ReaderPool(1, processes=True, preload=("numpy", "scipy.linalg"), fork_here=fork_here)
    try:
        threads = readers.submit(engine_funcs.native_threads, None).result(timeout=120)
    finally:
        readers.shutdown()
    assert threads and set(threads) == {1}
