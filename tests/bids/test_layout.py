"""pybids input: each run's BOLD, mask, confounds and TR; filters; what was found."""

import json
import warnings
from pathlib import Path

import pytest

from connscale.bidsapp import find_runs
from tests.bids._fmriprep import make_fmriprep

RUNS = [
    ("01", "1", "rest", "1"),
    ("01", "1", "rest", "2"),
    ("01", "2", "nback", None),
    ("02", None, "rest", None),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_fmriprep(tmp_path_factory.mktemp("d") / "fmriprep", RUNS)


def test_every_run_with_its_own_companions(tree):
    runs = find_runs(tree)
    assert [r.name for r in runs] == [
        "sub-01_ses-1_task-rest_run-1_space-MNI152NLin2009cAsym",
        "sub-01_ses-1_task-rest_run-2_space-MNI152NLin2009cAsym",
        "sub-01_ses-2_task-nback_space-MNI152NLin2009cAsym",
        "sub-02_task-rest_space-MNI152NLin2009cAsym",
    ]
    for r in runs:
        stem = r.name.replace("_space-MNI152NLin2009cAsym", "")
        assert r.problem is None and r.t_r == 2.0
        assert r.mask.name == f"{r.name}_desc-brain_mask.nii.gz"
        assert r.confounds.name == f"{stem}_desc-confounds_timeseries.tsv"
        assert r.confounds_json.name == f"{stem}_desc-confounds_timeseries.json"
        assert r.mask.parent == r.bold.parent


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"participant_label": ["sub-01"]}, 3),
        ({"participant_label": "02"}, 1),
        ({"session_label": "1"}, 2),
        ({"task": "nback"}, 1),
        ({"run": [2]}, 1),
        ({"space": "MNI152NLin2009cAsym", "task": "rest"}, 3),
    ],
)
def test_filters(tree, filters, expected):
    assert len(find_runs(tree, **filters)) == expected


def test_no_match_lists_what_was_found(tree):
    with pytest.raises(
        ValueError,
        match=r"matches participant=\['03'\]; found 4 BOLD file\(s\) "
        r"with subject 01, 02; session 1, 2; task nback, rest",
    ):
        find_runs(tree, participant_label="03")
    with pytest.raises(ValueError, match="desc-smoothAROMAnonaggr"):
        find_runs(tree, strategy="ica_aroma")


def test_a_participant_call_indexes_only_its_participants(tmp_path):
    """pybids indexes only the folders of the participants asked for (a SLURM
    array job of a large cohort does not index the whole tree): ``sub-01``
    is not ``sub-010``; the runs found are those of the whole tree's index."""
    from connscale.bidsapp.layout import load_layout

    subjects = [(label, None, "rest", None) for label in ("01", "010", "02")]
    root = make_fmriprep(tmp_path / "d", subjects)
    assert load_layout(root, participants=["01"]).get_subjects() == ["01"]
    assert load_layout(root, participants=["01", "010"]).get_subjects() == ["01", "010"]
    assert sorted(load_layout(root).get_subjects()) == ["01", "010", "02"]
    assert [r.name for r in find_runs(root, participant_label="sub-01")] == [
        "sub-01_task-rest_space-MNI152NLin2009cAsym"
    ]


def test_missing_companions_are_problems_not_failures(tmp_path):
    root = make_fmriprep(tmp_path / "d", RUNS[:2])
    next(root.rglob("*run-2_desc-confounds_timeseries.tsv")).unlink()
    sidecar = next(root.rglob("*run-1_*_bold.json"))
    sidecar.write_text(json.dumps({}))
    runs = find_runs(root)
    assert "no RepetitionTime" in runs[0].problem
    assert find_runs(root, t_r=1.5)[0].t_r == 1.5
    assert runs[1].problem.startswith("no confounds TSV for sub-01_ses-1_task-rest_run-2")


def test_repetition_time_inherited_from_a_dataset_sidecar(tmp_path):
    """A TR given once for the task at the dataset's root (BIDS inheritance) is
    every run's; a run's own sidecar overrides it."""
    root = make_fmriprep(tmp_path / "d", RUNS)
    for sidecar in root.rglob("*_bold.json"):
        sidecar.write_text(json.dumps({"SkullStripped": False}))
    (root / "task-rest_bold.json").write_text(json.dumps({"RepetitionTime": 0.8}))
    next(root.rglob("*run-2_*_bold.json")).write_text(json.dumps({"RepetitionTime": 1.5}))
    runs = {r.name.split("_space")[0]: r for r in find_runs(root)}
    assert runs["sub-01_ses-1_task-rest_run-1"].t_r == 0.8
    assert runs["sub-01_ses-1_task-rest_run-2"].t_r == 1.5
    assert runs["sub-02_task-rest"].t_r == 0.8
    assert "no RepetitionTime" in runs["sub-01_ses-2_task-nback"].problem


def test_only_the_runs_folders_are_indexed(tmp_path):
    """anat, figures and log folders and the func files that are not read (most
    of an fMRIPrep tree) are not indexed; sessions' func folders and the files
    at the dataset's root are."""
    from connscale.bidsapp.layout import load_layout

    root = make_fmriprep(tmp_path / "d", RUNS)
    for folder in ("sub-01/anat", "sub-01/ses-1/anat", "sub-01/figures", "sub-02/log"):
        (root / folder).mkdir(parents=True)
        (root / folder / f"{folder.split('/')[0]}_desc-preproc_T1w.nii.gz").write_bytes(b"")
    func = next(root.rglob("func"))
    for name in ("sub-01_task-rest_desc-coreg_boldref.nii.gz", "sub-01_from-T1w_xfm.txt"):
        (func / name).write_bytes(b"")
    indexed = load_layout(root).get(return_type="file")
    assert not [p for p in indexed if "boldref" in p or "xfm" in p or "T1w" in p]
    paths = {Path(p).relative_to(root).parts[:3] for p in indexed}
    assert {p[1] for p in paths if len(p) > 2} == {"func", "ses-1", "ses-2"}
    assert {p[2] for p in paths if len(p) > 2 and p[1].startswith("ses-")} == {"func"}
    assert ("dataset_description.json",) in paths
    assert len(find_runs(root)) == len(RUNS)


def test_companions_match_space_resolution_and_every_run_entity(tmp_path):
    """Masks are matched on the BOLD's space and resolution and on every run entity
    (present or absent); confounds on the run entities alone; two masks are refused."""
    from tests.bids._fmriprep import write_run

    func = tmp_path / "d" / "sub-01" / "func"
    write_run(func, "sub-01_task-rest", seed=0, space="MNI152NLin2009cAsym_res-2")
    write_run(func, "sub-01_task-rest", seed=1, space="MNI152NLin2009cAsym_res-1")
    write_run(func, "sub-01_task-rest_run-1", seed=2, space="T1w")
    write_run(func, "sub-01_task-rest_acq-fast", seed=2, space="T1w")
    runs = {r.name: r for r in find_runs(tmp_path / "d")}
    assert len(runs) == 4
    for name, r in runs.items():
        assert r.problem is None, r.problem
        assert r.mask.name == f"{name}_desc-brain_mask.nii.gz"
        source = name.split("_space-")[0]
        assert r.confounds.name == f"{source}_desc-confounds_timeseries.tsv"
    twin = func / "sub-01_task-rest_run-1_space-T1w_desc-brain_mask.nii"
    twin.write_bytes(b"")
    run = {r.name: r for r in find_runs(tmp_path / "d")}["sub-01_task-rest_run-1_space-T1w"]
    assert run.mask is None and run.problem.startswith("several brain mask files")


def test_nilearn_fake_bids_dataset(tmp_path):
    from nilearn._utils.data_gen import create_fake_bids_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = Path(
            create_fake_bids_dataset(
                base_dir=tmp_path, n_sub=2, n_ses=1, tasks=["rest"], n_runs=[2]
            )
        )
    runs = find_runs(root / "derivatives", space="MNI", t_r=2.0)
    assert len(runs) == 4
    for r in runs:
        assert r.problem is None and r.entities["space"] == "MNI"
        assert r.mask.name == f"{r.name}_desc-brain_mask.nii.gz"  # not the T1w one
        assert r.confounds.name.endswith("_desc-confounds_timeseries.tsv")
    assert len(find_runs(root / "derivatives", space="T1w", participant_label="02")) == 2


def test_find_runs_declares_its_constraints(tmp_path):
    with pytest.raises(
        ValueError,
        match="The 'strategy' parameter of find_runs must be a str "
        "among .* Got 'aggressive' instead.",
    ):
        find_runs(tmp_path, strategy="aggressive")
    with pytest.raises(
        ValueError,
        match=r"The 't_r' parameter of find_runs must be a float in "
        r"the range \(0, inf\) or None. Got 0 instead.",
    ):
        find_runs(tmp_path, t_r=0)
