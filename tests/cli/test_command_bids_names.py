"""fc, dfc and cohort name their outputs as BIDS derivatives that pybids reads back."""

import json

import nibabel as nib
import numpy as np
import pytest

from connscale.cli.main import main
from connscale.io.bids import from_pybids, pybids_config, seg_label, source_entities
from tests.bids._pybids import assert_pybids_reads

SOURCE = {"sub": "01", "ses": "2", "task": "rest", "run": "1", "space": "MNI152NLin2009cAsym"}


def _pybids(path):
    from bids.layout import parse_file_entities

    parsed = parse_file_entities(str(path), config=["bids", "derivatives", pybids_config()])
    return from_pybids(parsed), parsed["suffix"], parsed["extension"]


@pytest.fixture
def bold(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((4, 4, 3, 40)).astype(np.float32) + 100
    img = nib.Nifti1Image(data, np.diag([3.0, 3.0, 3.0, 1.0]))
    img.header.set_xyzt_units("mm", "sec")
    img.header["pixdim"][4] = 2.0
    path = tmp_path / (
        "sub-01_ses-2_task-rest_run-1_space-MNI152NLin2009cAsym_desc-preproc_bold.nii.gz"
    )
    img.to_filename(path)
    atlas = np.zeros((4, 4, 3), np.int16)
    atlas[:2], atlas[2:] = 1, 2
    atlas[:, :2] += 2
    atlas_path = tmp_path / "tpl-MNI_res-2_atlas-Toy4_dseg.nii.gz"
    nib.Nifti1Image(atlas, img.affine).to_filename(atlas_path)
    return path, atlas_path


def test_source_entities_and_seg_label():
    assert source_entities("sub-01_task-rest_desc-preproc_bold.nii.gz") == {
        "sub": "01",
        "task": "rest",
    }
    assert source_entities("sub-01_task-rest_seg-A_desc-simple_timeseries.tsv") == {
        "sub": "01",
        "task": "rest",
        "seg": "A",
        "desc": "simple",
    }
    assert source_entities("scan_1.nii.gz") == {"sub": "scan1"}
    assert source_entities("scan_1.npy", subject="07") == {"sub": "07"}
    assert seg_label("tpl-MNI_atlas-Schaefer2018_desc-100Parcels_dseg.nii.gz") == "Schaefer2018"
    assert seg_label("/atlases/Schaefer_100.nii.gz") == "Schaefer100"


def test_fc_and_dfc_names_parse_back(tmp_path, bold):
    path, atlas = bold
    out = tmp_path / "out"
    common = ["--out", str(out), "--device", "cpu", "-q"]
    assert main(["fc", str(path), "--atlas", str(atlas), *common]) == 0
    assert main(["fc", str(path), "--atlas", str(atlas), "--atlas-name", "Other", *common]) == 0
    assert (
        main(["dfc", str(path), "--atlas", str(atlas), "--window", "10", "--step", "5", *common])
        == 0
    )
    func = out / "sub-01" / "ses-2" / "func"
    names = sorted(
        p.name
        for p in func.iterdir()
        if p.suffix in (".tsv", ".h5") or p.name.endswith("relmat.json")
    )
    stem = "sub-01_ses-2_task-rest_run-1_space-MNI152NLin2009cAsym"
    assert names == [
        f"{stem}_seg-Other_meas-PearsonCorrelation_relmat.json",
        f"{stem}_seg-Other_meas-PearsonCorrelation_relmat.tsv",
        f"{stem}_seg-Toy4_meas-PearsonCorrelation_dfc.h5",
        f"{stem}_seg-Toy4_meas-PearsonCorrelation_relmat.json",
        f"{stem}_seg-Toy4_meas-PearsonCorrelation_relmat.tsv",
    ]
    for name, seg, suffix, ext in [
        (names[1], "Other", "relmat", ".tsv"),
        (names[2], "Toy4", "dfc", ".h5"),
        (names[3], "Toy4", "relmat", ".json"),
    ]:
        assert _pybids(func / name) == (
            {**SOURCE, "seg": seg, "meas": "PearsonCorrelation"},
            suffix,
            ext,
        )
    sidecar = json.loads((func / f"{stem}_seg-Toy4_meas-PearsonCorrelation_dfc.json").read_text())
    assert (sidecar["WindowLength"], sidecar["WindowStep"]) == (10, 5)
    description = json.loads((out / "dataset_description.json").read_text())
    assert description["GeneratedBy"][0]["Name"] == "connscale"
    assert_pybids_reads(out)


def test_cohort_names_parse_back(tmp_path, bold):
    path, atlas = bold
    out = tmp_path / "cohort"
    assert (
        main(
            [
                "cohort",
                str(path),
                "--job",
                "fc",
                "--atlas",
                str(atlas),
                "--atlas-name",
                "Toy",
                "--backend",
                "serial",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    [output] = (out / "sub-01" / "ses-2" / "func").glob("*.h5")
    assert _pybids(output) == (
        {**SOURCE, "seg": "Toy", "meas": "PearsonCorrelation"},
        "relmat",
        ".h5",
    )
    assert (out / "dataset_description.json").is_file()
    assert_pybids_reads(out)
    assert (
        main(
            [
                "cohort",
                str(path),
                "--job",
                "fc",
                "--atlas",
                str(atlas),
                "--atlas-name",
                "bad_name",
                "--backend",
                "serial",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 2
    )


def test_dfc_with_other_windows_never_replaces_a_result_silently(bold, tmp_path, capsys):
    path, atlas = bold
    out = tmp_path / "out"
    base = ["dfc", str(path), "--atlas", str(atlas), "--out", str(out), "--device", "cpu", "-q"]
    assert main([*base, "--window", "10"]) == 0
    (store,) = out.rglob("*_dfc.h5")
    first = store.read_bytes()
    capsys.readouterr()
    assert main([*base, "--window", "12"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "other parameters" in err and "--overwrite" in err
    assert store.read_bytes() == first
    assert main([*base, "--window", "12", "--overwrite"]) == 0
    assert store.read_bytes() != first
    (manifest,) = out.rglob("*_manifest.json")
    assert json.loads(manifest.read_text())["fingerprint"]["parameters"]["window"] == "12"
