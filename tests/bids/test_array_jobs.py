"""The array-job pattern on the local engine: one participant per call, side by side on one
output, each call's own logs, then the group level reading them all."""

from __future__ import annotations

import json
import threading

import nibabel as nib
import pytest

from connscale.bidsapp import participant
from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import output_lock, run_participant
from connscale.bidsapp.participant_logs import participant_reports
from connscale.bidsapp.selection import read_participants_file, select_participants
from connscale.cli.main import main
from connscale.io.bids import write_dataset_description
from connscale.io.lock import OutputLockedError
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

SUBJECTS = ("01", "02", "03")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bids")
    root = make_fmriprep(tmp / "fmriprep", [(s, None, "rest", None) for s in SUBJECTS])
    nib.save(atlas_img(), tmp / ATLAS)
    (tmp / "participants.tsv").write_text(
        "participant_id\tage\n" + "".join(f"sub-{s}\t{20 + i}\n" for i, s in enumerate(SUBJECTS))
    )
    return tmp, root


@pytest.fixture(autouse=True)
def _no_slurm(monkeypatch):
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)


def _keywords(tmp, **extra) -> dict:
    keywords = {
        "atlas": tmp / ATLAS,
        "atlas_name": "Slab4",
        "strategy": "none",
        "measures": ("fc",),
        "backend": "serial",
        "reports": False,
        "verbose": 0,
    }
    return {**keywords, **extra}


def _subjects(out) -> list[str]:
    return sorted(p.name for p in out.glob("sub-*") if list(p.glob("func/*_relmat.tsv")))


def test_calls_on_disjoint_participants_run_together_and_the_group_reads_them_all(
    tree, tmp_path, monkeypatch
):
    tmp, root = tree
    out = tmp_path / "out"
    # Each call waits in its run for the other's: they pass only when both run at once.
    both_running = threading.Barrier(2, timeout=60)
    run_one = participant.run_one

    def run_one_with_the_other(task, prepared=None):
        both_running.wait()
        return run_one(task, prepared)

    monkeypatch.setattr(participant, "run_one", run_one_with_the_other)
    reports, failures = {}, []

    def call(label):
        try:
            reports[label] = run_participant(root, out, participant_label=[label], **_keywords(tmp))
        except Exception as exc:  # noqa: BLE001 - the test reports it below
            failures.append(exc)

    threads = [threading.Thread(target=call, args=(s,)) for s in ("01", "02")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    assert {s: r.counts for s, r in reports.items()} == {
        s: {"ok": 1, "skipped": 0, "error": 0} for s in ("01", "02")
    }
    assert reports["01"].report_path != reports["02"].report_path
    assert sorted(participant_reports(out)) == sorted(r.report_path for r in reports.values())
    for label, report in reports.items():
        assert report.report_path.name.startswith(f"participant_sub-{label}_")
        assert report.errors_path.is_file()
        assert [r["subject"] for r in json.loads(report.report_path.read_text())["records"]] == [
            label
        ]
    assert not (out / ".bids.lock").exists()
    monkeypatch.setattr(participant, "run_one", run_one)

    # A third call fails its run; the group level reads the outputs of all and its log too.
    broken = tmp_path / "fmriprep"
    import shutil

    shutil.copytree(root, broken)
    bold = next((broken / "sub-03" / "func").glob("*_bold.nii.gz"))
    bold.write_bytes(bold.read_bytes()[:200])  # truncated
    third = run_participant(broken, out, participant_label=["03"], **_keywords(tmp))
    assert third.counts["error"] == 1 and len(participant_reports(out)) == 3
    result = run_group(out, atlas_name="Slab4", strategy="none")
    assert result.subjects == ["01", "02"] and len(result.runs) == 2
    assert [(e["subject"], e["status"]) for e in result.left_out] == [("03", "error")]


def test_the_array_task_index_picks_its_participant(tree, tmp_path, monkeypatch):
    tmp, root = tree
    out = tmp_path / "out"
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    report = run_participant(
        root, out, participant_label_file=tmp / "participants.tsv", **_keywords(tmp)
    )
    assert [r["subject"] for r in report.records] == ["02"] and report.counts["ok"] == 1
    assert _subjects(out) == ["sub-02"]
    assert report.report_path.name.startswith("participant_sub-02_")
    assert report.report_path.name.endswith("-job4242_report.json")
    # --array-index wins over the environment; a plain list of labels, from the command line
    labels = tmp_path / "subjects.txt"
    labels.write_text("sub-03\n\n01\n")
    argv = ["bids", root, out, "participant", "--atlas", tmp / ATLAS, "--atlas-name", "Slab4"]
    argv += ["--denoise", "none", "--measures", "fc", "--backend", "serial", "--no-reports"]
    argv += ["--participant-label-file", labels, "--array-index", "1", "-q"]
    assert main(list(map(str, argv))) == 0
    assert _subjects(out) == ["sub-01", "sub-02"]
    assert len(participant_reports(out)) == 2  # the same job's second call: its own log


def test_a_task_takes_its_k_participants(tree, tmp_path, monkeypatch):
    tmp, root = tree
    listing = str(tmp / "participants.tsv")
    assert select_participants(None, listing, 0, 2) == ("01", "02")
    assert select_participants(None, listing, 1, 2) == ("03",)  # the last task: fewer
    assert select_participants(None, listing, 0, 5) == SUBJECTS
    with pytest.raises(
        ValueError,
        match=r"3 participants, 2 a task, are indexed 0 to 1 "
        r"\(sbatch --array=0-1\)",
    ):
        select_participants(None, listing, 2, 2)
    with pytest.raises(ValueError, match="--participants-per-task needs --participant-label-file"):
        select_participants(None, None, None, 2)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    with pytest.raises(ValueError, match=r"needs an array task's index: --array-index, or \$SLURM"):
        select_participants(None, listing, None, 2)  # K would go unused: the whole file
    # an array task of the command line, its index from SLURM: one call, two participants
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    out = tmp_path / "out"
    argv = ["bids", root, out, "participant", "--atlas", tmp / ATLAS, "--atlas-name", "Slab4"]
    argv += ["--denoise", "none", "--measures", "fc", "--backend", "serial", "--no-reports"]
    argv += ["--participant-label-file", listing, "--participants-per-task", "2", "-q"]
    assert main(list(map(str, argv))) == 0
    assert _subjects(out) == ["sub-01", "sub-02"]
    (report,) = participant_reports(out)
    assert report.name.startswith("participant_sub-01+1_")  # the first and one more


def test_without_an_index_the_file_gives_all_its_participants(tree, monkeypatch):
    tmp, _ = tree
    assert select_participants(None, str(tmp / "participants.tsv"), None) == SUBJECTS
    assert select_participants(("01",), None, None) == ("01",)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")  # an array job that passes --participant-label
    assert select_participants(("02",), None, None) == ("02",)


@pytest.mark.parametrize(
    "label, content, index, environment, error, match",
    [
        (None, "sub-01\nsub-02\n", 2, None, ValueError, "Array index 2 is outside .* its 2 "
         r"participants are indexed 0 to 1 \(sbatch --array=0-1\)"),
        (None, "sub-01\n", None, "7", ValueError, "Array index 7 is outside"),
        (None, "sub-01\n", None, "1-3", ValueError, r"\$SLURM_ARRAY_TASK_ID is '1-3', not an"),
        (None, None, 0, None, FileNotFoundError, "No participants file at"),
        (("01",), "sub-01\n", None, None, ValueError, "--participant-label or "
         "--participant-label-file, not both"),
        (None, "age\tsex\n30\tF\n", 0, None, ValueError, "without a participant_id column"),
        (None, "01\nsub-01\n", 0, None, ValueError, "lists sub-01 more than once"),
        (None, "\n\n", 0, None, ValueError, "lists no participant"),
    ],
)  # fmt: skip
def test_selection_errors_are_one_line(
    tmp_path, monkeypatch, label, content, index, environment, error, match
):
    path = tmp_path / "participants.tsv"
    if content is not None:
        path.write_text(content)
    if environment is not None:
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", environment)
    with pytest.raises(error, match=match) as caught:
        select_participants(label, str(path), index)
    assert "\n" not in str(caught.value)


def test_an_index_needs_a_file():
    with pytest.raises(ValueError, match="--array-index needs --participant-label-file"):
        select_participants(None, None, 0)


def test_a_participant_the_tree_lacks_is_a_one_line_error(tree, tmp_path, capsys, monkeypatch):
    tmp, root = tree
    labels = tmp_path / "subjects.txt"
    labels.write_text("01\n07\n")
    argv = ["bids", root, tmp_path / "out", "participant", "--atlas", tmp / ATLAS]
    argv += ["--atlas-name", "Slab4", "--denoise", "none", "--participant-label-file", labels]
    assert main(list(map(str, [*argv, "--array-index", "1"]))) == 2
    [message] = capsys.readouterr().err.strip().splitlines()
    assert message.startswith("connscale bids: error: No preprocessed BOLD")
    assert "matches participant=['07']" in message
    assert read_participants_file(labels) == ["01", "07"]
    assert main(list(map(str, [*argv, "--array-index", "2"]))) == 2
    [message] = capsys.readouterr().err.strip().splitlines()
    assert message.startswith("connscale bids: error: Array index 2 is outside")
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    assert main(list(map(str, [*argv, "--participants-per-task", "2"]))) == 2
    [message] = capsys.readouterr().err.strip().splitlines()
    assert message.startswith("connscale bids: error: --participants-per-task needs an array")
    assert not (tmp_path / "out").exists()  # refused before any write


def test_the_group_level_never_runs_beside_a_participant_call(tree, tmp_path, capsys):
    tmp, _ = tree
    out = tmp_path / "out"
    out.mkdir()
    with output_lock(out, shared=True), output_lock(out, shared=True):  # two participant calls
        with pytest.raises(OutputLockedError, match=r"pid \d+"):
            output_lock(out).acquire()
        assert main(["bids", str(tmp), str(out), "group", "-q"]) == 2
        assert "is being written by another connscale run" in capsys.readouterr().err
    assert not (out / ".bids.lock").exists()  # the last participant call removed it
    with output_lock(out):  # the group level: participant calls wait or stop
        with pytest.raises(OutputLockedError):
            output_lock(out, shared=True).acquire()


def test_racing_descriptions_are_whole_and_left_alone_when_the_same(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    write = [None] * 8
    barrier = threading.Barrier(len(write))

    def describe(i):
        barrier.wait()
        write[i] = write_dataset_description(
            out, name="connscale", links={"preprocessed": "../fmriprep"}, exclusive=True
        )

    threads = [threading.Thread(target=describe, args=(i,)) for i in range(len(write))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    path = out / "dataset_description.json"
    assert write == [path] * len(write)
    assert json.loads(path.read_text())["DatasetLinks"] == {"preprocessed": "../fmriprep"}
    assert not list(out.glob(".*.tmp"))
    before = path.stat()
    write_dataset_description(out, name="connscale", links={"preprocessed": "../fmriprep"})
    assert path.stat().st_ino == before.st_ino  # the same description: not replaced
    write_dataset_description(out, name="connscale", links={"preprocessed": "../other"})
    assert path.stat().st_ino != before.st_ino
    path.write_text(json.dumps({"Name": "x", "GeneratedBy": [{"Name": "XCP-D"}]}))
    with pytest.raises(FileExistsError, match="another tool's dataset"):
        write_dataset_description(out, links={"preprocessed": "../fmriprep"}, exclusive=True)
