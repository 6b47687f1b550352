"""The BIDS-App's output folder: one participant (or group) run at a time, and
its ``logs`` folder never reached through a planted link (the harness of
:mod:`tests.faults.test_writes`)."""

from __future__ import annotations

import json
import os

import nibabel as nib
import pytest

from connscale.cli.main import main
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep
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


def test_a_second_participant_run_stops_naming_the_first_or_waits(tree, tmp_path, capsys):
    tmp, root = tree
    out = tmp_path / "out"
    argv = participant_argv(tmp, root, out)
    first = start_paused(argv, "connscale.bidsapp.participant:run_one")
    try:
        # a second run, and the group level (which reads the outputs being written)
        for second in (argv, ["bids", root, out, "group", "-q"]):
            assert main(list(map(str, second))) == 2
            [message] = capsys.readouterr().err.strip().splitlines()
            assert message.startswith("connscale bids: error: ")
            assert f"pid {first.pid}" in message and "--wait" in message
        waiting = start_waiting(argv)
    finally:
        code, _, err = finish(first)
    assert code == 0, err[-2000:]
    # (the first run's own log may already be the waiting run's: it starts once the lock is free)
    assert len(list(out.glob("sub-*/func/*_relmat.tsv"))) == 2
    _, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err[-2000:]
    # the second run found the first's runs published, none of them failed
    report = json.loads((out / "logs" / "participant_report.json").read_text())
    assert report["counts"] == {"ok": 0, "skipped": 2, "error": 0}
    assert (out / "logs" / "participant_errors.tsv").read_text().splitlines() == [
        "name\tinput\tstatus\tmeasure\terror"
    ]
    assert not (out / ".bids.lock").exists()
