"""Voxel maps at the BIDS-App's group level: mean maps on the common mask, map features."""

import json
import logging
import shutil

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp.group import run_group
from connscale.cli.main import main
from connscale.io.bids import from_pybids, parse_bids_name, pybids_config
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep
from tests.bids._pybids import assert_pybids_reads

RUNS = [("01", None, "rest", "1"), ("01", None, "rest", "2")] + [
    (s, None, "rest", None) for s in ("02", "03", "04")
]
KINDS = [
    ("r02", "degree"),
    ("r02", "weighteddegree"),
    ("r04", "degree"),
    ("r04", "weighteddegree"),
    (None, "ecm"),
    (None, "gcor"),
]
SPACE = "space-MNI152NLin2009cAsym"
TABLE = "group/seg-Slab4_meas-PearsonCorrelation_desc-none_features.tsv"


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("group_maps")
    root = make_fmriprep(tmp / "fmriprep", RUNS)
    nib.save(atlas_img(), tmp / ATLAS)
    out = tmp / "out"
    participant = ["bids", str(root), str(out), "participant", "--atlas", str(tmp / ATLAS)]
    participant += ["--atlas-name", "Slab4", "--denoise", "none", "--measures", "fc,maps"]
    participant += ["--degree-thresholds", "0.2,0.4", "--backend", "serial"]
    assert main(participant + ["--no-reports", "-q"]) == 0
    participants = tmp / "participants.tsv"
    participants.write_text(
        "participant_id\tdx\nsub-01\tA\nsub-02\tB\nsub-03\tA\nsub-04\tB\n", encoding="utf-8"
    )
    group = ["bids", str(root), str(out), "group", "--group-features", "edges,maps"]
    group += ["--participants", str(participants), "--target", "dx", "--folds", "2"]
    assert main(group + ["--repeats", "2", "-q"]) == 0
    return tmp, root, out, group


def _name(kind) -> str:
    meas, stat = kind
    return f"{SPACE}_" + ("" if meas is None else f"meas-{meas}_") + f"stat-{stat}_desc-none"


def _expected(root, out):
    """The common mask (fMRIPrep masks intersected) and the numpy mean of the
    participants' maps (each participant's runs averaged first) on it."""
    masks = [np.asarray(nib.load(p).dataobj) > 0 for p in root.glob("sub-*/func/*_mask.nii.gz")]
    assert len(masks) == len(RUNS)
    mask = np.logical_and.reduce(masks)
    means = {}
    for kind in KINDS:
        subjects = []
        for sub in ("01", "02", "03", "04"):
            paths = sorted(
                out.glob(f"sub-{sub}/func/*_{_name(kind).split('_', 1)[1]}_boldmap.nii.gz")
            )
            assert len(paths) == (2 if sub == "01" else 1)
            subjects.append(np.mean([nib.load(p).get_fdata()[mask] for p in paths], axis=0))
        means[kind] = (np.array(subjects), np.mean(subjects, axis=0))
    return mask, means


def test_mean_maps_equal_numpy_on_the_common_mask(cohort):
    _, root, out, _ = cohort
    mask, means = _expected(root, out)
    assert 0 < mask.sum() < mask.size and not mask.all()
    written = nib.load(out / f"group/{SPACE}_desc-none_mask.nii.gz")
    np.testing.assert_array_equal(np.asarray(written.dataobj) > 0, mask)
    for kind in KINDS:
        img = nib.load(out / f"group/{_name(kind)}_boldmap.nii.gz")
        np.testing.assert_allclose(img.affine, np.diag([3.0, 3.0, 3.0, 1.0]))
        data = img.get_fdata()
        assert (data[~mask] == 0).all()
        np.testing.assert_allclose(data[mask], means[kind][1], rtol=1e-6, atol=1e-6)
        meta = json.loads((out / f"group/{_name(kind)}_boldmap.json").read_text())
        assert meta["NumberOfParticipants"] == 4 and meta["NumberOfRuns"] == len(RUNS)
        assert meta["NumberOfVoxels"] == mask.sum() and len(meta["Sources"]) == len(RUNS)
        if kind[1] == "degree":
            assert meta["Threshold"] == float(kind[0][1:]) / 10


def test_names_parse_back_with_pybids(cohort):
    from bids.layout import parse_file_entities

    _, _, out, _ = cohort
    config = ["bids", "derivatives", pybids_config()]
    written = sorted((out / "group").glob(f"{SPACE}_*.nii.gz"))
    assert len(written) == len(KINDS) + 1
    for path in written:
        assert path.with_name(path.name.replace(".nii.gz", ".json")).is_file()
        expected = {
            k: v for k, v in parse_bids_name(path).items() if k not in ("suffix", "extension")
        }
        assert from_pybids(parse_file_entities(path, config=config)) == expected
        assert set(expected) <= {"space", "meas", "stat", "desc"} and expected["desc"] == "none"
    assert (out / f"group/{SPACE}_stat-maps_desc-none_manifest.json").is_file()
    assert not list(out.rglob("*.staging"))


def test_map_features_in_the_table_and_the_classification(cohort):
    _, root, out, _ = cohort
    mask, means = _expected(root, out)
    rows = [line.split("\t") for line in (out / TABLE).read_text().splitlines()]
    header = rows[0]
    n = int(mask.sum())
    assert len(header) == 1 + 6 + len(KINDS) * n
    assert [r[0] for r in rows[1:]] == ["sub-01", "sub-02", "sub-03", "sub-04"]
    table = np.array([r[1:] for r in rows[1:]], dtype=float)
    voxels = np.argwhere(mask)
    for j, kind in enumerate(KINDS):
        first = 1 + 6 + j * n
        label = "_".join(f"{k}-{v}" for k, v in zip(("meas", "stat"), kind) if v is not None)
        i, jj, k = voxels[0]
        assert header[first] == f"{label}@{i},{jj},{k}"
        np.testing.assert_allclose(table[:, first - 1 : first - 1 + n], means[kind][0], rtol=1e-7)
    result = json.loads(
        (out / "group/seg-Slab4_meas-PearsonCorrelation_desc-none_classification.json").read_text()
    )
    assert result["n_features"] == len(header) - 1 and result["n_subjects"] == 4
    assert "voxel maps" in result["features"] and "state" not in result["features"]
    page = (out / "group/seg-Slab4_meas-PearsonCorrelation_desc-none_report.html").read_text()
    # connectome, QC-FC, one figure per mean map
    assert page.count('<img src="data:image/png;base64,') == 2 + len(KINDS)


def test_rerun_resumes_and_other_features_are_refused(cohort, capsys):
    tmp, _, out, group = cohort
    copy = out.with_name("rerun")  # beside the original: its DatasetLinks are relative
    shutil.copytree(out, copy)
    group = [str(copy) if a == str(out) else a for a in group]
    published = {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(group + ["--repeats", "2"]) == 0
    assert "group mean maps over" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()} == published

    same = {"participants": tmp / "participants.tsv", "target": "dx", "folds": 2, "repeats": 2}
    with pytest.raises(FileExistsError, match="features: .*'maps'.*--overwrite"):
        run_group(copy, **same)
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file()} == published
    result = run_group(copy, overwrite=True, **same)
    assert len(result.feature_names) == 6 and result.classification["n_features"] == 6
    assert result.maps.resumed and result.maps.values is None  # mean maps not recomputed
    maps = sorted((copy / "group").glob(f"{SPACE}_*"))
    assert all(p.stat().st_mtime_ns == published[p] for p in maps)
    assert len((copy / TABLE).read_text().splitlines()[0].split("\t")) == 7


def test_mask_from_the_maps_support_when_the_sidecar_mask_is_gone(cohort, tmp_path, caplog):
    _, root, out, _ = cohort
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    description = json.loads((copy / "dataset_description.json").read_text())
    description["DatasetLinks"] = {"preprocessed": str(tmp_path / "moved")}
    (copy / "dataset_description.json").write_text(json.dumps(description))
    with caplog.at_level(logging.WARNING, logger="connscale"):
        result = run_group(copy, overwrite=True)
    assert "name no readable mask" in caplog.text
    runs = {}  # each run's maps' non-zero voxels
    for path in copy.glob("sub-*/func/*_boldmap.nii.gz"):
        runs.setdefault(path.name.split(f"_{SPACE}")[0], []).append(
            np.asarray(nib.load(path).dataobj) != 0
        )
    assert len(runs) == len(RUNS)
    support = np.logical_and.reduce([np.logical_or.reduce(found) for found in runs.values()])
    np.testing.assert_array_equal(result.maps.mask, support)
    assert not result.maps.resumed and result.maps.values is None
    for kind in KINDS:  # the means without the features: the same maps
        name = f"group/{_name(kind)}_boldmap.nii.gz"
        np.testing.assert_allclose(
            nib.load(copy / name).get_fdata(), nib.load(out / name).get_fdata(), rtol=1e-6
        )


def test_maps_on_another_grid_are_refused(cohort, tmp_path):
    _, _, out, _ = cohort
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    path = next((copy / "sub-03/func").glob("*_stat-gcor_desc-none_boldmap.nii.gz"))
    img = nib.load(path)
    nib.save(nib.Nifti1Image(img.get_fdata(), np.diag([2.0, 2.0, 2.0, 1.0])), path)
    manifest = next((copy / "sub-03/func").glob("*_stat-maps_desc-none_manifest.json"))
    record = json.loads(manifest.read_text())
    record["files"][path.name] = {"bytes": path.stat().st_size, "sha256": ""}
    manifest.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"one grid; sub-03_.*gcor.*has shape \(6, 6, 5\)"):
        run_group(copy, features=["edges", "maps"], overwrite=True)
    assert {p.name for p in (copy / "group").iterdir()} == {
        p.name for p in (out / "group").iterdir()
    }


def test_pybids_indexes_the_maps_outputs(cohort):
    _, root, out, _ = cohort
    assert_pybids_reads(out, source=root)
