"""What the data cannot support is refused or NaN, recorded and isolated, never published as r.

Trees from nilearn's real fMRIPrep confounds files (tests/bids/_fmriprep.py).
"""

import json
import warnings

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
from nilearn.connectome import ConnectivityMeasure
from nilearn.maskers import NiftiLabelsMasker
from sklearn.covariance import EmpiricalCovariance

from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.denoise import cleaning_operator, load_confounds, residual_dof
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.io.publish import read_manifest
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import (
    ATLAS,
    CONFOUNDS_TSV,
    SHAPE,
    T_R,
    atlas_img,
    make_fmriprep,
    participant_log,
    write_run,
)

LABELS = "index\tname\n1\tVisual\n2\tMotor\n3\tDefault\n4\tLimbic\n"
SCRUB = {"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.15, "scrub": 0}


def _atlas(tmp):
    nib.save(atlas_img(), tmp / ATLAS)
    (tmp / "labels.tsv").write_text(LABELS)
    return {
        "atlas": tmp / ATLAS,
        "atlas_name": "Slab4",
        "atlas_labels": tmp / "labels.tsv",
        "backend": "serial",
        "verbose": 0,
    }


def _errors(out):
    _, rows = participant_log(out)
    assert rows[0].split("\t") == ["name", "input", "status", "measure", "error"]
    return [r.split("\t") for r in rows[1:]]


def _high_motion_run(func, entities, *, n_volumes=120, kept=range(50, 62)):
    """A run of 120 volumes (nilearn's confounds repeated) whose framewise
    displacement is 1 mm except at the 12 volumes ``kept``."""
    bold = write_run(func, entities, seed=7)
    first = pd.read_csv(CONFOUNDS_TSV, sep="\t")
    repeats = [first] + [first.fillna(0)] * (n_volumes // len(first) - 1)  # n/a: first row only
    confounds = pd.concat(repeats, ignore_index=True)
    confounds["non_steady_state_outlier00"] = (confounds.index == 0).astype(float)
    confounds["std_dvars"] = 1.0
    fd = np.ones(n_volumes)
    fd[list(kept)] = 0.05
    confounds["framewise_displacement"] = fd
    confounds.loc[0, "framewise_displacement"] = np.nan
    confounds.to_csv(
        func / f"{entities}_desc-confounds_timeseries.tsv", sep="\t", index=False, na_rep="n/a"
    )
    rng = np.random.default_rng(7)
    data = 1000 + rng.standard_normal((*SHAPE, n_volumes)).astype(np.float32)
    nib.save(nib.Nifti1Image(data, nib.load(bold).affine), bold)
    return bold


def test_residual_dof_counts_every_regressor(tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    bold = next(root.rglob("*_desc-preproc_bold.nii.gz"))
    confounds, sample_mask = load_confounds(bold, "scrubbing", **SCRUB)
    values = confounds.to_numpy()
    operator = cleaning_operator(30, confounds=values, sample_mask=sample_mask, t_r=T_R)
    dof = residual_dof(operator, confounds=values)
    # no filter: kept volumes - the mean - the trend - the independent confounds, exactly
    kept = int(operator.volumes.size)
    assert dof["volumes_kept"] == kept < 30 and dof["confounds"] == values.shape[1] == 12
    assert dof["confound_rank"] == 12 and dof["filter"] == 0
    assert dof["dof"] == pytest.approx(kept - 14) and dof["regressors"] == pytest.approx(14)
    # the low-pass filter's attenuation is counted as regressors too
    none = residual_dof(cleaning_operator(30, t_r=T_R))
    filtered = residual_dof(cleaning_operator(30, t_r=T_R, low_pass=0.1))
    assert none["dof"] == pytest.approx(28)
    assert 5 < filtered["dof"] < 20 and filtered["filter"] > 5
    assert filtered["regressors"] == pytest.approx(30 - filtered["dof"], abs=0.02)


def test_runs_without_degrees_of_freedom_are_refused_with_their_numbers(tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    _high_motion_run(root / "sub-02" / "func", "sub-02_task-rest")
    out = tmp_path / "out"
    report = run_participant(
        root, out, strategy="scrubbing", strategy_params=SCRUB, **_atlas(tmp_path)
    )
    good, bad = report.records
    assert good["status"] == "ok" and good["dof"]["dof"] == pytest.approx(10)
    assert bad["status"] == "refused" and report.counts["refused"] == 1
    assert bad["dof"]["volumes"] == 120 and bad["dof"]["volumes_kept"] == 12
    assert bad["dof"]["dof"] == 0 and bad["dof"]["regressors"] >= 12
    assert "12 of 120 volumes kept" in bad["error"] and "fewer than --min-dof 10" in bad["error"]
    assert not bad["outputs"] and not list(out.glob("sub-02/func/*_relmat.tsv"))
    assert [(r[0], r[2], r[3]) for r in _errors(out)] == [(bad["name"], "refused", "")]
    assert "12 of 120 volumes kept" in _errors(out)[0][4]
    sidecar = json.loads(next(out.glob("sub-01/func/*_relmat.json")).read_text())
    assert sidecar["ResidualDegreesOfFreedom"]["dof"] == pytest.approx(10)
    log, _ = participant_log(out)
    assert log["counts"] == {"ok": 1, "skipped": 0, "refused": 1, "error": 0}
    assert log["parameters"]["min_dof"] == 10
    # The case: nilearn's scrubbing preset, 36 regressors for 12 kept volumes
    # (published as mean |r| = 1.0 before), and 36 for the 30-volume run.
    out = tmp_path / "preset"
    args = ["bids", str(root), str(out), "participant", "--atlas", str(tmp_path / ATLAS)]
    args += ["--atlas-name", "Slab4", "--denoise", "scrubbing", "--backend", "serial", "-q"]
    assert main(args) == 1
    rows = {r[0].split("_")[0]: r for r in _errors(out)}
    assert rows["sub-02"][2] == "refused" and "12 of 120 volumes kept" in rows["sub-02"][4]
    assert "of 36 confounds" in rows["sub-02"][4] and "of 36 confounds" in rows["sub-01"][4]
    assert not [p for p in out.glob("sub-*/**/*") if p.is_file()]  # nothing published


def test_the_30_volume_presets_are_refused_on_the_command_line(tmp_path, capsys):
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    _atlas(tmp_path)
    out = tmp_path / "out"
    args = ["bids", str(root), str(out), "participant", "--atlas", str(tmp_path / ATLAS)]
    args += ["--atlas-name", "Slab4", "--denoise", "simple", "--backend", "serial", "-q"]
    assert main(args) == 1
    assert "1 refused" in capsys.readouterr().out
    (row,) = _errors(out)
    assert row[2] == "refused" and "29 of 30 volumes kept" in row[4]
    assert "30 independent of 30 confounds" not in row[4]  # 27 fit in 29 detrended volumes
    assert "0 residual degrees of freedom" in row[4]
    # a lower floor lets 'none' through; a higher one refuses it
    none = args[:-4] + ["none", "--backend", "serial", "-q"]
    assert main(none + ["--min-dof", "29"]) == 1
    assert "28 residual degrees of freedom" in _errors(out)[0][4]
    assert main(none) == 0 and _errors(out) == []


@pytest.fixture(scope="module")
def constant_region(tmp_path_factory):
    """One run whose Limbic region (label 4) is constant over time."""
    tmp = tmp_path_factory.mktemp("constant")
    root = make_fmriprep(tmp / "fmriprep", [("01", None, "rest", None)])
    bold = next(root.rglob("*_desc-preproc_bold.nii.gz"))
    img = nib.load(bold)
    data = np.asarray(img.dataobj).copy()
    data[np.asarray(atlas_img().dataobj) == 4] = 1234.5
    nib.save(nib.Nifti1Image(data, img.affine), bold)
    return tmp, root, bold


def test_a_constant_region_is_nan_with_one_warning(constant_region, tmp_path):
    tmp, root, bold = constant_region
    out = tmp_path / "out"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = run_participant(
            root,
            out,
            strategy="simple",
            strategy_params={"motion": "basic"},
            measures=["fc", "timeseries", "voxelfc"],
            **_atlas(tmp),
        )
    (record,) = report.records
    assert record["status"] == "ok"
    constant_warnings = [w for w in caught if issubclass(w.category, ConstantSeriesWarning)]
    assert len(constant_warnings) == 1
    assert len(record["warnings"]) == 2  # the regions, the voxels: one warning
    assert "Limbic (constant in the BOLD)" in record["warnings"][0]
    matrix, names = read_relmat_tsv(next(out.rglob("*_relmat.tsv")))
    assert np.isnan(matrix[3]).all() and np.isnan(matrix[:, 3]).all()
    assert np.isfinite(matrix[:3, :3]).all()
    series, _ = load_timeseries(next(out.rglob("*_timeseries.tsv")))
    assert (series[:, 3] == 0).all()
    for sidecar in out.rglob("*seg-Slab4*.json"):
        if "manifest" not in sidecar.name and "stat-coverage" not in sidecar.name:
            assert json.loads(sidecar.read_text())["ConstantRegions"] == ["Limbic"]
    mask = np.asarray(nib.load(str(bold).replace("preproc_bold", "brain_mask")).dataobj) > 0
    n_limbic = int((mask & (np.asarray(atlas_img().dataobj) == 4)).sum())
    voxel = json.loads(
        next(p for p in out.rglob("*_relmat.json") if "seg-" not in p.name).read_text()
    )
    assert voxel["NumberOfConstantVoxels"] == len(voxel["ConstantVoxels"]) == n_limbic
    # The other regions' connectome is nilearn's own.
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic")
    img = nib.load(bold)
    masker = NiftiLabelsMasker(
        labels_img=atlas_img(),
        standardize="zscore_sample",
        detrend=True,
        t_r=T_R,
        mask_img=str(bold).replace("desc-preproc_bold", "desc-brain_mask"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        img64 = nib.Nifti1Image(np.asarray(img.dataobj, dtype=np.float64), img.affine)
        ref = masker.fit_transform(img64, confounds=confounds, sample_mask=sample_mask)
    fc = ConnectivityMeasure(
        kind="correlation", cov_estimator=EmpiricalCovariance(), standardize="zscore_sample"
    ).fit_transform([ref[:, :3]])[0]
    np.testing.assert_allclose(matrix[:3, :3], fc, atol=1e-5)


def test_a_bold_constant_everywhere_is_refused(tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    bold = next(root.rglob("*_desc-preproc_bold.nii.gz"))
    img = nib.load(bold)
    nib.save(nib.Nifti1Image(np.full(img.shape, 1000.0, np.float32), img.affine), bold)
    out = tmp_path / "out"
    report = run_participant(root, out, strategy="none", **_atlas(tmp_path))
    (record,) = report.records
    assert record["status"] == "refused" and "constant over time in every" in record["error"]
    assert not list(out.rglob("*_relmat.tsv"))
    assert _errors(out)[0][2] == "refused"


def test_a_failing_measure_keeps_the_others_and_the_group_lists_what_is_left_out(tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    write_run(root / "sub-02" / "func", "sub-02_task-rest", seed=1, n_volumes=24)
    write_run(root / "sub-03" / "func", "sub-03_task-rest", seed=2, n_volumes=15)
    out = tmp_path / "out"
    params = {
        "strategy": "none",
        "measures": ["fc", "timeseries", "dfc"],
        "window_length": 25,
        "min_dof": 15,
        "reports": False,
        **_atlas(tmp_path),
    }
    report = run_participant(root, out, **params)
    ok, partial, refused = report.records
    assert ok["status"] == "ok" and refused["status"] == "refused"
    assert "13 residual degrees of freedom" in refused["error"]
    # sub-02 keeps 24 volumes: its 25-volume windows fail, its fc and time series publish
    assert partial["status"] == "partial"
    assert list(partial["failed_measures"]) == ["dfc"]
    assert "longer than the 24 volumes kept" in partial["failed_measures"]["dfc"]
    func = out / "sub-02" / "func"
    assert len(list(func.glob("*_relmat.tsv"))) == len(list(func.glob("*_timeseries.tsv"))) == 1
    assert not list(func.glob("*_dfc.h5"))
    manifest = next(func.glob("*_seg-*_manifest.json"))  # the region set's (not the QC set's)
    content = read_manifest(func, manifest.name[: -len("_manifest.json")])
    assert list(content["failed_measures"]) == ["dfc"]
    published = [p.rsplit("/", 1)[1] for p in partial["outputs"] if "_qc." not in p]
    assert sorted(content["files"]) == sorted(published)
    rows = _errors(out)
    assert [(r[0].split("_")[0], r[2], r[3]) for r in rows] == [
        ("sub-02", "partial", "dfc"),
        ("sub-03", "refused", ""),
    ]
    # A re-run does not forget: sub-02's dfc is tried again and recorded again.
    again = run_participant(root, out, **params)
    assert [r["status"] for r in again.records] == ["skipped", "partial", "refused"]
    assert [(r[0].split("_")[0], r[2], r[3]) for r in _errors(out)] == [
        ("sub-02", "partial", "dfc"),
        ("sub-03", "refused", ""),
    ]
    # The group level reads sub-01 and sub-02 and says what it left out, and why.
    result = run_group(out)
    assert [r["sub"] for r in result.runs] == ["01", "02"] and result.states is None
    assert [(e["subject"], e["measure"], e["status"]) for e in result.left_out] == [
        ("02", "dfc", "partial"),
        ("03", "", "refused"),
    ]
    log = json.loads((out / "logs" / "group_report.json").read_text())
    assert log["left_out"] == result.left_out and log["participants"] == ["sub-01", "sub-02"]
    page = next(p for p in result.outputs if p.name.endswith("_report.html")).read_text()
    assert "Warnings (2)" in page and "13 residual degrees of freedom" in page
    assert "longer than the 24 volumes kept" in page
