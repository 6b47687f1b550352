"""The BIDS participant level survives a run that kills its worker.

A run whose task kills its worker process on every attempt (``os._exit``
inside the task, injected through the run task the driver hands to the
engine) is recorded as ``WorkerLost`` in the logs, the other runs are
published, and ``connscale bids`` exits with status 1, on the process-pool
and the Dask backends (it used to raise out of ``run_participant``).
"""

from __future__ import annotations

import engine_funcs as ef
import nibabel as nib
import pytest

from connscale.bidsapp import participant
from connscale.cli.main import main
from connscale.engines.batch import ERROR_COLUMNS
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep, participant_log

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bids")
    runs = [("01", None, "rest", None), ("02", None, "crash", None), ("03", None, "rest", None)]
    root = make_fmriprep(tmp / "fmriprep", runs)
    nib.save(atlas_img(), tmp / ATLAS)
    return tmp, root


@pytest.mark.parametrize("backend", ["local", pytest.param("dask", marks=pytest.mark.cluster)])
def test_a_run_that_kills_its_worker_is_recorded_and_the_others_published(
    tree, tmp_path, monkeypatch, backend
):
    tmp, root = tree
    monkeypatch.setattr(participant, "run_one", ef.run_one_or_exit)
    bold = next((root / "sub-02" / "func").glob("*_bold.nii.gz"))
    attempts = bold.parent / (bold.name + ".attempts")
    attempts.unlink(missing_ok=True)
    out = tmp_path / "out"
    argv = ["bids", root, out, "participant", "--atlas", tmp / ATLAS, "--atlas-name", "Slab4"]
    argv += ["--denoise", "none", "--measures", "fc", "--no-reports", "--backend", backend]
    assert main([*map(str, argv), "--n-jobs", "2", "-q"]) == 1
    report, rows = participant_log(out)
    records = {r["subject"]: r for r in report["records"]}
    assert report["counts"] == {"ok": 2, "skipped": 0, "error": 1}
    assert records["02"]["error"].startswith("WorkerLost: the worker process died")
    assert records["02"]["attempts"] == 2  # 1 + the default retries
    assert len(attempts.read_text().splitlines()) == 2
    assert rows[0].split("\t") == list(ERROR_COLUMNS)  # the cohort's columns too
    assert len(rows) == 2 and rows[1].startswith("sub-02_task-crash")
    assert "WorkerLost" in rows[1]
    for sub in ("01", "03"):
        assert records[sub]["status"] == "ok"
        assert len(list((out / f"sub-{sub}" / "func").glob("*_relmat.tsv"))) == 1
    assert not (out / "sub-02").exists()
