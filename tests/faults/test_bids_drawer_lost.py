"""A drawing process killed on a run's report costs only that report.

The participant level draws the runs' reports in drawing processes
(:mod:`connscale.bidsapp.drawing`). The report of a 'crash' run kills its
drawing process every time it is handed over (the report is recorded as
failed, ``ReaderLost`` after two tries, the run's other files published),
that of a 'flaky' run the first time (drawn again on a new process and
published); the call and the other runs go on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import engine_funcs as ef
import nibabel as nib
import pytest

from connscale.bidsapp import region_measures
from connscale.bidsapp.participant import run_participant
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

pytestmark = [pytest.mark.faults]


def test_a_drawing_process_killed_costs_its_report_only(tmp_path, monkeypatch):
    runs = [("01", None, "rest", None), ("02", None, "crash", None), ("03", None, "flaky", None)]
    root = make_fmriprep(tmp_path / "fmriprep", runs)
    nib.save(atlas_img(), tmp_path / ATLAS)
    real_report = region_measures._run_report
    logs = {}

    def run_report(region_set, name):
        report = real_report(region_set, name)
        task = region_set.run.entities["task"]
        if task == "rest":
            return report
        logs[task] = tmp_path / f"{task}.draws"
        killer = ef.ExitWhenLoaded(str(logs[task]), once=task == "flaky")
        return replace(report, record={**report.record, "killer": killer})

    monkeypatch.setattr(region_measures, "_run_report", run_report)
    result = run_participant(
        root,
        tmp_path / "out",
        atlas=tmp_path / ATLAS,
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic"},
        measures=["fc"],
        backend="serial",
        device="cpu",
    )
    records = {r["input"].split("task-")[1].split("_")[0]: r for r in result.records}
    assert [records[t]["status"] for t in ("rest", "crash", "flaky")] == ["ok", "partial", "ok"]
    failure = records["crash"]["failed_measures"]
    assert list(failure) == ["report"]
    assert failure["report"].startswith("ReaderLost: the drawing process died on it (2 tries)")
    names = {t: [Path(p).name for p in r["outputs"]] for t, r in records.items()}
    assert not any(n.endswith("_report.html") for n in names["crash"])
    assert any(n.endswith("_relmat.tsv") for n in names["crash"])
    for task in ("rest", "flaky"):
        assert sum(n.endswith("_report.html") for n in names[task]) == 1
    assert len(logs["crash"].read_text().split()) == 2  # two tries
    assert len(logs["flaky"].read_text().split()) == 2  # killed once, then drawn
    assert not list((tmp_path / "out").rglob("*.staging"))
