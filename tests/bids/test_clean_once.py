"""The denoised BOLD of a run (``write_denoised``), cleaned once whichever sets need it."""

import json

import nibabel as nib
import numpy as np
from nilearn import signal

import connscale.denoise
from connscale.denoise import load_confounds
from tests.bids._fmriprep import (
    ATLAS,
    CIFTI_ATLAS,
    T_R,
    atlas_img,
    brain_model_91k,
    make_fmriprep,
    make_fmriprep_cifti,
    write_cifti_atlas,
)

CORTEX = 59412


def _counting(monkeypatch, width: int, *, standardized: bool = False) -> list:
    # standardized: count only the z-scored cleanings (not the QC table's unstandardised one).
    calls = []
    clean = connscale.denoise.clean_signals

    def counted(signals, *args, **kwargs):
        if signals.shape[1] == width and not (standardized and kwargs["standardize"] is None):
            calls.append(kwargs.get("memory_limit"))
        return clean(signals, *args, **kwargs)

    monkeypatch.setattr(connscale.denoise, "clean_signals", counted)
    return calls


def test_cifti_maps_and_denoised_clean_the_grayordinates_once(tmp_path, monkeypatch):
    from connscale.bidsapp.participant import run_participant

    small = brain_model_91k()[CORTEX : CORTEX + 4394]
    root = make_fmriprep_cifti(
        tmp_path / "fmriprep", [("01", None, "rest", None)], brain_model=small
    )
    write_cifti_atlas(tmp_path / CIFTI_ATLAS, brain_model=small)
    calls = _counting(monkeypatch, small.size, standardized=True)
    report = run_participant(
        root, tmp_path / "out", atlas=tmp_path / CIFTI_ATLAS, atlas_name="Struct10",
        strategy="simple", strategy_params={"motion": "basic"}, space=["fsLR"], den=["91k"],
        backend="serial", device="cpu", measures=["maps"], degree_thresholds=[0.25],
        write_denoised=True, reports=False, memory_limit="4GB",
    )  # fmt: skip
    assert report.counts["ok"] == 1, report.records
    assert len(calls) == 1 and calls[0] is not None  # once, within the run's budget
    outputs = report.records[0]["outputs"]
    assert any(p.endswith("_desc-simple_bold.dtseries.nii") for p in outputs)
    assert any(p.endswith("_stat-gcor_desc-simple_boldmap.dscalar.nii") for p in outputs)


def test_volume_denoised_bold_equals_nilearn_through_the_mask(tmp_path):
    from connscale.bidsapp.participant import run_participant

    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    report = run_participant(
        root, tmp_path / "out", atlas=tmp_path / ATLAS, atlas_name="Slab4", strategy="simple",
        strategy_params={"motion": "basic", "wm_csf": "basic"}, measures=["fc"],
        write_denoised=True, backend="serial", device="cpu", reports=False,
    )  # fmt: skip
    assert report.counts["ok"] == 1, report.records
    (path,) = [p for p in report.records[0]["outputs"] if p.endswith("_bold.nii.gz")]
    assert path.endswith("sub-01_task-rest_space-MNI152NLin2009cAsym_desc-simple_bold.nii.gz")
    bold = next(root.glob("sub-01/func/*_desc-preproc_bold.nii.gz"))
    mask_img = nib.load(str(bold).replace("desc-preproc_bold", "desc-brain_mask"))
    mask = np.asarray(mask_img.dataobj) > 0
    data = np.asarray(nib.load(bold).dataobj, dtype=np.float64)[mask].T
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic", wm_csf="basic")
    expected = signal.clean(
        data, confounds=confounds, sample_mask=sample_mask, detrend=True,
        standardize="zscore_sample", t_r=T_R,
    )  # fmt: skip
    img = nib.load(path)
    written = np.asarray(img.dataobj)
    assert written.dtype == np.float32 and written.shape == (*mask.shape, expected.shape[0])
    assert img.header.get_zooms()[3] == T_R
    np.testing.assert_allclose(written[mask].T, expected, atol=1e-5)
    assert not written[~mask].any()
    meta = json.loads(open(path.replace(".nii.gz", ".json")).read())
    assert meta["KeptVolumes"] == np.asarray(sample_mask).tolist()
    assert meta["NumberOfVoxels"] == mask.sum() and meta["Mask"].startswith("bids:")


def test_volume_qc_and_local_maps_clean_the_voxels_once(tmp_path, monkeypatch):
    # The QC table's final DVARS and the ALFF and ReHo maps share the run's one
    # unstandardised cleaning of its voxels.
    from connscale.bidsapp.participant import run_participant

    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    mask = next(root.rglob("*_desc-brain_mask.nii.gz"))
    calls = _counting(monkeypatch, int(np.count_nonzero(nib.load(mask).get_fdata())))
    report = run_participant(
        root, tmp_path / "out", atlas=tmp_path / ATLAS, atlas_name="Slab4", strategy="simple",
        strategy_params={"motion": "basic"}, backend="serial", device="cpu",
        measures=["fc", "alff", "reho"], reports=False, memory_limit="4GB",
    )  # fmt: skip
    assert report.counts["ok"] == 1, report.records
    outputs = report.records[0]["outputs"]
    assert any(p.endswith("_qc.tsv") for p in outputs)
    assert any(p.endswith("_stat-reho_desc-simple_boldmap.nii.gz") for p in outputs)
    assert len(calls) == 1 and calls[0] is not None  # once, within the run's budget
