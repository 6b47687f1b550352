"""The measures ``alff`` and ``reho``: XCP-D's maps of the denoised series, their parcel means."""

import json

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
from nilearn import signal

import connscale
from connscale.bidsapp.participant import run_participant
from connscale.denoise import load_confounds
from connscale.maps import reho_series, voxel_neighbours
from tests.bids._fmriprep import (
    ATLAS,
    CIFTI_ATLAS,
    T_R,
    atlas_img,
    brain_model_91k,
    cifti_parcels,
    make_fmriprep,
    make_fmriprep_cifti,
    write_cifti_atlas,
)

SCRUBBING = {"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local_maps")
    root = make_fmriprep(tmp / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp / ATLAS)
    outputs = {}
    for strategy, params in (("simple", {"motion": "basic"}), ("scrubbing", SCRUBBING)):
        report = run_participant(
            root, tmp / "out", atlas=tmp / ATLAS, atlas_name="Slab4", strategy=strategy,
            strategy_params=params, measures=["fc", "alff", "reho"], backend="serial",
            device="cpu", reports=strategy == "simple",
        )  # fmt: skip
        assert report.counts["ok"] == 1, report.records
        outputs[strategy] = report.records[0]["outputs"]
    return root, outputs


def _one(outputs, end):
    (found,) = [p for p in outputs if p.endswith(end)]
    return found


def _cleaned(root, strategy, params):
    """The run's denoised, unstandardised in-mask series (nilearn) and the kept volumes."""
    bold = next(root.glob("sub-01/func/*_desc-preproc_bold.nii.gz"))
    mask = np.asarray(nib.load(str(bold).replace("preproc_bold", "brain_mask")).dataobj) > 0
    data = np.asarray(nib.load(bold).dataobj, dtype=np.float64)[mask].T
    confounds, sample_mask = load_confounds(bold, strategy, **params)
    cleaned = signal.clean(
        data, confounds=confounds, sample_mask=sample_mask, detrend=True, standardize=None,
        t_r=T_R,
    )  # fmt: skip
    kept = np.arange(data.shape[0]) if sample_mask is None else np.asarray(sample_mask)
    return mask, cleaned, kept, data.shape[0]


def _expected_alff(cleaned, kept, n):
    if kept.size == n:
        return connscale.alff(cleaned, T_R, device="cpu", dtype="float64")
    # Censored volumes: the linear interpolation of the kept ones (they set the scale only).
    full = np.stack([np.interp(np.arange(n), kept, c) for c in cleaned.T], axis=1)
    return connscale.alff(full, T_R, sample_mask=kept, device="cpu", dtype="float64")


def _map(path, mask):
    values = np.asarray(nib.load(path).dataobj)
    assert not values[~mask].any()  # written through the mask
    return values[mask]


@pytest.mark.parametrize("strategy", ["simple", "scrubbing"])
def test_maps_equal_the_api_on_nilearns_cleaning(published, strategy):
    root, outputs = published
    params = {"simple": {"motion": "basic"}, "scrubbing": SCRUBBING}[strategy]
    mask, cleaned, kept, n = _cleaned(root, strategy, params)
    out = outputs[strategy]
    reho = _map(_one(out, f"_stat-reho_desc-{strategy}_boldmap.nii.gz"), mask)
    expected = reho_series(cleaned, voxel_neighbours(mask, 27), device="cpu")
    np.testing.assert_allclose(reho, expected, atol=1e-5)
    alff, falff = _expected_alff(cleaned, kept, n)
    assert kept.size < n or strategy == "simple"
    np.testing.assert_allclose(
        _map(_one(out, f"_stat-alff_desc-{strategy}_boldmap.nii.gz"), mask), alff, rtol=1e-4
    )
    np.testing.assert_allclose(
        _map(_one(out, f"_stat-falff_desc-{strategy}_boldmap.nii.gz"), mask), falff, rtol=1e-4
    )
    meta = json.loads(open(_one(out, f"_stat-alff_desc-{strategy}_boldmap.json")).read())
    assert (meta["HighPass"], meta["LowPass"]) == (0.01, 0.08)
    assert meta["Periodogram"] == ("periodogram" if kept.size == n else
                                   "Lomb-Scargle of the kept volumes")  # fmt: skip


def test_parcel_tables_are_the_mean_over_each_parcel(published):
    root, outputs = published
    out = outputs["simple"]
    atlas = np.asarray(atlas_img().dataobj)
    mask, *_ = _cleaned(root, "simple", {"motion": "basic"})
    for stat in ("alff", "falff", "reho"):
        values = np.asarray(nib.load(_one(out, f"_stat-{stat}_desc-simple_boldmap.nii.gz")).dataobj)
        table = pd.read_csv(_one(out, f"_seg-Slab4_stat-{stat}_desc-simple_bold.tsv"), sep="\t")
        assert list(table.columns) == [f"label-{k}" for k in (1, 2, 3, 4)] and len(table) == 1
        expected = [values[mask & (atlas == k)].mean() for k in (1, 2, 3, 4)]
        np.testing.assert_allclose(table.to_numpy()[0], expected, rtol=1e-5)
    assert any(p.endswith("_stat-alff_desc-simple_report.html") for p in out)


def test_cifti_maps_on_grayordinates(tmp_path):
    small = brain_model_91k()[59412 : 59412 + 4394]  # subcortical structures: voxels only
    runs = [("01", None, "rest", None)]
    root = make_fmriprep_cifti(tmp_path / "fmriprep", runs, brain_model=small)
    write_cifti_atlas(tmp_path / CIFTI_ATLAS, brain_model=small)
    report = run_participant(
        root, tmp_path / "out", atlas=tmp_path / CIFTI_ATLAS, atlas_name="Struct10",
        strategy="simple", strategy_params={"motion": "basic"}, space=["fsLR"], den=["91k"],
        measures=["reho", "alff"], backend="serial", device="cpu", reports=False,
    )  # fmt: skip
    assert report.counts["ok"] == 1, report.records
    bold = next(root.glob("sub-01/func/*_bold.dtseries.nii"))
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic")
    cleaned = signal.clean(
        np.asarray(nib.load(bold).get_fdata(), dtype=np.float64), confounds=confounds,
        sample_mask=sample_mask, detrend=True, standardize=None, t_r=T_R,
    )  # fmt: skip
    out = report.records[0]["outputs"]
    reho = nib.load(_one(out, "_stat-reho_desc-simple_boldmap.dscalar.nii"))
    assert reho.header.get_axis(1) == small
    expected = reho_series(cleaned, connscale.maps.grayordinate_neighbours(small), device="cpu")
    np.testing.assert_allclose(reho.get_fdata()[0], expected, atol=1e-5)
    alff = nib.load(_one(out, "_stat-alff_desc-simple_boldmap.dscalar.nii")).get_fdata()[0]
    n = nib.load(bold).shape[0]
    kept = np.arange(n) if sample_mask is None else np.asarray(sample_mask)
    np.testing.assert_allclose(alff, _expected_alff(cleaned, kept, n)[0], rtol=1e-4)


def test_cifti_parcel_tables_in_xcpds_names(tmp_path):
    root = make_fmriprep_cifti(tmp_path / "fmriprep", [("01", None, "rest", None)], n_volumes=20)
    write_cifti_atlas(tmp_path / CIFTI_ATLAS)
    report = run_participant(
        root, tmp_path / "out", atlas=tmp_path / CIFTI_ATLAS, atlas_name="Struct10",
        strategy="simple", strategy_params={"motion": "basic"}, space=["fsLR"], den=["91k"],
        measures=["fc", "alff"], output_spelling="xcpd", backend="serial", device="cpu",
        reports=False, min_dof=0,
    )  # fmt: skip
    assert report.counts["ok"] == 1, report.records
    out = report.records[0]["outputs"]
    source = "sub-01_task-rest_space-fsLR"
    alff = nib.load(_one(out, f"{source}_den-91k_stat-alff_boldmap.dscalar.nii")).get_fdata()[0]
    labels = cifti_parcels()
    table = pd.read_csv(_one(out, f"{source}_atlas-Struct10_stat-alff_bold.tsv"), sep="\t")
    assert list(table.columns) == [f"parcel{k}" for k in range(1, 11)]
    expected = [alff[labels == k].mean() for k in range(1, 11)]
    np.testing.assert_allclose(table.to_numpy()[0], expected, rtol=1e-5)
    _one(out, f"{source}_atlas-Struct10_den-91k_stat-pearsoncorrelation_boldmap.pconn.nii")
    _one(out, f"{source}_atlas-Struct10_stat-pearsoncorrelation_relmat.tsv")
    _one(out, f"{source}_atlas-Struct10_stat-coverage_bold.tsv")
