"""A helper process killed on a run's report or table costs only that file's measure.

The participant level draws the runs' reports and writes their tables in
helper processes (:mod:`connscale.bidsapp.beside`). The report (or the
connectome's table) of a 'crash' run kills its helper process every time it
is handed over (the measure is recorded as failed, ``ReaderLost`` after two
tries, the run's other files published), that of a 'flaky' run the first
time (done again on a new process and published); the call and the other
runs go on.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import engine_funcs as ef
import nibabel as nib
import pytest

from connscale.bidsapp import beside, region_measures
from connscale.bidsapp.participant import run_participant
from connscale.io.relmat import write_relmat_tsv
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

pytestmark = [pytest.mark.faults]

#: The runs: 'rest' left alone, 'crash' killing its helper every time, 'flaky' once.
RUNS = [("01", None, "rest", None), ("02", None, "crash", None), ("03", None, "flaky", None)]


def _killer(tmp_path, task: str, logs: dict):
    """Return what kills the helper unpickling it, its attempts counted in ``logs[task]``."""
    logs[task] = tmp_path / f"{task}.attempts"
    return ef.ExitWhenLoaded(str(logs[task]), once=task == "flaky")


def _participant(tmp_path, **kwargs) -> dict:
    """Run the participant level on :data:`RUNS`; return each task's record."""
    root = make_fmriprep(tmp_path / "fmriprep", RUNS)
    nib.save(atlas_img(), tmp_path / ATLAS)
    result = run_participant(
        root,
        tmp_path / "out",
        atlas=tmp_path / ATLAS,
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic"},
        backend="serial",
        device="cpu",
        **kwargs,
    )
    return {r["input"].split("task-")[1].split("_")[0]: r for r in result.records}


def test_a_helper_process_killed_costs_its_report_only(tmp_path, monkeypatch):
    real_report = region_measures._run_report
    logs = {}

    def run_report(region_set, name):
        report = real_report(region_set, name)
        task = region_set.run.entities["task"]
        if task == "rest":
            return report
        killer = _killer(tmp_path, task, logs)
        return replace(report, record={**report.record, "killer": killer})

    monkeypatch.setattr(region_measures, "_run_report", run_report)
    records = _participant(tmp_path, measures=["fc"])
    assert [records[t]["status"] for t in ("rest", "crash", "flaky")] == ["ok", "partial", "ok"]
    failure = records["crash"]["failed_measures"]
    assert list(failure) == ["report"]
    assert failure["report"].startswith("ReaderLost: the helper process died on it (2 tries)")
    names = {t: [Path(p).name for p in r["outputs"]] for t, r in records.items()}
    assert not any(n.endswith("_report.html") for n in names["crash"])
    assert any(n.endswith("_relmat.tsv") for n in names["crash"])
    for task in ("rest", "flaky"):
        assert sum(n.endswith("_report.html") for n in names[task]) == 1
    assert len(logs["crash"].read_text().split()) == 2  # two tries
    assert len(logs["flaky"].read_text().split()) == 2  # killed once, then drawn
    assert not list((tmp_path / "out").rglob("*.staging"))


@pytest.mark.parametrize("measures", [["fc", "timeseries"], ["fc"]])
def test_a_helper_process_killed_on_a_table_costs_its_measure_only(tmp_path, monkeypatch, measures):
    """With the series too, the 'crash' run's atlas-level set is published without its
    connectome; with the connectome alone, not at all (its coverage table is not
    published alone; the run's QC set is)."""
    real_write, logs = beside.write, {}

    def write(call):
        task = Path(call.args[0]).name.split("task-")[1].split("_")[0]
        if task == "rest" or call.func is not write_relmat_tsv:
            return real_write(call)
        killer = _killer(tmp_path, task, logs)
        return real_write(functools.partial(ef.call_after, killer, call))

    monkeypatch.setattr(beside, "write", write)
    # reader processes: a helper process writes the tables
    records = _participant(tmp_path, measures=measures, n_jobs=2, reports=False)
    assert [records[t]["status"] for t in ("rest", "crash", "flaky")] == ["ok", "partial", "ok"]
    failure = records["crash"]["failed_measures"]
    assert list(failure) == ["fc"]
    assert failure["fc"].startswith("ReaderLost: the helper process died on it (2 tries)")
    names = {t: [Path(p).name for p in r["outputs"]] for t, r in records.items()}
    assert not any("_relmat" in n for n in names["crash"])
    assert sum(n.endswith("_timeseries.tsv") for n in names["crash"]) == len(measures) - 1
    region_set = [p.name for p in (tmp_path / "out").rglob("*task-crash*_seg-Slab4_*")]
    assert bool(region_set) == ("timeseries" in measures)  # no coverage table alone
    for task in ("rest", "flaky"):
        assert sum(n.endswith("_relmat.tsv") for n in names[task]) == 1
    assert len(logs["crash"].read_text().split()) == 2  # two tries
    assert len(logs["flaky"].read_text().split()) == 2  # killed once, then written
    assert not list((tmp_path / "out").rglob("*.staging"))
    assert not list((tmp_path / "out").rglob(".*.tmp"))
