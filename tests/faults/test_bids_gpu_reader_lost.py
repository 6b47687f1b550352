"""A reader process killed inside a GPU worker costs only its own run's read.

``connscale bids --gpus`` on a stand-in GPU (``--device cpu``), its worker
with two reader processes: the read of a 'flaky' run kills its reader
once (the run is read again on a new reader and published), the read of a
'crash' run kills its reader every time (the run is recorded as
``ReaderLost`` after two tries); the GPU worker itself survives and the
other runs are published.
"""

from __future__ import annotations

import engine_funcs as ef
import nibabel as nib
import pytest

from connscale.bidsapp import gpus, participant
from connscale.cli.main import main
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep, participant_log

pytestmark = [pytest.mark.faults, pytest.mark.cluster]


def test_a_reader_killed_in_a_gpu_worker_costs_its_run_only(tmp_path, monkeypatch):
    runs = [("01", None, "rest", None), ("02", None, "crash", None), ("03", None, "flaky", None)]
    root = make_fmriprep(tmp_path / "fmriprep", runs)
    nib.save(atlas_img(), tmp_path / ATLAS)
    monkeypatch.setattr(gpus, "_cuda_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(participant, "prefetch", ef.prefetch_or_exit)
    out = tmp_path / "out"
    argv = ["bids", root, out, "participant", "--atlas", tmp_path / ATLAS, "--atlas-name"]
    argv += ["Slab4", "--denoise", "none", "--measures", "fc", "--no-reports", "--gpus", "1"]
    assert main([*map(str, argv), "--device", "cpu", "--n-jobs", "2", "-q"]) == 1
    report, rows = participant_log(out)
    records = {r["subject"]: r for r in report["records"]}
    assert report["counts"] == {"ok": 2, "skipped": 0, "error": 1}
    assert report["gpu_readers"]["readers_are"] == "processes"
    assert records["02"]["error"].startswith("ReaderLost: the reader process died")
    assert "(2 tries)" in records["02"]["error"]
    assert len(rows) == 2 and rows[1].startswith("sub-02_task-crash")
    for sub in ("02", "03"):
        bold = next((root / f"sub-{sub}" / "func").glob("*_bold.nii.gz"))
        reads = (bold.parent / (bold.name + ".reads")).read_text().split()
        assert len(reads) == 2  # killed twice; killed once, then read
    for sub in ("01", "03"):
        assert records[sub]["status"] == "ok"
        assert len(list((out / f"sub-{sub}" / "func").glob("*_relmat.tsv"))) == 1
    assert not (out / "sub-02").exists()
