"""The Dask engine on SLURM (``--cluster slurm``): a cohort submitted as jobs.

The SLURM is started for these tests (:mod:`_slurm`: munged, slurmctld and
slurmd of one localhost node, as root); they skip, with the reason, where
it cannot start. The checks of the options run without it.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from connscale.cohort import run_cohort
from connscale.engines import get_engine
from connscale.engines.slurm import SlurmJobs

from ._slurm import HoldOneTask, slurm_fixture  # noqa: F401 (the fixture slurm)

SCANS = ("01", "02", "03", "04", "05", "06")


def test_jobs_are_scaled_to_the_tasks_left():
    assert SlurmJobs().jobs_for(5) == 5
    assert SlurmJobs(cores=4).jobs_for(5) == 2
    assert SlurmJobs(cores=4, max_jobs=1).jobs_for(5) == 1
    assert SlurmJobs(cores=4, gpus=1, max_jobs=3).jobs_for(5) == 3  # one worker per GPU job
    with pytest.raises(ValueError, match="cores"):
        SlurmJobs(cores=0)


def test_job_options_need_cluster_slurm_in_one_line(tmp_path):
    message = "'walltime', 'gpus_per_job' apply to cluster='slurm' only; got cluster=None."
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        run_cohort([], "fc", tmp_path / "out", walltime="02:00:00", gpus_per_job=1)
    with pytest.raises(
        ValueError, match="^cluster='slurm' needs engine='dask'; got engine='local'"
    ):
        run_cohort([], "fc", tmp_path / "out", cluster="slurm")
    with pytest.raises(ValueError, match="most SLURM jobs at once"):
        run_cohort([], "fc", tmp_path / "out", engine="dask", cluster="slurm", n_jobs=-1)
    with pytest.raises(ValueError, match="'dask' engine only; got engine 'spark'"):
        get_engine("spark", cluster="slurm")
    assert not (tmp_path / "out").exists()  # before any write


def test_without_dask_jobqueue_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import dask_jobqueue fails
    with pytest.raises(
        ImportError,
        match=r"^--cluster slurm needs dask-jobqueue: pip install "
        r"dask-jobqueue \(or pip install connscale\[slurm\]\)$",
    ):
        run_cohort([], "fc", tmp_path / "out", engine="dask", cluster="slurm")
    assert not (tmp_path / "out").exists()


def _cohort(root: Path) -> str:
    rng = np.random.default_rng(23)
    for sub in SCANS:
        folder = root / f"sub-{sub}" / "func"
        folder.mkdir(parents=True)
        np.save(folder / f"sub-{sub}_task-rest_timeseries.npy", rng.standard_normal((40, 7)))
    return str(root / "sub-*" / "func" / "*_timeseries.npy")


def _outputs(report) -> dict:
    values = {}
    for record in report.records:
        with h5py.File(record["output"], "r") as h5:
            values[record["name"]] = {
                name: h5[name][()] for name in h5 if isinstance(h5[name], h5py.Dataset)
            }
    return values


def _kill_held_job(slurm, marker: Path, killed: list) -> None:
    """Wait for the worker holding a task to name its job, then scancel that job."""
    deadline = time.monotonic() + 90
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if marker.exists():
        killed.append(marker.read_text())
        slurm.command("scancel", killed[-1])


def _within(seconds: float, func, *args, **kwargs):
    """Return ``func(*args, **kwargs)``; fail the test if it runs past ``seconds``."""
    outcome: dict = {}

    def call():
        try:
            outcome["value"] = func(*args, **kwargs)
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{func.__name__} still running after {seconds} s: a lost job not replaced?")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "nope"}, "invalid partition specified: nope"),
        ({"walltime": "2h"}, "Invalid --time specification"),
    ],
)
def test_options_slurm_refuses_fail_in_one_line_before_any_job(slurm, tmp_path, options, message):
    with pytest.raises(ValueError, match=f"^SLURM refuses the jobs: .*{message}"):
        run_cohort(
            _cohort(tmp_path / "in"), "fc", tmp_path / "out", engine="dask", cluster="slurm",
            verbose=0, **options,
        )  # fmt: skip
    assert slurm.command("squeue", "-h") == ""


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.faults
def test_a_cohort_on_slurm_survives_a_killed_job_and_resumes(slurm, tmp_path):
    inputs = _cohort(tmp_path / "in")
    reference = _outputs(run_cohort(inputs, "fc", tmp_path / "local", engine="serial", verbose=0))
    out = tmp_path / "out"
    marker = tmp_path / "held"
    # One task is held by its worker until that worker's job, the only one, is
    # cancelled: with no retry, that scan is recorded as failed, and a job
    # submitted in the killed one's place runs the others.
    jobs = SlurmJobs(max_jobs=1, log_directory=str(tmp_path / "logs"))
    killed: list = []
    with get_engine("dask", cluster=jobs, retries=0) as engine:
        engine.client.register_plugin(HoldOneTask(str(marker)))
        killer = threading.Thread(target=_kill_held_job, args=(slurm, marker, killed))
        killer.start()
        try:
            first = _within(240, run_cohort, inputs, "fc", out, engine=engine, verbose=0)
        finally:
            killer.join()
    assert len(killed) == 1 and killed[0].isdigit()
    statuses = [r["status"] for r in first.records]
    assert sorted(statuses) == ["error"] + ["ok"] * (len(SCANS) - 1)
    failed = first.records[statuses.index("error")]
    assert "worker process died" in failed["error"]
    assert not Path(failed["output"]).exists()
    assert len(list((tmp_path / "logs").glob("*.err"))) == 2  # the killed job and the next

    # Resumed through the options: only the missing scan runs, in one job.
    second = run_cohort(inputs, "fc", out, engine="dask", cluster="slurm", verbose=0)
    assert (second.n_ok, second.n_skipped, second.n_failed) == (1, len(SCANS) - 1, 0)
    assert [r["name"] for r in second.records if r["status"] == "ok"] == [failed["name"]]
    assert len(list((out / "logs").glob("*.err"))) == 1
    assert "slurm=SlurmJobs(" in second.engine
    got = _outputs(second)
    assert got.keys() == reference.keys()
    for name, datasets in reference.items():
        assert got[name].keys() == datasets.keys()
        for key, value in datasets.items():
            if np.issubdtype(np.asarray(value).dtype, np.floating):
                np.testing.assert_allclose(got[name][key], value, atol=2e-6, rtol=0)
            else:
                np.testing.assert_array_equal(got[name][key], value)
