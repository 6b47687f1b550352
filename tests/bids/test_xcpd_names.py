"""``--output-spelling xcpd``: XCP-D's output names, indexed by pybids."""

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp.participant import run_participant
from connscale.bidsapp.xcpd_names import xcpd_entities
from connscale.io.relmat import read_relmat_tsv
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep, participant_log
from tests.bids._pybids import assert_pybids_reads

SOURCE = "sub-01_task-rest_space-MNI152NLin2009cAsym"
OPTIONS = {
    "atlas_name": "Slab4",
    "strategy": "simple",
    "strategy_params": {"motion": "basic", "wm_csf": "basic"},
    "measures": ["fc", "timeseries", "alff", "reho"],
    "write_denoised": True,
    "backend": "serial",
    "device": "cpu",
    "reports": False,
}


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("xcpd")
    root = make_fmriprep(tmp / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp / ATLAS)
    for spelling in ("xcpd", "giga"):
        report = run_participant(
            root, tmp / spelling, atlas=tmp / ATLAS, output_spelling=spelling, **OPTIONS
        )
        assert report.counts["ok"] == 1, report.records
    return tmp, root


def _names(out):
    return sorted(p.name for p in (out / "sub-01" / "func").iterdir() if p.name.startswith("sub-"))


def test_xcpd_spelling_writes_xcpds_names(trees):
    tmp, root = trees
    names = _names(tmp / "xcpd")
    expected = [
        f"{SOURCE}_atlas-Slab4_stat-coverage_bold.tsv",
        f"{SOURCE}_atlas-Slab4_stat-mean_timeseries.tsv",
        f"{SOURCE}_atlas-Slab4_stat-pearsoncorrelation_relmat.tsv",
        f"{SOURCE}_desc-denoised_bold.nii.gz",
        f"{SOURCE}_stat-alff_boldmap.nii.gz",
        f"{SOURCE}_stat-falff_boldmap.nii.gz",
        f"{SOURCE}_stat-reho_boldmap.nii.gz",
        f"{SOURCE}_atlas-Slab4_stat-alff_bold.tsv",
        f"{SOURCE}_atlas-Slab4_stat-falff_bold.tsv",
        f"{SOURCE}_atlas-Slab4_stat-reho_bold.tsv",
        f"{SOURCE}_desc-linc_qc.tsv",  # the run's QC table (issue 25, item 6)
    ]
    sidecars = [n.split(".")[0] + ".json" for n in expected]
    manifests = [n for n in names if n.endswith("_manifest.json")]
    assert sorted(set(names) - set(manifests)) == sorted(expected + sidecars)
    # The sets keep connscale's names (resume reads them so): the files alone change.
    assert manifests == [f for f in _names(tmp / "giga") if f.endswith("_manifest.json")]
    (giga_relmat,) = [n for n in _names(tmp / "giga") if n.endswith("_relmat.tsv")]
    assert giga_relmat == f"{SOURCE}_seg-Slab4_meas-PearsonCorrelation_desc-simple_relmat.tsv"
    xcpd, _ = read_relmat_tsv(tmp / "xcpd" / "sub-01" / "func" / expected[2])
    same, _ = read_relmat_tsv(tmp / "giga" / "sub-01" / "func" / giga_relmat)
    np.testing.assert_array_equal(xcpd, same)
    assert_pybids_reads(tmp / "xcpd", source=root)


def test_resume_and_a_second_strategy_in_an_xcpd_tree(trees):
    tmp, root = trees
    again = run_participant(
        root, tmp / "xcpd", atlas=tmp / ATLAS, output_spelling="xcpd", **OPTIONS
    )
    assert again.counts["skipped"] == 1
    other = run_participant(
        root,
        tmp / "xcpd",
        atlas=tmp / ATLAS,
        output_spelling="xcpd",
        **{
            **OPTIONS,
            "strategy": "scrubbing",
            "strategy_params": {**OPTIONS["strategy_params"], "fd_threshold": 0.15, "scrub": 0},
        },
    )
    # XCP-D's names hold no strategy: another strategy's files are refused, not replaced.
    assert other.counts["error"] == 1
    _, errors = participant_log(tmp / "xcpd")
    assert "is not part of a connscale" in errors[1]


@pytest.mark.parametrize(
    ("entities", "suffix", "extension", "expected"),
    [
        (
            {"sub": "1", "space": "fsLR", "seg": "A", "den": "91k", "stat": "mean", "desc": "s"},
            "timeseries",
            ".ptseries.nii",
            {"sub": "1", "space": "fsLR", "den": "91k", "atlas": "A", "stat": "mean"},
        ),
        (
            {"sub": "1", "space": "MNI", "res": "2", "seg": "A", "stat": "alff", "desc": "s"},
            "bold",
            ".tsv",
            {"sub": "1", "space": "MNI", "atlas": "A", "stat": "alff"},
        ),
        (
            {"sub": "1", "space": "MNI", "res": "2", "stat": "reho", "desc": "s"},
            "boldmap",
            ".nii.gz",
            {"sub": "1", "space": "MNI", "res": "2", "stat": "reho"},
        ),
        ({"sub": "1", "desc": "s"}, "qc", ".tsv", {"sub": "1", "desc": "linc"}),
    ],
)
def test_xcpd_entities(entities, suffix, extension, expected):
    assert xcpd_entities(entities, suffix, extension) == (expected, suffix)
