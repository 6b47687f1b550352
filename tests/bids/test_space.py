"""The atlas's space against each run's; the atlas checked once, up front; its resampling recorded.

Before: an MNI atlas was applied to T1w-space runs without a word (every run
"ok"), and a 1.5 mm atlas was resampled onto 3 mm runs recorded nowhere.
"""

import json
import subprocess
import sys

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp.atlas import atlas_space
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from tests.bids._fmriprep import AFFINE, ATLAS, atlas_img, make_fmriprep, write_run

MNI = "MNI152NLin2009cAsym"
SUBJECTS = ["01", "02", "03"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Every run in MNI152NLin2009cAsym and in T1w (fMRIPrep's --output-spaces T1w MNI...)."""
    tmp = tmp_path_factory.mktemp("space")
    root = make_fmriprep(tmp / "fmriprep", [(s, None, "rest", None) for s in SUBJECTS])
    for i, sub in enumerate(SUBJECTS):
        write_run(root / f"sub-{sub}" / "func", f"sub-{sub}_task-rest", seed=i, space="T1w")
    nib.save(atlas_img(), tmp / ATLAS)
    nib.save(atlas_img(), tmp / "atlas.nii.gz")
    return tmp, root


def _participant(tmp, root, out, **kwargs):
    defaults = {"atlas": tmp / ATLAS, "atlas_name": "Slab4", "strategy": "simple"}
    defaults["strategy_params"] = {"motion": "basic"}  # 30 volumes: enough dof
    defaults.update({"backend": "serial", "reports": False, "verbose": 0})
    return run_participant(root, out, **{**defaults, **kwargs})


def _by_space(report):
    return {(r["name"].split("_space-")[1], r["status"]): r.get("error") for r in report.records}


def test_runs_in_another_space_are_refused_naming_both(tree, tmp_path):
    tmp, root = tree
    report = _participant(tmp, root, tmp_path / "out")
    assert report.counts == {"ok": 3, "skipped": 0, "error": 3}
    for record in report.records:
        if "space-T1w" in record["name"]:
            assert record["error"] == (
                f"ValueError: {record['name']}_desc-preproc_bold.nii.gz is in space T1w, the "
                f"atlas in {MNI}: select the runs of the atlas's space (--space) or give an "
                "atlas in theirs"
            )
        else:
            assert record["status"] == "ok"
    errors = report.errors_path.read_text().splitlines()
    assert len(errors) == 4 and all("space-T1w" in line for line in errors[1:])
    # The atlas's runs only: every run done.
    assert _participant(tmp, root, tmp_path / "mni", space=MNI).counts["error"] == 0


def test_atlas_space_option(tree, tmp_path):
    tmp, root = tree
    report = _participant(
        tmp, root, tmp_path / "out", atlas=tmp / "atlas.nii.gz", atlas_space="T1w"
    )
    ok = {r["name"].split("_space-")[1] for r in report.records if r["status"] == "ok"}
    assert ok == {"T1w"} and report.counts["error"] == 3
    # It overrides the atlas file's own tpl- entity.
    report = _participant(tmp, root, tmp_path / "t1w", atlas_space="T1w", space="T1w")
    assert report.counts == {"ok": 3, "skipped": 0, "error": 0}
    sidecar = json.loads(next((tmp_path / "t1w").rglob("*_relmat.json")).read_text())
    assert sidecar["AtlasSpace"] == "T1w"
    with pytest.raises(ValueError, match=r"--atlas-space must be a BIDS space label .* 'MNI_2'"):
        _participant(tmp, root, tmp_path / "bad", atlas_space="MNI_2")


def test_a_run_without_space_entity_is_native(tmp_path):
    root = make_fmriprep(tmp_path / "d", [("01", None, "rest", None)])
    for path in root.rglob("*_space-*"):
        path.rename(path.with_name(path.name.replace(f"_space-{MNI}", "")))
    nib.save(atlas_img(), tmp_path / ATLAS)
    report = _participant(tmp_path, root, tmp_path / "out")
    assert report.records[0]["error"] == (
        f"ValueError: sub-01_task-rest_desc-preproc_bold.nii.gz is in space native (no space- "
        f"entity), the atlas in {MNI}: select the runs of the atlas's space (--space) or give "
        "an atlas in theirs"
    )
    report = _participant(tmp_path, root, tmp_path / "native", atlas_space="native")
    assert report.counts["ok"] == 1


def test_atlas_space_from_its_name():
    assert atlas_space(f"tpl-{MNI}_res-02_atlas-Schaefer2018_desc-100Parcels_dseg.nii.gz") == MNI
    assert atlas_space("sub-01_space-T1w_atlas-X_dseg.nii.gz") == "T1w"
    assert atlas_space("tpl-MNI152NLin6Asym_space-T1w_dseg.nii.gz") == "T1w"  # data's space
    assert atlas_space("/atlases/tpl-X/Schaefer_100.nii.gz") is None  # the folder says nothing


def _bad_atlases(tmp):
    """(atlas, labels file, how the one line starts) of each atlas that fails every run."""
    labels = atlas_img().get_fdata()
    affine = AFFINE
    cases = {}

    def save(name, data):
        nib.save(nib.Nifti1Image(data, affine), tmp / name)
        return tmp / name

    cases["unknown space"] = (
        save("atlas.nii.gz", labels.astype(np.int16)),
        None,
        "The space of the atlas atlas.nii.gz is unknown: its name has no space- or tpl- entity; "
        f"pass --atlas-space (e.g. {MNI}, the space- of the runs it applies to).",
    )
    four_d = f"tpl-{MNI}_atlas-FourD_dseg.nii.gz"
    cases["4-D"] = (
        save(four_d, np.stack([labels, labels], axis=-1).astype(np.int16)),
        None,
        f"The atlas must be a 3-D labels image; {four_d} has shape (6, 6, 5, 2).",
    )
    empty = f"tpl-{MNI}_atlas-Empty_dseg.nii.gz"
    cases["no label"] = (
        save(empty, np.zeros_like(labels, dtype=np.int16)),
        None,
        f"The atlas {empty} holds no label above 0 (all background).",
    )
    half = labels.astype(np.float32)
    half[2, 2, 2] = 1.5
    floats = f"tpl-{MNI}_atlas-Prob_dseg.nii.gz"
    cases["not integer"] = (
        save(floats, half),
        None,
        f"The atlas {floats} must hold integer labels; voxel (2, 2, 2) holds 1.5.",
    )
    (tmp / "three.tsv").write_text("index\tname\n1\tA\n2\tB\n3\tC\n")
    cases["labels file"] = (
        save(ATLAS, labels.astype(np.int16)),
        tmp / "three.tsv",
        f"three.tsv names no region for label(s) [4] of the atlas {ATLAS}.",
    )
    garbage = f"tpl-{MNI}_atlas-Cut_dseg.nii.gz"
    (tmp / garbage).write_bytes(b"not an image")
    cases["unreadable"] = (
        tmp / garbage,
        None,
        f"{garbage} is not a readable NIfTI image (",
    )
    return cases


def test_atlas_problems_exit_2_before_any_run(tree, tmp_path, capsys):
    tmp, root = tree
    for case, (atlas, labels, message) in _bad_atlases(tmp_path).items():
        out = tmp_path / f"out-{case}"
        args = ["bids", str(root), str(out), "participant", "--atlas", str(atlas)]
        args += ["--atlas-name", "Slab4", "--denoise", "none", "--backend", "serial", "-q"]
        args += [] if labels is None else ["--atlas-labels", str(labels)]
        assert main(args) == 2, case
        err = capsys.readouterr().err
        assert err.startswith(f"connscale bids: error: {message}"), case
        assert err.count("\n") == 1, case
        assert not out.exists(), case  # found before any run, nothing written


def test_the_command_line_says_so_in_one_line(tree, tmp_path):
    tmp, root = tree
    args = [sys.executable, "-m", "connscale", "bids", str(root), str(tmp_path / "out")]
    args += ["participant", "--atlas", str(tmp / "atlas.nii.gz"), "--atlas-name", "Slab4"]
    done = subprocess.run(
        args + ["--denoise", "none", "--backend", "serial"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "pass --atlas-space" in done.stderr
    args += ["--atlas-space", MNI, "--space", MNI, "--denoise", "none", "--backend", "serial"]
    assert subprocess.run(args, capture_output=True).returncode == 0


def test_resampling_recorded_in_sidecars_and_report(tmp_path):
    """A 1.5 mm atlas on 3 mm runs: nearest neighbour takes every other voxel, so a label
    in one odd voxel is lost; the sidecars and the report say from which grid to which."""
    root = make_fmriprep(tmp_path / "d", [("01", None, "rest", None)])
    fine = np.repeat(np.repeat(np.repeat(atlas_img().get_fdata(), 2, 0), 2, 1), 2, 2)
    fine[3, 3, 3] = 9
    atlas = tmp_path / f"tpl-{MNI}_res-15_atlas-Slab4_dseg.nii.gz"
    nib.save(nib.Nifti1Image(fine.astype(np.int16), np.diag([1.5, 1.5, 1.5, 1.0])), atlas)
    report = _participant(tmp_path, root, tmp_path / "out", atlas=atlas, reports=True)
    assert report.counts["ok"] == 1
    expected = {
        "Resampled": True,
        "From": {
            "Shape": [12, 12, 10],
            "VoxelSize": [1.5, 1.5, 1.5],
            "Affine": np.diag([1.5, 1.5, 1.5, 1.0]).tolist(),
        },
        "Interpolation": "nearest",
        "LabelsLost": [9],
        "To": {"Shape": [6, 6, 5], "VoxelSize": [3.0, 3.0, 3.0], "Affine": AFFINE.tolist()},
    }
    for suffix in ("relmat", "timeseries"):
        sidecar = json.loads(next((tmp_path / "out").rglob(f"*_{suffix}.json")).read_text())
        assert sidecar["AtlasResampling"] == expected and sidecar["AtlasSpace"] == MNI
        assert sidecar["NodeNames" if suffix == "relmat" else "Columns"] == [
            f"label-{k}" for k in (1, 2, 3, 4)
        ]
    page = next((tmp_path / "out").rglob("*_report.html")).read_text()
    assert (
        "resampled by nearest neighbour from 12×12×10 voxels of 1.5×1.5×1.5 mm to 6×6×5 "
        "voxels of 3×3×3 mm; label(s) [9] lost on this grid"
    ) in page

    # On the runs' own grid: nothing resampled, and the sidecar says so.
    nib.save(atlas_img(), tmp_path / ATLAS)
    _participant(tmp_path, root, tmp_path / "same", reports=True)
    sidecar = json.loads(next((tmp_path / "same").rglob("*_relmat.json")).read_text())
    grid = {"Shape": [6, 6, 5], "VoxelSize": [3.0, 3.0, 3.0], "Affine": AFFINE.tolist()}
    assert sidecar["AtlasResampling"] == {"Resampled": False, "From": grid, "To": grid}
    page = next((tmp_path / "same").rglob("*_report.html")).read_text()
    assert "not resampled (already on the run grid: 6×6×5 voxels of 3×3×3 mm)" in page
