"""BIDS derivative names build and parse back, with pybids too."""

import pytest

from connscale.io.bids import (
    bids_name,
    derivative_path,
    from_pybids,
    parse_bids_name,
    pybids_config,
)

ENTITIES = {
    "sub": "01",
    "ses": "2",
    "task": "rest",
    "run": "03",
    "space": "MNI152NLin2009cAsym",
    "seg": "Schaefer100",
    "meas": "PearsonCorrelation",
    "desc": "scrubbing",
}


def test_order_and_folder(tmp_path):
    path = derivative_path(
        tmp_path, dict(reversed(ENTITIES.items())), suffix="relmat", extension=".tsv"
    )
    assert path == tmp_path / "sub-01" / "ses-2" / "func" / (
        "sub-01_ses-2_task-rest_run-03_space-MNI152NLin2009cAsym_seg-Schaefer100"
        "_meas-PearsonCorrelation_desc-scrubbing_relmat.tsv"
    )
    no_ses = derivative_path(
        tmp_path, {"sub": "01", "task": "rest"}, suffix="timeseries", extension=".json"
    )
    assert no_ses == tmp_path / "sub-01" / "func" / "sub-01_task-rest_timeseries.json"


def test_parse_back_and_with_pybids(tmp_path):
    from bids.layout import parse_file_entities

    path = derivative_path(tmp_path, ENTITIES, suffix="relmat", extension=".tsv")
    parsed = parse_bids_name(path)
    assert parsed == {**ENTITIES, "suffix": "relmat", "extension": ".tsv"}
    by_pybids = parse_file_entities(str(path), config=["bids", "derivatives", pybids_config()])
    assert from_pybids(by_pybids) == ENTITIES
    assert by_pybids["suffix"] == "relmat" and by_pybids["extension"] == ".tsv"


@pytest.mark.parametrize(
    "entities, match",
    [
        ({"task": "rest"}, "needs a subject"),
        ({"sub": "01", "atlas_name": "x"}, "Unknown BIDS entities"),
        ({"sub": "01", "seg": "Schaefer_100"}, "seg- must be letters"),
    ],
)
def test_bad_entities(entities, match):
    with pytest.raises(ValueError, match=match):
        bids_name(entities, suffix="relmat", extension=".tsv")


def test_bad_names():
    with pytest.raises(ValueError, match="not a known BIDS entity"):
        parse_bids_name("sub-01_foo-1_bold.nii.gz")
    with pytest.raises(ValueError, match="not a BIDS name"):
        parse_bids_name("fmri1.nii.gz")


def test_map_names_keep_one_desc(tmp_path):
    from connscale.io.maps import map_path

    # fMRIPrep's desc-preproc is the input's, not the map's: one desc-, in BIDS order.
    path = map_path(tmp_path, "sub-01_task-rest_desc-preproc", "degree", desc="r025", seg="A")
    assert path.name == "sub-01_task-rest_seg-A_stat-degree_desc-r025_boldmap.nii.gz"
    assert parse_bids_name(path)["desc"] == "r025"
    assert map_path(tmp_path, "fmri1", "gcor").name == "fmri1_stat-gcor_boldmap.nii.gz"


def test_unknown_suffix_is_refused():
    # (issue 25: '_bold.tsv' is now written, the coverage table as XCP-D names it)
    with pytest.raises(ValueError, match="connscale writes no '_bold.h5' file; suffixes: relmat"):
        bids_name({"sub": "01"}, suffix="bold", extension=".h5")
