"""connscale.denoise equals nilearn's cleaning on real fMRIPrep confounds."""

import warnings

import nibabel as nib
import numpy as np
import pytest
from nilearn.connectome import ConnectivityMeasure
from nilearn.maskers import NiftiLabelsMasker
from nilearn.signal import clean
from sklearn.covariance import EmpiricalCovariance

from connscale import correlation
from connscale.bidsapp.decode import read_masked_bold
from connscale.denoise import (
    STRATEGIES,
    clean_regions,
    clean_signals,
    cleaning_operator,
    load_confounds,
    region_signals,
)
from tests.bids._fmriprep import T_R, atlas_img, write_run

# Preset parameters narrowed so the 30-volume real confounds leave degrees of freedom
# (the presets' 24 motion terms + cosines would project out every 30-volume series).
PARAMS = {
    "simple": {"motion": "basic"},
    "scrubbing": {"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0},
    "compcor": {"motion": "basic", "n_compcor": 5},
    "ica_aroma": {},
    "none": {},
}
#: nilearn's presets (XCP-D's nuisance sets: tests/bids/test_nuisance.py).
PRESETS = tuple(PARAMS)
FILTERS = [(None, None), (0.2, None)]  # a 30-volume run is too short for a band-pass


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    func = tmp_path_factory.mktemp("fmriprep") / "sub-01" / "func"
    bold = write_run(func, "sub-01_task-rest", seed=3)
    aroma = write_run(
        func, "sub-01_task-aroma", seed=4, space="MNI152NLin6Asym", desc="smoothAROMAnonaggr"
    )
    return {s: (aroma if s == "ica_aroma" else bold) for s in STRATEGIES}


def _masked(bold):
    mask_path = (
        str(bold)
        .replace("desc-preproc_bold", "desc-brain_mask")
        .replace("desc-smoothAROMAnonaggr_bold", "desc-brain_mask")
    )
    mask = np.asarray(nib.load(mask_path).dataobj).astype(bool)
    data = np.asarray(nib.load(bold).dataobj, dtype=np.float32)
    return data[mask].T, mask, mask_path


@pytest.mark.parametrize("low_pass, high_pass", FILTERS)
@pytest.mark.parametrize("strategy", PRESETS)
def test_voxel_cleaning_equals_signal_clean(runs, strategy, low_pass, high_pass):
    confounds, sample_mask = load_confounds(runs[strategy], strategy, **PARAMS[strategy])
    if strategy == "scrubbing":
        assert sample_mask is not None and sample_mask.size < 25  # volumes really censored
    series, _, _ = _masked(runs[strategy])
    op = cleaning_operator(
        series.shape[0],
        confounds=confounds,
        sample_mask=sample_mask,
        low_pass=low_pass,
        high_pass=high_pass,
        t_r=T_R,
    )
    ours = clean_signals(series, op, device="cpu", dtype="float64")
    ours32 = clean_signals(series, op, device="cpu", dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = clean(
            series.astype(np.float64),
            confounds=confounds,
            sample_mask=None if sample_mask is None else sample_mask.copy(),
            low_pass=low_pass,
            high_pass=high_pass,
            t_r=T_R,
        )
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, atol=1e-9)
    np.testing.assert_allclose(ours32, ref, atol=2e-5)
    assert np.array_equal(op.volumes, np.arange(30) if sample_mask is None else sample_mask)


@pytest.mark.parametrize("low_pass, high_pass", FILTERS)
@pytest.mark.parametrize("strategy", PRESETS)
def test_region_series_and_fc_equal_masker(runs, strategy, low_pass, high_pass):
    bold = runs[strategy]
    confounds, sample_mask = load_confounds(bold, strategy, **PARAMS[strategy])
    series, mask, mask_path = _masked(bold)
    atlas = atlas_img()
    labels = np.asarray(atlas.dataobj)[mask]
    op = cleaning_operator(
        series.shape[0],
        confounds=confounds,
        sample_mask=sample_mask,
        low_pass=low_pass,
        high_pass=high_pass,
        t_r=T_R,
    )
    ours = clean_regions(series, labels, op, device="cpu")
    ours64 = clean_regions(series, labels, op, device="cpu", dtype="float64")
    # The participant level's path: float64 region means gathered while decoding, cleaned.
    means = read_masked_bold(bold, mask, labels=np.asarray(atlas.dataobj), voxels=False)
    assert means.data is None and means.regions.tolist() == [1, 2, 3, 4]
    decoded = clean_signals(means.region_means, op, device="cpu")
    decoded64 = clean_signals(means.region_means, op, device="cpu", dtype="float64")
    masker = NiftiLabelsMasker(
        labels_img=atlas,
        mask_img=mask_path,
        standardize="zscore_sample",
        detrend=True,
        low_pass=low_pass,
        high_pass=high_pass,
        t_r=T_R,
    )
    # The same BOLD values as float64, so that nilearn cleans in float64: on the float32
    # image its own float32 arithmetic is up to ~1.1e-5 from the exact series here.
    img = nib.load(bold)
    img64 = nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float64), img.affine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = masker.fit_transform(img64, confounds=confounds, sample_mask=sample_mask)
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    np.testing.assert_allclose(ours64, ref, atol=1e-9)
    np.testing.assert_allclose(decoded, ref, atol=1e-5)
    np.testing.assert_allclose(decoded64, ref, atol=1e-9)
    fc_ref = ConnectivityMeasure(
        kind="correlation", cov_estimator=EmpiricalCovariance(), standardize="zscore_sample"
    ).fit_transform([ref])[0]
    np.testing.assert_allclose(correlation(ours, device="cpu", dtype="float64"), fc_ref, atol=1e-5)


def test_region_signals_are_label_means():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 9)) + 500
    labels = np.array([0, 2, 2, 1, 1, 1, 3, 0, 3])
    out = region_signals(x, labels, device="cpu", dtype="float64")
    expected = np.stack([x[:, labels == k].mean(1) for k in (1, 2, 3)], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="strategy must be one of"):
        load_confounds("x_bold.nii.gz", "gsr")
    with pytest.raises(ValueError, match="confounds have 5 rows"):
        cleaning_operator(6, confounds=np.ones((5, 2)))
    op = cleaning_operator(6)
    with pytest.raises(ValueError, match=r"shape \(6, n_series\)"):
        clean_signals(np.ones((5, 2)), op, device="cpu")
    with pytest.raises(ValueError, match="standardize must be"):
        clean_signals(np.ones((6, 2)), op, standardize="psc", device="cpu")
    with pytest.raises(ValueError, match="no voxel"):
        region_signals(np.ones((6, 2)), [1, 1], regions=[1, 2], device="cpu")
