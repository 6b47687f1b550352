"""``--denoise ica_aroma``: outputs named ``desc-icaaroma`` (giga-connectome's name for
nilearn's preset), denoised as nilearn does, read by the group level and by pybids."""

import json
import warnings

import nibabel as nib
import numpy as np
from nilearn.interfaces.fmriprep import load_confounds_strategy
from nilearn.maskers import NiftiLabelsMasker

from connscale.cli.main import main
from connscale.denoise import STRATEGIES
from connscale.io.bids import bids_name, parse_bids_name, strategy_desc
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import ATLAS, T_R, atlas_img, make_fmriprep
from tests.bids._pybids import assert_pybids_reads

RUNS = [("01", None, "rest", None), ("02", None, "rest", None)]
SOURCE = "sub-01_task-rest_space-MNI152NLin2009cAsym"


def test_every_strategy_names_a_valid_desc():
    assert strategy_desc("ica_aroma") == "icaaroma"
    for strategy in STRATEGIES:
        name = bids_name(
            {"sub": "01", "desc": strategy_desc(strategy)}, suffix="relmat", extension=".tsv"
        )
        assert parse_bids_name(name)["desc"] == strategy_desc(strategy)


def _participant(root, out, atlas):
    argv = ["bids", str(root), str(out), "participant", "--atlas", str(atlas)]
    argv += ["--atlas-name", "Slab4", "--denoise", "ica_aroma", "--backend", "serial"]
    return main(argv + ["--no-reports", "-q"])


def test_ica_aroma_runs_equal_nilearn_and_feed_the_group_level(tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", RUNS, desc="smoothAROMAnonaggr")
    atlas = tmp_path / ATLAS
    nib.save(atlas_img(), atlas)
    out = tmp_path / "out"
    assert _participant(root, out, atlas) == 0
    func = out / "sub-01" / "func"
    series, _ = load_timeseries(func / f"{SOURCE}_seg-Slab4_desc-icaaroma_timeseries.tsv")

    bold = root / "sub-01" / "func" / f"{SOURCE}_desc-smoothAROMAnonaggr_bold.nii.gz"
    confounds, sample_mask = load_confounds_strategy(str(bold), denoise_strategy="ica_aroma")
    img = nib.load(bold)
    masker = NiftiLabelsMasker(
        labels_img=atlas_img(),
        standardize="zscore_sample",
        detrend=True,
        t_r=T_R,
        mask_img=str(bold).replace("desc-smoothAROMAnonaggr_bold", "desc-brain_mask"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = masker.fit_transform(
            nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float64), img.affine),
            confounds=confounds,
            sample_mask=sample_mask,
        )
    np.testing.assert_allclose(series, ref, atol=1e-5)
    meta = json.loads(
        (func / f"{SOURCE}_seg-Slab4_meas-PearsonCorrelation_desc-icaaroma_relmat.json").read_text()
    )
    assert meta["DenoiseStrategy"] == "ica_aroma"
    assert meta["ConfoundRegressors"] == sorted(map(str, confounds.columns))

    assert main(["bids", str(root), str(out), "group", "--denoise", "ica_aroma", "-q"]) == 0
    assert (
        out / "group" / "seg-Slab4_meas-PearsonCorrelation_desc-icaaroma_features.tsv"
    ).is_file()
    assert_pybids_reads(out, source=root)


def test_ica_aroma_without_the_aroma_bold_is_one_line(tmp_path, capsys):
    root = make_fmriprep(tmp_path / "fmriprep", RUNS)  # desc-preproc only
    atlas = tmp_path / ATLAS
    nib.save(atlas_img(), atlas)
    assert _participant(root, tmp_path / "out", atlas) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "desc-smoothAROMAnonaggr" in err and "--use-aroma" in err and "desc preproc" in err
