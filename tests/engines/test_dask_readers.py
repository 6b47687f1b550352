"""Reader processes inside Dask workers (connscale.engines.dask_readers): each
worker reads its tasks ahead in processes of its own, what they read reaches the
worker through shared memory, and each worker's folder is gone once the engine
closes."""

from __future__ import annotations

import os

import dask
import pytest

from connscale.engines import shared
from connscale.engines.batch import Task, map_tasks
from connscale.engines.dask_engine import DaskEngine
from connscale.engines.dask_readers import WorkerReaders
from tests.engines import engine_funcs

pytestmark = pytest.mark.cluster


def test_each_worker_reads_in_processes_of_its_own_through_shared_memory():
    from distributed import Client, LocalCluster

    tasks = [
        Task(
            f"t{i}",
            None,
            str(i),
            engine_funcs.check_shared_read,
            i,
            {},
            engine_funcs.big_block_and_pid,
        )
        for i in range(6)
    ]
    with shared.handoff_folder() as folder:
        if folder is None:
            pytest.skip("no /dev/shm here: arrays come back through the pipe")
        with (
            dask.config.set({"distributed.worker.daemon": False}),
            LocalCluster(
                n_workers=2,
                threads_per_worker=3,
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=40,
            ) as cluster,
            Client(cluster) as client,
        ):
            readers = WorkerReaders(2, processes=True, folder=folder)
            with DaskEngine(client, readers=readers) as engine:
                assert "readers=2 processes per worker" in repr(engine)
                records = map_tasks(engine, tasks)
                workers = set(client.run(os.getpid).values())
            assert os.listdir(folder) == []  # removed with the plugin, the workers still up
    assert [r["status"] for r in records] == ["ok"] * 6
    assert all(r["shared"] for r in records)
    assert {r["worker"] for r in records} <= workers
    assert not {r["reader"] for r in records} & workers  # read in processes of their own
