"""The BIDS-App's output folder: participant calls side by side, the group level
alone, and its ``logs`` folder never reached through a planted link (the
harness of :mod:`tests.faults.test_writes`)."""

from __future__ import annotations

import json
import os

import nibabel as nib
import pytest

from connscale.bidsapp.participant_logs import participant_reports
from connscale.cli.main import main
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep, participant_log
from tests.faults.test_writes import (
    finish,
    one_line_error,
    run_cli,
    start_paused,
    start_waiting,
)

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bids")
    root = make_fmriprep(tmp / "fmriprep", [("01", None, "rest", None), ("02", None, "rest", None)])
    nib.save(atlas_img(), tmp / ATLAS)
    return tmp, root


def participant_argv(tmp, root, out):
    return [
        "bids",
        root,
        out,
        "participant",
        "--atlas",
        tmp / ATLAS,
        "--atlas-name",
        "Slab4",
        "--denoise",
        "none",
        "--measures",
        "fc",
        "--backend",
        "serial",
        "--no-reports",
        "-q",
    ]


def test_a_planted_logs_link_is_refused_and_nothing_is_written_outside(tree, tmp_path):
    tmp, root = tree
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "logs")
    failed = run_cli(participant_argv(tmp, root, out))
    message = one_line_error(failed, "bids")
    assert "logs" in message and "symbolic link" in message
    assert list(outside.iterdir()) == []
    assert not list(out.glob("sub-*"))  # refused before any run


def test_participant_calls_share_the_output_and_the_group_level_waits_for_them(
    tree, tmp_path, capsys
):
    tmp, root = tree
    out = tmp_path / "out"
    argv = participant_argv(tmp, root, out)
    # the first call pauses while it writes sub-01's set (its lock held)
    first = start_paused(argv, "connscale.bidsapp.participant:_write_set")
    try:
        # the group level, which reads the outputs being written, stops
        assert main(list(map(str, ["bids", root, out, "group", "-q"]))) == 2
        [message] = capsys.readouterr().err.strip().splitlines()
        assert message.startswith("connscale bids: error: ")
        assert f"pid {first.pid}" in message and "--wait" in message
        # a second participant call runs beside it: sub-01, being written, is its error
        assert main(list(map(str, argv))) == 1
        report, errors = participant_log(out)
        assert report["counts"] == {"ok": 1, "skipped": 0, "error": 1}
        [row] = errors[1:]
        assert row.startswith("sub-01_") and f"pid {first.pid}" in row and "--wait" in row
        # with --wait, a third call waits for sub-01 and finds it published
        waiting = start_waiting(argv)
    finally:
        code, _, err = finish(first)
    assert code == 0, err[-2000:]
    _, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err[-2000:]
    assert len(list(out.glob("sub-*/func/*_relmat.tsv"))) == 2
    # each call kept its own log: the first wrote sub-01, the second sub-02
    logs = {p.name.split("-pid")[1].split("_")[0]: p for p in participant_reports(out)}
    counts = {pid: json.loads(p.read_text())["counts"] for pid, p in logs.items()}
    assert counts[str(first.pid)] == {"ok": 1, "skipped": 1, "error": 0}
    assert counts[str(waiting.pid)] == {"ok": 0, "skipped": 2, "error": 0}
    assert len(counts) == 3
    assert not (out / ".bids.lock").exists()
