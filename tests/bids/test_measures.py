"""Voxel-level FC, DFC and region-pair outputs of the BIDS-App equal the direct API calls."""

import json
from pathlib import Path

import h5py
import nibabel as nib
import numpy as np
import pytest

import connscale
from connscale.bidsapp.participant import run_participant
from connscale.denoise import clean_signals, cleaning_operator, load_confounds
from connscale.fc import pairwise_dfc
from connscale.io.bids import from_pybids, parse_bids_name, pybids_config
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import ATLAS, T_R, atlas_img, make_fmriprep

WINDOW, STEP = 10, 5


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("measures")
    root = make_fmriprep(tmp / "fmriprep", [("01", "1", "rest", "1"), ("02", None, "rest", None)])
    nib.save(atlas_img(), tmp / ATLAS)
    report = run_participant(
        root,
        tmp / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        strategy="scrubbing",
        strategy_params={"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0},
        measures=["fc", "timeseries", "dfc", "pairs", "voxelfc"],
        window_length=WINDOW,
        step=STEP,
        participant_label="01",
        backend="serial",
        reports=False,
    )
    assert report.counts == {"ok": 1, "skipped": 0, "error": 0}
    return tmp, root, report.records[0]


def _one(record, end):
    found = [p for p in record["outputs"] if p.endswith(end)]
    assert len(found) == 1, (end, record["outputs"])
    return found[0]


def test_names_parse_back_with_pybids(outputs):
    from bids import BIDSLayout

    tmp, _, record = outputs
    assert len(record["outputs"]) == 14  # the QC and coverage tables and their sidecars among them
    layout = BIDSLayout(
        tmp / "out", validate=False, config=["bids", "derivatives", pybids_config()]
    )
    suffixes = set()
    for path in record["outputs"]:
        expected = {
            k: v for k, v in parse_bids_name(path).items() if k not in ("suffix", "extension")
        }
        assert from_pybids(layout.get_file(path).get_entities()) == expected
        assert expected["desc"] == "scrubbing"
        assert set(expected) <= {
            "sub",
            "ses",
            "task",
            "run",
            "space",
            "seg",
            "meas",
            "stat",
            "desc",
        }
        suffixes.add(parse_bids_name(path)["suffix"])
    assert suffixes == {"relmat", "timeseries", "dfc", "pairs", "qc", "bold"}
    voxel = _one(record, "_relmat.h5")
    assert "seg-" not in voxel and "_meas-PearsonCorrelation_desc-scrubbing_" in voxel


def _cleaned_voxels(root):
    bold = next(root.glob("sub-01/ses-1/func/*_desc-preproc_bold.nii.gz"))
    img = nib.load(bold)
    mask = (
        np.asarray(nib.load(str(bold).replace("desc-preproc_bold", "desc-brain_mask")).dataobj) > 0
    )
    data = np.asarray(img.dataobj, dtype=np.float32)[mask].T
    confounds, sample_mask = load_confounds(
        bold, "scrubbing", motion="basic", wm_csf="basic", fd_threshold=0.15, scrub=0
    )
    operator = cleaning_operator(
        data.shape[0], confounds=confounds.to_numpy(), sample_mask=sample_mask, t_r=T_R
    )
    return img, mask, data, operator


def test_voxel_relmat_maps_every_value_to_voxels(outputs):
    _, root, record = outputs
    img, mask, data, operator = _cleaned_voxels(root)
    voxels = clean_signals(data, operator, device="cpu")
    expected = connscale.correlation(voxels, kind="triu", device="cpu")
    path = _one(record, "_relmat.h5")
    stored, attrs = connscale.io.load_relmat(path)
    assert attrs["kind"] == "triu" and attrs["N"] == mask.sum()
    np.testing.assert_allclose(stored, expected, atol=1e-5)
    with h5py.File(path, "r") as h5:
        np.testing.assert_array_equal(h5["mask"][()], mask)
        ijk = h5["voxels/ijk"][()]
        np.testing.assert_allclose(h5["voxels/xyz"][()], nib.affines.apply_affine(img.affine, ijk))
        np.testing.assert_array_equal(h5["kept_volumes"][()], operator.volumes)
    # Row v of the series is the BOLD of voxel ijk[v]: pair (i, j) of the store is that pair.
    bold = np.asarray(img.dataobj, dtype=np.float32)
    i, j = 3, 17
    np.testing.assert_array_equal(data[:, i], bold[tuple(ijk[i])])
    k = connscale.triu_index(i, j, ijk.shape[0])
    r = np.corrcoef(
        clean_signals(bold[tuple(ijk[[i, j]].T)].T, operator, device="cpu", dtype="float64").T
    )[0, 1]
    assert abs(stored[k] - r) < 1e-5
    meta = json.loads(Path(path[:-3] + ".json").read_text())
    assert meta["NumberOfVoxels"] == mask.sum() and "Atlas" not in meta


def test_dfc_and_pairs_equal_the_api(outputs):
    record = outputs[2]
    series, names = load_timeseries(_one(record, "_timeseries.tsv"))
    dfc = connscale.dynamic_correlation(series, WINDOW, STEP, device="cpu")
    with connscale.load_dynamic(_one(record, "_dfc.h5")) as stored:
        assert len(stored) == len(dfc)
        for w in range(len(dfc)):
            np.testing.assert_allclose(stored[w], dfc[w], atol=1e-5)
    pairs = pairwise_dfc(series[None], WINDOW, STEP, device="cpu")
    with h5py.File(_one(record, "_pairs.h5"), "r") as h5:
        np.testing.assert_allclose(h5["courses"][()], pairs.courses[0], atol=1e-5)
        np.testing.assert_array_equal(h5["pairs"][()], pairs.pairs)
        assert [x.decode() for x in h5["labels"][()]] == names
        kept = h5["kept_volumes"][()]
        onsets = h5["window_onsets"][()]
        np.testing.assert_array_equal(onsets, pairs.window_starts)
        np.testing.assert_array_equal(h5["window_onset_volumes"][()], kept[onsets])
        np.testing.assert_allclose(h5["window_onset_seconds"][()], kept[onsets] * T_R)
        assert kept.size == series.shape[0] < 30  # scrubbing censored volumes
    meta = json.loads(Path(_one(record, "_dfc.json")).read_text())
    assert meta["WindowLength"] == WINDOW and meta["NumberOfWindows"] == len(dfc)


def test_second_atlas_reuses_the_voxel_set(outputs, tmp_path):
    tmp, root, _ = outputs
    kwargs = {
        "strategy": "scrubbing",
        "participant_label": "01",
        "backend": "serial",
        "reports": False,
        "strategy_params": {"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0},
    }
    again = run_participant(
        root,
        tmp / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        measures=["fc", "timeseries", "dfc", "pairs", "voxelfc"],
        window_length=WINDOW,
        step=STEP,
        **kwargs,
    )
    assert again.counts["skipped"] == 1
    nib.save(atlas_img(3), tmp_path / "tpl-MNI152NLin2009cAsym_atlas-Slab3_dseg.nii.gz")
    other = run_participant(
        root,
        tmp / "out",
        atlas=tmp_path / "tpl-MNI152NLin2009cAsym_atlas-Slab3_dseg.nii.gz",
        atlas_name="Slab3",
        measures=["fc", "voxelfc"],
        **kwargs,
    )
    assert other.counts["ok"] == 1
    assert [parse_bids_name(p)["suffix"] for p in other.records[0]["outputs"]] == [
        "relmat",
        "relmat",
        "bold",
        "bold",
    ]  # only the new atlas's relmat, its coverage table and their sidecars
    with pytest.raises(ValueError, match="need a window length"):
        run_participant(
            root,
            tmp / "out",
            atlas=tmp / ATLAS,
            atlas_name="Slab4",
            measures=["dfc"],
            **kwargs,
        )
