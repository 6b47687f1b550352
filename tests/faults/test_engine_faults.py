"""Engines that survive bad scans and lost workers.

* A task that kills its worker process (``os._exit`` inside the task) is
  tried ``1 + retries`` times on every engine, then reported as failed for
  that item only; the other items complete. Attempts are counted through a
  file each attempt appends to.
* A cohort with one such scan: the others are written, the bad one is in
  ``cohort_errors.tsv`` with a clear reason, and ``connscale cohort`` exits
  with status 1.
* r1DL on Dask survives every worker being killed mid-run (all data held by
  the workers lost at once) and gives the uninterrupted result.

The session engines of ``tests/conftest.py`` are used (retries=RETRIES); the
CLI reaches the same Dask cluster through its scheduler address and the
same Spark context through ``local[2]`` (one context per process).
"""

from __future__ import annotations

import csv
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import engine_funcs as ef
import numpy as np
import pytest
import r1dl_funcs as rf
import torch
from numpy.testing import assert_allclose, assert_array_equal

from connscale.cli.main import main
from connscale.cohort import JOBS, CohortJob
from connscale.datasets import simulate_networks
from connscale.engines import SerialEngine, TaskFailure
from connscale.engines.batch import ERROR_COLUMNS
from connscale.networks import _blocks
from connscale.networks._r1dl import _AtomSettings, _run_engine

from ..conftest import RETRIES

pytestmark = pytest.mark.faults

ENGINES = [
    "local_engine",
    pytest.param("dask_engine", marks=pytest.mark.cluster),
    pytest.param("spark_engine", marks=pytest.mark.cluster),
]


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.getfixturevalue(request.param)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize(
    "func, worker_lost, reason",
    [
        (ef.exit_if_bad, True, "worker process died"),
        (ef.raise_if_bad, False, "ValueError: bad is bad"),
    ],
)
def test_failing_task_is_tried_1_plus_retries_times(engine, tmp_path, func, worker_lost, reason):
    # The bad item first: on Dask, tasks queued behind it on its worker must
    # not be charged with its worker's deaths.
    names = ["bad", "good1", "good2", "good3"]
    items = [(name, str(tmp_path / f"{name}.attempts")) for name in names]
    out = engine.map(func, items, errors="return")
    assert out[1:] == names[1:]
    failure = out[0]
    assert isinstance(failure, TaskFailure)
    assert failure.worker_lost is worker_lost
    assert reason in failure.reason and "\n" not in failure.reason
    assert failure.attempts == 1 + RETRIES
    assert _lines(tmp_path / "bad.attempts") == 1 + RETRIES
    for name in names[1:]:
        assert _lines(tmp_path / f"{name}.attempts") >= 1
    # errors='raise' (the default) raises once every attempt failed.
    with pytest.raises(Exception):  # noqa: B017 - the engine's own error type
        engine.map(func, [items[0]])
    assert _lines(tmp_path / "bad.attempts") == 2 * (1 + RETRIES)


def _cohort_inputs(root: Path) -> Path:
    folder = root / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(5)
    for sub, task in (("01", "rest"), ("02", "crash"), ("03", "rest"), ("04", "rest")):
        np.save(folder / f"sub-{sub}_task-{task}_timeseries.npy", rng.standard_normal((20, 4)))
    return folder


def _cli_engine_args(engine) -> list[str]:
    if engine.name == "dask":
        return ["--backend", "dask", "--cluster", engine.client.scheduler.address]
    if engine.name == "spark":
        return ["--backend", "spark", "--cluster", "local[2]"]  # the session's context
    return ["--backend", "local", "--n-jobs", "2"]


def test_cohort_scan_that_kills_its_worker(engine, tmp_path, monkeypatch, capsys):
    # The 'fc' job, except that the '*crash*' scan kills its worker (the
    # task carries the job's function to the worker).
    monkeypatch.setitem(JOBS, "fc", CohortJob("fc", "engine_funcs:fc_or_exit", JOBS["fc"].suffix))
    inputs = _cohort_inputs(tmp_path)
    out = tmp_path / "out"
    status = main(
        [
            "cohort",
            str(inputs),
            "--job",
            "fc",
            "--out",
            str(out),
            "--retries",
            str(RETRIES),
            "--quiet",
            *_cli_engine_args(engine),
        ]
    )
    assert status == 1
    assert "3 done" in capsys.readouterr().out
    attempts = inputs / "sub-02_task-crash_timeseries.npy.attempts"
    assert _lines(attempts) == 1 + RETRIES
    with open(out / "cohort_errors.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert list(rows[0]) == list(ERROR_COLUMNS)  # the BIDS-App's columns too
    assert [(r["name"], r["status"]) for r in rows] == [("sub-02_task-crash", "error")]
    assert rows[0]["error"].startswith("WorkerLost: the worker process died")
    report = json.loads((out / "cohort_report.json").read_text())
    by_subject = {r["subject"]: r for r in report["records"]}
    assert report["counts"] == {"ok": 3, "skipped": 0, "error": 1}
    assert by_subject["02"]["attempts"] == 1 + RETRIES
    assert not Path(by_subject["02"]["output"]).exists()
    for sub in ("01", "03", "04"):
        assert by_subject[sub]["status"] == "ok"
        assert Path(by_subject[sub]["output"]).is_file()


@pytest.mark.cluster
def test_r1dl_on_dask_survives_losing_every_worker(dask_engine, tmp_path):
    S = simulate_networks(60, 1200, 3, sparsity=0.04, noise=0.5, random_state=2)[0]
    np.save(tmp_path / "S.npy", S)
    bounds = _blocks.block_bounds(S.shape[1], 300)
    inner = _blocks.open_source(tmp_path / "S.npy").loader(
        bounds, standardize=True, dtype="float64"
    )
    pids = sorted(dask_engine.client.run(os.getpid).values())
    marker = tmp_path / "killed"
    # Block 1's 6th use of its data is in the middle of the first atom's
    # iterations: every worker is SIGKILLed there, once.
    loader = rf.KillAllOnceLoader(inner, str(marker), pids, block=1, after=6)

    def run(engine, loader):
        out, _ = _run_engine(
            engine,
            loader,
            S.shape,
            len(bounds) - 1,
            dtype=torch.float64,
            settings=_AtomSettings(n_atoms=2, r=40, tol=0.01, max_iter=100, selection="magnitude"),
            rng=np.random.default_rng(3),
        )
        return out

    U, idx, val, n_iter, _ = run(dask_engine, loader)
    assert marker.exists()
    assert not set(pids) & set(dask_engine.client.run(os.getpid).values())  # all replaced
    U_ref, idx_ref, val_ref, n_iter_ref, _ = run(SerialEngine(), inner)
    assert n_iter_ref.min() >= 2  # the kill came mid-run, not after it
    assert_allclose(U.numpy(), U_ref.numpy(), atol=1e-10)
    assert_array_equal(n_iter, n_iter_ref)
    for k in range(2):  # the same voxels, the same loadings
        assert_array_equal(idx[k].numpy(), idx_ref[k].numpy())
        assert_allclose(val[k].numpy(), val_ref[k].numpy(), atol=1e-10)


@pytest.mark.cluster
def test_dask_cluster_listens_on_localhost_only(dask_engine):
    psutil = pytest.importorskip("psutil")
    pids = [os.getpid(), *dask_engine.client.run(os.getpid).values()]
    listening = [
        conn.laddr
        for pid in pids
        for conn in psutil.Process(pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert listening and {address.ip for address in listening} == {"127.0.0.1"}
    # No dashboard unless asked: the scheduler's HTTP server answers /health only.
    port = dask_engine.client.scheduler_info()["services"]["dashboard"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as response:
        assert response.status == 200
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=30)
