"""The BIDS-App on fMRIPrep's grayordinates: fsLR dtseries runs end to end."""

import json

import nibabel as nib
import numpy as np
import pytest
from nilearn import signal

from connscale.bidsapp.group import run_group
from connscale.bidsapp.participant import run_participant
from connscale.denoise import load_confounds
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import (
    CIFTI_ATLAS,
    T_R,
    brain_model_91k,
    cifti_parcels,
    make_fmriprep_cifti,
    participant_log,
    write_cifti_atlas,
    write_surfaces,
)
from tests.bids._pybids import assert_pybids_reads

CORTEX = 59412  # the two cortical hemispheres of the 91k model: another brain model


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cifti")
    root = make_fmriprep_cifti(
        tmp / "fmriprep",
        [
            ("01", None, "rest", None),
            ("02", None, "rest", None),
            ("03", None, "rest", None, {"series_t_r": 1.0}),  # the dtseries says 1 s, the JSON 2 s
            ("04", None, "rest", None, {"brain_model": brain_model_91k()[:CORTEX]}),
        ],
    )
    write_cifti_atlas(tmp / CIFTI_ATLAS)
    return tmp, root


def _run(tree, out, **kwargs):
    tmp, root = tree
    options = {
        "atlas": tmp / CIFTI_ATLAS,
        "atlas_name": "Struct10",
        "strategy": "simple",
        "strategy_params": {"motion": "basic"},
        "space": ["fsLR"],
        "den": ["91k"],
        "backend": "serial",
        "device": "cpu",
    }
    return run_participant(root, out, **{**options, **kwargs})


@pytest.fixture(scope="module")
def published(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("cifti_out") / "out"
    surfaces = write_surfaces(out.parent / "surfaces")
    report = _run(tree, out, write_denoised=True, measures=["fc", "timeseries", "dfc"],
                  window_length=10, surfaces=surfaces)  # fmt: skip
    return out, report


def _files(out, sub):
    return sorted(p.name for p in (out / f"sub-{sub}" / "func").iterdir())


def test_outputs_equal_nilearn_and_numpy(tree, published):
    tmp, root = tree
    out, report = published
    prefix = "sub-01_task-rest_space-fsLR_seg-Struct10_den-91k"
    func = out / "sub-01" / "func"
    relmat_tsv = func / f"{prefix}_meas-PearsonCorrelation_desc-simple_relmat.tsv"
    relmat, names = read_relmat_tsv(relmat_tsv)
    series, header = load_timeseries(func / f"{prefix}_desc-simple_timeseries.tsv")
    assert names == header == [f"parcel{k}" for k in range(1, 11)]
    bold = root / "sub-01" / "func" / "sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
    data = np.asarray(nib.load(bold).get_fdata(), dtype=np.float64)
    labels = cifti_parcels()
    means = np.stack([data[:, labels == k].mean(axis=1) for k in range(1, 11)], axis=1)
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic")
    ref = signal.clean(
        means,
        confounds=confounds,
        sample_mask=sample_mask,
        detrend=True,
        standardize="zscore_sample",
        t_r=T_R,
    )
    np.testing.assert_allclose(series, ref, atol=1e-5)
    ptseries = nib.load(func / f"{prefix}_stat-mean_desc-simple_timeseries.ptseries.nii")
    np.testing.assert_allclose(ptseries.get_fdata(), ref, atol=1e-5)
    parcels = ptseries.header.get_axis(1)
    assert list(parcels.name) == names
    assert ptseries.header.get_axis(0).step == T_R
    assert ptseries.shape[0] == len(sample_mask)  # the kept volumes
    pconn = nib.load(func / f"{prefix}_stat-pearsoncorrelation_desc-simple_boldmap.pconn.nii")
    expected = np.corrcoef(series.T)
    np.testing.assert_allclose(pconn.get_fdata(), expected, atol=1e-6)
    np.testing.assert_allclose(relmat, expected, atol=1e-6)
    coverage = nib.load(func / f"{prefix}_stat-coverage_desc-simple_boldmap.pscalar.nii")
    np.testing.assert_array_equal(coverage.get_fdata(), np.ones((1, 10)))
    denoised = nib.load(func / "sub-01_task-rest_space-fsLR_den-91k_desc-simple_bold.dtseries.nii")
    assert denoised.header.get_axis(1) == brain_model_91k()
    cleaned = np.asarray(denoised.get_fdata())
    grayordinate = np.flatnonzero(labels == 3)[:5]
    np.testing.assert_allclose(
        cleaned[:, grayordinate],
        signal.clean(
            data[:, grayordinate],
            confounds=confounds,
            sample_mask=sample_mask,
            detrend=True,
            standardize="zscore_sample",
            t_r=T_R,
        ),
        atol=1e-4,
    )
    html = (func / f"{prefix}_desc-simple_report.html").read_text()
    assert "cortical surfaces (tpl-fsLR_den-32k_hemi-L_sphere.surf.gii" in html
    assert f"{prefix}_meas-PearsonCorrelation_desc-simple_dfc.h5" in _files(out, "01")
    record = next(r for r in report.records if r["name"].startswith("sub-01"))
    assert record["status"] == "ok" and record["n_grayordinates"] == 91282


def test_bad_runs_are_refused_in_one_line(published):
    out, report = published
    assert report.counts == {"ok": 2, "skipped": 0, "error": 0, "refused": 2}
    log, errors = participant_log(out)
    reasons = {r["name"].split("_")[0]: r for r in log["records"] if r["status"] == "refused"}
    assert (
        "its series step (TR) is 1 s but the sidecar's RepetitionTime is 2 s"
        in (reasons["sub-03"]["error"])
    )
    assert "on another brain model" in reasons["sub-04"]["error"]
    for sub in ("03", "04"):
        assert "\n" not in reasons[f"sub-{sub}"]["error"]
        assert not (out / f"sub-{sub}").exists()  # nothing published for it
    assert errors[0].split("\t") == ["name", "input", "status", "measure", "error"]
    rows = [line.split("\t") for line in errors[1:]]
    assert sorted((row[0].split("_")[0], row[2]) for row in rows) == [
        ("sub-03", "refused"),
        ("sub-04", "refused"),
    ]
    assert {row[4] for row in rows} == {r["error"] for r in reasons.values()}


def test_pybids_reads_the_outputs(tree, published):
    _, root = tree
    out, _ = published
    assert_pybids_reads(out, source=root)


def test_resume_skips_and_group_reads_the_relmats(tree, published):
    out, _ = published
    again = _run(tree, out, write_denoised=True, measures=["fc", "timeseries", "dfc"],
                 window_length=10, participant_label=["01", "02"])  # fmt: skip
    assert again.counts["skipped"] == 2
    result = run_group(out, atlas_name="Struct10", strategy="simple")
    assert result.features.shape[0] == 2
    mean = json.loads(next((out / "group").glob("*_relmat.json")).read_text())
    assert mean["NodeNames"] == [f"parcel{k}" for k in range(1, 11)]


def test_up_front_refusals(tree, tmp_path):
    tmp, root = tree
    with pytest.raises(ValueError, match="CIFTI runs have no measure voxelfc"):
        _run(tree, tmp_path / "a", measures=["fc", "voxelfc"])
    with pytest.raises(ValueError, match="nibabel reads CIFTI-2 only|not .*CIFTI"):
        _run(tree, tmp_path / "c", atlas=root / "dataset_description.json")
    with pytest.raises(ValueError, match="desc-confounds_timeseries.tsv is not a readable GIFTI"):
        tsv = next(root.glob("sub-01/func/*_timeseries.tsv"))
        _run(tree, tmp_path / "d", surfaces=[tsv, tsv])
    with pytest.raises(ValueError, match="--surfaces draws CIFTI runs' maps"):
        _run(tree, tmp_path / "e", file_format="nifti", surfaces=[tsv, tsv])


def test_maps_on_grayordinates_equal_numpy(tmp_path):
    # The first subcortical structures (accumbens, amygdala, brain stem): a small brain model.
    small = brain_model_91k()[CORTEX : CORTEX + 4394]
    root = make_fmriprep_cifti(
        tmp_path / "fmriprep", [("01", None, "rest", None)], brain_model=small
    )
    write_cifti_atlas(tmp_path / CIFTI_ATLAS, brain_model=small)
    out = tmp_path / "out"
    report = _run((tmp_path, root), out, measures=["maps"], degree_thresholds=[0.25], reports=True)
    assert report.counts["ok"] == 1, report.records
    func = out / "sub-01" / "func"
    bold = root / "sub-01" / "func" / "sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
    confounds, sample_mask = load_confounds(bold, "simple", motion="basic")
    cleaned = signal.clean(
        np.asarray(nib.load(bold).get_fdata(), dtype=np.float64),
        confounds=confounds,
        sample_mask=sample_mask,
        detrend=True,
        standardize="zscore_sample",
        t_r=T_R,
    )
    r = np.corrcoef(cleaned.T)
    np.fill_diagonal(r, np.nan)
    source = "sub-01_task-rest_space-fsLR_den-91k"
    gcor = nib.load(func / f"{source}_stat-gcor_desc-simple_boldmap.dscalar.nii")
    assert gcor.header.get_axis(1) == small
    np.testing.assert_allclose(gcor.get_fdata()[0], np.nanmean(r, axis=1), atol=1e-4)
    degree = nib.load(func / f"{source}_meas-r025_stat-degree_desc-simple_boldmap.dscalar.nii")
    expected = (r > 0.25).sum(axis=1)
    assert np.abs(degree.get_fdata()[0] - expected).max() <= 1  # pairs at r = 0.25 in float32
    meta = json.loads((func / f"{source}_stat-gcor_desc-simple_boldmap.json").read_text())
    assert meta["Nodes"] == "grayordinates" and meta["NumberOfNodes"] == small.size
    html = (func / f"{source}_stat-maps_desc-simple_report.html").read_text()
    assert "flat per-structure view" in html
    assert_pybids_reads(out, source=root)


def test_a_cifti_run_is_read_in_the_reader_modules(tmp_path):
    from connscale.bidsapp.config import ParticipantConfig
    from connscale.bidsapp.layout import BoldRun
    from connscale.bidsapp.participant import READER_MODULES, _run_task

    bold = tmp_path / "sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
    run = BoldRun(bold, None, None, None, 2.0, {"sub": "01", "task": "rest"})
    config = ParticipantConfig(tmp_path, tmp_path / "out", tmp_path / CIFTI_ATLAS, "Struct10")
    task = _run_task(config, run)
    assert run.is_cifti and task.prepare.__name__ == "prefetch_cifti"
    assert task.prepare.__module__ in READER_MODULES  # no torch (test_reader_imports.py)


def test_layout_finds_fmriprep_dtseries_only(tmp_path):
    import shutil

    from connscale.bidsapp.layout import find_runs
    from tests.bids._fmriprep import make_fmriprep

    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    make_fmriprep_cifti(root, [("01", None, "rest", None)], n_volumes=10)
    func = root / "sub-01" / "func"
    bold = func / "sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
    shutil.copy(bold, func / "sub-01_task-rest_space-fsLR_den-91k_desc-denoised_bold.dtseries.nii")
    [run] = find_runs(root, file_format="cifti", den="91k")
    assert run.bold == bold and run.mask is None and run.problem is None and run.t_r == T_R
    assert run.entities == {"sub": "01", "task": "rest", "space": "fsLR", "den": "91k"}
    [volume] = find_runs(root)
    assert not volume.is_cifti and volume.mask is not None
    refused = r"No CIFTI BOLD .* matches den=\['170k'\]; found 2 .*; den 91k"
    with pytest.raises(ValueError, match=refused):
        find_runs(root, file_format="cifti", den="170k")


def test_constant_grayordinates_left_out_and_a_constant_run_refused(tmp_path):
    from connscale.bidsapp.cifti_decode import decode_cifti_run
    from connscale.bidsapp.cleaning import RunRefused
    from connscale.bidsapp.config import ParticipantConfig
    from connscale.bidsapp.layout import find_runs

    small = brain_model_91k()[CORTEX : CORTEX + 4394]
    root = make_fmriprep_cifti(
        tmp_path / "fmriprep", [("01", None, "rest", None)], brain_model=small
    )
    labels = 1 + (3 * np.arange(len(small))) // len(small)  # 3 parcels
    atlas = write_cifti_atlas(tmp_path / CIFTI_ATLAS, brain_model=small, labels=labels)
    bold = root / "sub-01" / "func" / "sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
    image = nib.load(bold)
    data = np.asarray(image.get_fdata(), dtype=np.float32)
    data[:, :100] = 5.0  # 100 grayordinates of parcel 1 constant
    nib.save(nib.Cifti2Image(data, image.header), bold)
    with pytest.warns(ConstantSeriesWarning, match="left out of their parcels' means"):
        report = _run((tmp_path, root), tmp_path / "out", strategy="none", strategy_params={})
    [record] = report.records
    assert record["status"] == "ok"
    assert any("100 of 4394 grayordinates" in w for w in record["warnings"])
    func = tmp_path / "out" / "sub-01" / "func"
    coverage = nib.load(next(func.glob("*_stat-coverage_*.pscalar.nii"))).get_fdata()[0]
    np.testing.assert_allclose(coverage, [1 - 100 / np.sum(labels == 1), 1, 1])
    nib.save(nib.Cifti2Image(np.full_like(data, 7.0), image.header), bold)
    [run] = find_runs(root, file_format="cifti")
    config = ParticipantConfig(root, tmp_path / "out2", atlas, "Struct10", strategy="none")
    with pytest.raises(RunRefused, match=r"constant over time in every grayordinate \(4394\)"):
        decode_cifti_run(config, run)
