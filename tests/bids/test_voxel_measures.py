"""The BIDS-App's voxel maps and r1DL networks equal the public functions on the same
cleaned series, parse back with pybids, resume, and refuse other parameters."""

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from nilearn.image import load_img
from nilearn.maskers import NiftiMasker

import connscale
from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.denoise import clean_signals, cleaning_operator, load_confounds
from connscale.io.bids import from_pybids, parse_bids_name, pybids_config
from connscale.io.maps import threshold_label
from connscale.io.timeseries import load_timeseries
from connscale.networks import R1DL
from tests.bids._browser import (
    CHROMIUM,
    assert_header,
    external_urls,
    images,
    listed_outputs,
    render,
)
from tests.bids._fmriprep import ATLAS, T_R, atlas_img, make_fmriprep, participant_log

THRESHOLDS = (0.2, 0.5)
N_ATOMS = 3
STRATEGY = {"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("voxel_measures")
    root = make_fmriprep(tmp / "fmriprep", [("01", "1", "rest", "1")])
    nib.save(atlas_img(), tmp / ATLAS)
    report = run_participant(
        root,
        tmp / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        strategy="scrubbing",
        strategy_params=STRATEGY,
        measures=["fc", "maps", "networks"],
        degree_thresholds=THRESHOLDS,
        n_atoms=N_ATOMS,
        backend="serial",
    )
    assert report.counts == {"ok": 1, "skipped": 0, "error": 0}, report.records
    return tmp, root, report.records[0]


def _named(record, **wanted) -> str:
    found = [
        p
        for p in record["outputs"]
        if all(parse_bids_name(p).get(k) == v for k, v in wanted.items())
    ]
    assert len(found) == 1, (wanted, record["outputs"])
    return found[0]


def _cleaned(root):
    """The run's mask and its cleaned in-mask series, computed here from the BOLD."""
    bold = next(root.glob("sub-01/ses-1/func/*_desc-preproc_bold.nii.gz"))
    mask_path = str(bold).replace("desc-preproc_bold", "desc-brain_mask")
    mask = np.asarray(nib.load(mask_path).dataobj) > 0
    data = np.asarray(nib.load(bold).dataobj, dtype=np.float32)[mask].T
    confounds, sample_mask = load_confounds(bold, "scrubbing", **STRATEGY)
    operator = cleaning_operator(
        data.shape[0], confounds=confounds.to_numpy(), sample_mask=sample_mask, t_r=T_R
    )
    return mask_path, mask, clean_signals(data, operator, device="cpu"), operator


def test_outputs_exist_and_parse_back_with_pybids(outputs):
    from bids import BIDSLayout

    tmp, _, record = outputs
    layout = BIDSLayout(
        tmp / "out", validate=False, config=["bids", "derivatives", pybids_config()]
    )
    qc = [p for p in record["outputs"] if Path(p).name.endswith(("_qc.tsv", "_qc.json"))]
    assert len(qc) == 2  # the run's QC table and its sidecar
    voxel = [p for p in record["outputs"] if "seg-" not in Path(p).name and p not in qc]
    # 4 degree maps, ECM, gcor (+ sidecars), the maps report; components, mixing
    # (+ sidecars), the networks report.
    assert len(voxel) == 2 * (2 * len(THRESHOLDS) + 2) + 1 + 4 + 1
    stats, suffixes = set(), set()
    for path in voxel:
        assert Path(path).is_file() and Path(path).parent == tmp / "out/sub-01/ses-1/func"
        expected = {
            k: v for k, v in parse_bids_name(path).items() if k not in ("suffix", "extension")
        }
        assert from_pybids(layout.get_file(path).get_entities()) == expected
        assert set(expected) <= {"sub", "ses", "task", "run", "space", "meas", "stat", "desc"}
        assert expected["desc"] == "scrubbing" and expected["ses"] == "1"
        stats.add((expected.get("meas"), expected["stat"]))
        suffixes.add(parse_bids_name(path)["suffix"])
    assert suffixes == {"boldmap", "components", "mixing", "report"}
    assert stats == {
        ("r02", "degree"),
        ("r02", "weighteddegree"),
        ("r05", "degree"),
        ("r05", "weighteddegree"),
        (None, "ecm"),
        (None, "gcor"),
        (None, "maps"),
        (None, "r1dl"),
    }
    found = layout.get(stat="degree", meas="r05", extension=".nii.gz", return_type="filename")
    assert found == [_named(record, stat="degree", meas="r05", extension=".nii.gz")]


def test_maps_equal_the_public_functions_on_the_mask_grid(outputs):
    _, root, record = outputs
    mask_path, mask, voxels, _ = _cleaned(root)
    masker = NiftiMasker(mask_img=mask_path, standardize=None).fit()
    r = np.corrcoef(voxels.T.astype(np.float64))
    np.fill_diagonal(r, np.nan)
    for theta in THRESHOLDS:
        near = (np.abs(r - theta) < 1e-5).sum(axis=1)  # pairs the arithmetic may place either side
        for weighted in (False, True):
            stat = "weighteddegree" if weighted else "degree"
            path = _named(record, stat=stat, meas=threshold_label(theta), extension=".nii.gz")
            img = load_img(path)
            assert img.shape == mask.shape
            np.testing.assert_allclose(img.affine, nib.load(mask_path).affine)
            stored = np.ravel(masker.transform(img))
            expected = connscale.degree_centrality(voxels, theta, weighted=weighted, device="cpu")
            assert (np.abs(stored - expected) <= near * 1.0 + 1e-4 * np.abs(expected)).all()
            assert stored.max() > 0 and stored.min() < mask.sum() - 1  # not a trivial map
            assert (np.asarray(img.dataobj)[~mask] == 0).all()
            meta = json.loads(Path(path.replace(".nii.gz", ".json")).read_text())
            assert meta["Threshold"] == theta and meta["Weighted"] is weighted
            assert meta["DenoiseStrategy"] == "scrubbing" and meta["NumberOfVoxels"] == mask.sum()
    for stat, function in (
        ("ecm", connscale.eigenvector_centrality),
        ("gcor", connscale.global_correlation),
    ):
        stored = np.ravel(masker.transform(_named(record, stat=stat, extension=".nii.gz")))
        np.testing.assert_allclose(stored, function(voxels, device="cpu"), atol=1e-5)


def test_networks_equal_r1dl_on_the_cleaned_series(outputs):
    _, root, record = outputs
    mask_path, mask, voxels, operator = _cleaned(root)
    expected = R1DL(N_ATOMS, 0.07, random_state=0, device="cpu").fit(voxels)
    img = load_img(_named(record, stat="r1dl", extension=".nii.gz"))
    assert img.shape == (*mask.shape, N_ATOMS)
    np.testing.assert_allclose(img.affine, nib.load(mask_path).affine)
    loadings = NiftiMasker(mask_img=mask_path, standardize=None).fit().transform(img)
    np.testing.assert_allclose(loadings, expected.components_.toarray(), atol=1e-4)
    assert ((loadings != 0).sum(axis=1) == expected.sparsity_).all()
    courses, names = load_timeseries(_named(record, suffix="mixing", extension=".tsv"))
    assert names == ["network_000", "network_001", "network_002"]
    assert courses.shape == (operator.volumes.size, N_ATOMS)
    np.testing.assert_allclose(courses, expected.dictionary_, atol=1e-4)
    meta = json.loads(Path(_named(record, suffix="mixing", extension=".json")).read_text())
    assert meta["KeptVolumes"] == operator.volumes.tolist() and meta["Columns"] == names


def test_reports_show_every_map(outputs):
    record = outputs[2]
    maps = Path(_named(record, stat="maps", suffix="report")).read_text()
    assert maps.count("data:image/png") == 2 * len(THRESHOLDS) + 2
    networks = Path(_named(record, stat="r1dl", suffix="report")).read_text()
    assert networks.count("data:image/png") == 1


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed")
def test_reports_render_in_chromium(outputs, tmp_path):
    record = outputs[2]
    for i, stat in enumerate(("maps", "r1dl")):
        page = Path(_named(record, stat=stat, suffix="report"))
        scratch = tmp_path / f"browser{i}"
        scratch.mkdir()
        dom = render(page, scratch)
        n_images = page.read_text().count("<img")
        assert n_images >= 1 and images(dom) == ["yes"] * n_images, page
        assert external_urls(dom) == [], page
        assert_header(dom)
        published = [Path(p) for p in record["outputs"] if Path(p).parent == page.parent]
        in_set = json.loads(next(page.parent.glob(f"*stat-{stat}*_manifest.json")).read_text())
        expected = sorted(p.name for p in published if p.name in in_set["files"] and p != page)
        listed = listed_outputs(dom)
        assert sorted(name for name, _ in listed) == expected and len(expected) >= 2, listed
        assert all(size.endswith(" bytes") for _, size in listed), listed


def test_group_level_reads_past_the_maps(outputs, tmp_path):
    # on a copy: the group level writes group/ (mean maps), which the other
    # tests' queries of the participant outputs must not see
    copy = tmp_path / "out"
    shutil.copytree(outputs[0] / "out", copy)
    result = run_group(copy)
    assert len(result.runs) == 1 and result.strategy == "scrubbing"


def _cli(root, out, atlas, *extra):
    return main(
        [
            "bids",
            str(root),
            str(out),
            "participant",
            "--atlas",
            str(atlas),
            "--atlas-name",
            "Slab4",
            "--denoise",
            "none",
            "--measures",
            "maps,networks",
            "--n-atoms",
            str(N_ATOMS),
            "--backend",
            "serial",
            "--no-reports",
            *extra,
        ]
    )


def test_resume_skips_and_other_thresholds_need_overwrite(outputs, tmp_path, capsys):
    tmp, root, _ = outputs
    out = tmp_path / "out"
    atlas = tmp / ATLAS
    # (the presets' 36 confounds would leave these 30-volume runs no degree of freedom)
    assert _cli(root, out, atlas, "--degree-thresholds", "0.2,0.5") == 0
    folder = out / "sub-01/ses-1/func"
    first = sorted(p.name for p in folder.iterdir())
    capsys.readouterr()
    assert _cli(root, out, atlas, "--degree-thresholds", "0.5,0.2") == 0
    assert "0 done, 1 already complete" in capsys.readouterr().out
    assert _cli(root, out, atlas, "--degree-thresholds", "0.7") == 1
    error = "\n".join(participant_log(out)[1])
    assert "other parameters" in error and "--overwrite" in error
    assert sorted(p.name for p in folder.iterdir()) == first  # nothing replaced
    # another precision is another result too
    assert _cli(root, out, atlas, "--degree-thresholds", "0.2,0.5", "--precision", "tf32") == 1
    assert sorted(p.name for p in folder.iterdir()) == first
    sidecar = json.loads(next(folder.glob("*_meas-r02_stat-degree_*_boldmap.json")).read_text())
    assert sidecar["Precision"] == "exact"
    assert sidecar["Confirmation"] is None  # the CPU runs fp32: nothing to confirm
    assert _cli(root, out, atlas, "--degree-thresholds", "0.7", "--overwrite") == 0
    log, _ = participant_log(out)
    written = [parse_bids_name(p) for p in log["records"][0]["outputs"]]
    assert {w["stat"] for w in written} == {"degree", "weighteddegree", "ecm", "gcor"}
    maps = sorted(p.name for p in folder.glob("*_boldmap.nii.gz"))
    assert {parse_bids_name(m).get("meas") for m in maps} == {"r07", None}  # r02, r05 gone
    assert len(maps) == 4


def test_thresholds_must_name_distinct_maps(outputs, tmp_path):
    tmp, root, _ = outputs
    with pytest.raises(ValueError, match="both name their maps meas-r025"):
        run_participant(
            root,
            tmp_path / "out",
            atlas=tmp / ATLAS,
            atlas_name="Slab4",
            measures=["maps"],
            degree_thresholds=[0.25, 0.2500000001],
        )


def test_maps_without_reports_read_the_voxels(outputs, tmp_path):
    """Without reports nothing else asks the decoder for the voxel series: the
    maps measure must, and its maps equal those of the run with reports."""
    tmp, root, record = outputs
    report = run_participant(
        root,
        tmp_path / "out",
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        strategy="scrubbing",
        strategy_params=STRATEGY,
        measures=["maps"],
        degree_thresholds=THRESHOLDS,
        backend="serial",
        reports=False,
    )
    assert report.counts == {"ok": 1, "skipped": 0, "error": 0}, report.records
    again = _named(report.records[0], stat="ecm", extension=".nii.gz")
    first = _named(record, stat="ecm", extension=".nii.gz")
    np.testing.assert_allclose(
        nib.load(again).get_fdata(), nib.load(first).get_fdata(), rtol=1e-5, atol=1e-7
    )
