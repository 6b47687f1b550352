"""The demo's BIDS-App step on the synthetic fMRIPrep tree of connscale.datasets.fmriprep."""

import argparse
import json

import pytest

from connscale.bidsapp.layout import find_runs
from connscale.cli.demo import _bids_app
from connscale.datasets.fmriprep import make_fmriprep_tree
from tests.bids._pybids import assert_pybids_reads


def test_synthetic_tree_is_read_by_pybids(tmp_path):
    tree = make_fmriprep_tree(tmp_path, n_subjects=4)
    runs = find_runs(tree.derivatives)
    assert [r.entities["sub"] for r in runs] == ["01", "02", "03", "04"]
    assert all(r.problem is None and r.t_r == 2.0 for r in runs)
    assert tree.participants.read_text().splitlines()[1:3] == [
        "sub-01\tcontrol",
        "sub-02\tpatient",
    ]
    with pytest.raises(ValueError, match="at least 2"):
        make_fmriprep_tree(tmp_path / "x", n_subjects=1)


def test_demo_bids_step_writes_the_group_report(tmp_path):
    report = _bids_app(tmp_path, argparse.Namespace(seed=0, device="cpu"))
    assert report.is_file() and report.parent.name == "group"
    assert len(list((tmp_path / "connscale").glob("sub-*/func/*_dfc.h5"))) == 6
    assert len(list((tmp_path / "connscale").glob("sub-*/func/*_report.html"))) == 6
    # pybids indexes the demo's output, alone and as a derivative of its input dataset.
    out = tmp_path / "connscale"
    link = json.loads((out / "dataset_description.json").read_text())["DatasetLinks"]
    assert_pybids_reads(out, source=out / link["preprocessed"])
