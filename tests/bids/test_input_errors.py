"""A bad input of one run is one line naming the file (column, line), recorded; the rest go on.

Each broken run of the tree below raised a library's own error before
(``UnicodeDecodeError``, ``EmptyDataError``, ``TypeError: ufunc 'isnan'``,
"The confounds hold NaN" without the column, ``ZeroDivisionError`` for a zero
TR, "Unsupported input." for a run stored twice, a bare ``EOFError`` for a cut
BOLD).
"""

import json

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from connscale.bidsapp.participant import run_participant
from connscale.denoise import check_confounds_file
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

SPACE = "space-MNI152NLin2009cAsym"


def _confounds(func, sub):
    return func / f"sub-{sub}_task-rest_desc-confounds_timeseries.tsv"


def _set_cell(path, row, column, value):
    table = pd.read_csv(path, sep="\t")
    table[column] = table[column].astype(object)
    table.loc[row, column] = value
    table.to_csv(path, sep="\t", index=False, na_rep="n/a")


def _break(func, sub, case):
    """Damage run ``sub`` as ``case`` says."""
    bold = func / f"sub-{sub}_task-rest_{SPACE}_desc-preproc_bold.nii.gz"
    if case == "not utf-8":
        _confounds(func, sub).write_bytes(_confounds(func, sub).read_text().encode("utf-16"))
    elif case == "empty":
        _confounds(func, sub).write_text("")
    elif case == "header only":
        _confounds(func, sub).write_text(_confounds(func, sub).read_text().splitlines()[0] + "\n")
    elif case == "text":
        _set_cell(_confounds(func, sub), 5, "trans_x", "abc")
    elif case == "n/a":
        _set_cell(_confounds(func, sub), 12, "trans_y", np.nan)
    elif case.startswith("tr "):
        sidecar = bold.with_name(bold.name.replace(".nii.gz", ".json"))
        sidecar.write_text(json.dumps({"RepetitionTime": json.loads(case[3:])}))
    elif case == "twice":
        nib.save(nib.load(bold), bold.with_name(bold.name[: -len(".gz")]))
    elif case == "truncated":
        raw = bold.read_bytes()
        bold.write_bytes(raw[: len(raw) // 2])
    elif case == "no mask":
        next(func.glob("*_desc-brain_mask.nii.gz")).unlink()


CONFOUNDS = "sub-{sub}_task-rest_desc-confounds_timeseries.tsv"
BOLD = f"sub-{{sub}}_task-rest_{SPACE}_desc-preproc_bold"
CASES = {
    "not utf-8": CONFOUNDS + " is not UTF-8 text: byte 0xff at line 1.",
    "empty": CONFOUNDS + " is empty: no header, no row.",
    "header only": CONFOUNDS + " has a header and no row.",
    "text": CONFOUNDS + ": column 'trans_x' holds 'abc' at line 7 (volume 5), not a number.",
    "n/a": CONFOUNDS + ": regressor 'trans_y' is n/a at line 14 (volume 12); only its first "
    "volume may be n/a.",
    "tr 0": BOLD + ".json: RepetitionTime 0 must be positive (seconds)",
    "tr -2.0": BOLD + ".json: RepetitionTime -2.0 must be positive (seconds)",
    'tr "2s"': BOLD + ".json: RepetitionTime '2s' is not a number of seconds",
    "twice": "the run is stored twice, as " + BOLD + ".nii and " + BOLD + ".nii.gz: keep one",
    "truncated": BOLD + ".nii.gz is truncated or corrupt (Compressed file ended before the "
    "end-of-stream marker was reached).",
    "no mask": "no brain mask for " + BOLD + ".nii.gz",
}
SUBJECTS = {case: f"{i + 1:02d}" for i, case in enumerate(CASES)}
GOOD = f"{len(CASES) + 1:02d}"


@pytest.fixture(scope="module")
def participant(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inputs")
    subjects = [*SUBJECTS.values(), GOOD]
    root = make_fmriprep(tmp / "fmriprep", [(s, None, "rest", None) for s in subjects])
    for case, sub in SUBJECTS.items():
        _break(root / f"sub-{sub}" / "func", sub, case)
    nib.save(atlas_img(), tmp / ATLAS)
    report = run_participant(
        root,
        tmp / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic"},  # 30 volumes: the preset's 30 confounds leave no dof
        backend="serial",
        reports=False,
        verbose=0,
    )
    return {r["subject"]: r for r in report.records}, report.errors_path


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_naming_the_file_recorded(participant, case):
    records, errors_path = participant
    sub = SUBJECTS[case]
    record = records[sub]
    assert record["status"] == "error"
    assert record["error"] == "ValueError: " + CASES[case].format(sub=sub)
    rows = pd.read_csv(errors_path, sep="\t", dtype=str).set_index("name")
    assert rows.loc[f"sub-{sub}_task-rest_{SPACE}", "error"] == record["error"]


def test_the_other_runs_go_on(participant):
    records, errors_path = participant
    assert len(records) == len(CASES) + 1  # a run stored twice is one run
    # relmat, timeseries, the QC table and (issue 25) the coverage table, each with its sidecar
    assert records[GOOD]["status"] == "ok" and len(records[GOOD]["outputs"]) == 8
    assert len(pd.read_csv(errors_path, sep="\t")) == len(CASES)


def test_check_confounds_file_reads_what_fmriprep_writes(tmp_path):
    root = make_fmriprep(tmp_path / "d", [("01", None, "rest", None)])
    check_confounds_file(_confounds(root / "sub-01" / "func", "01"))  # n/a cells are fine
