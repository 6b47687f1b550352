"""The participant level's QC tables and --despike, on a fake fMRIPrep tree."""

import json
from dataclasses import replace

import nibabel as nib
import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from connscale.bidsapp.cleaning import decode_run
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.group import run_group
from connscale.bidsapp.layout import find_runs
from connscale.bidsapp.participant import run_participant
from connscale.bidsapp.qc_outputs import despike_run
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from connscale.qc import QC_COLUMNS
from tests.bids._fmriprep import AFFINE, ATLAS, T_R, atlas_img, make_fmriprep
from tests.qc.test_despike import _reference as despike_reference
from tests.qc.test_qc import _xcpd_dvars


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bids")
    runs = [(sub, None, "rest", None) for sub in ("01", "02", "03", "04")]
    root = make_fmriprep(tmp / "fmriprep", runs)
    for k, (sub, *_) in enumerate(runs):  # each run its own motion (the same file otherwise)
        path = next(root.glob(f"sub-{sub}/func/*_desc-confounds_timeseries.tsv"))
        confounds = pd.read_csv(path, sep="\t")
        confounds["framewise_displacement"] *= 1 + k**1.5 / 2
        confounds.to_csv(path, sep="\t", index=False, na_rep="n/a")
    nib.save(atlas_img(), tmp / ATLAS)
    return tmp, root


def _run(tree, out, **kwargs):
    tmp, root = tree
    return run_participant(
        root,
        out,
        atlas=tmp / ATLAS,
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic"},
        backend="serial",
        device="cpu",
        reports=False,
        **kwargs,
    )


def _fd(root, sub):
    confounds = next(root.glob(f"sub-{sub}/func/*_desc-confounds_timeseries.tsv"))
    return pd.read_csv(confounds, sep="\t")["framewise_displacement"].fillna(0).to_numpy()


def test_qc_tables_without_voxels_leave_dvars_na(tree, tmp_path):
    _, root = tree
    out = tmp_path / "out"
    report = _run(tree, out, measures=("fc", "timeseries"), participant_label=["01", "02"])
    assert report.counts["ok"] == 2
    for sub in ("01", "02"):
        name = f"sub-{sub}_task-rest_space-MNI152NLin2009cAsym_desc-simple_qc.tsv"
        table = out / f"sub-{sub}/func" / name
        row = pd.read_csv(table, sep="\t", na_values=["n/a"]).iloc[0]
        fd = _fd(root, sub)
        assert row["mean_fd"] == pytest.approx(fd.mean())
        assert row["max_fd"] == pytest.approx(fd.max())
        series = next(out.glob(f"sub-{sub}/func/*_timeseries.json"))
        kept = np.asarray(json.loads(series.read_text())["KeptVolumes"])
        assert row["num_dummy_volumes"] == 0  # (nilearn's non-steady-state volumes: censored)
        assert row["num_retained_volumes"] == kept.size
        assert row["num_censored_volumes"] == fd.size - kept.size
        assert row["mean_fd_post_censoring"] == pytest.approx(fd[kept].mean())
        assert row["retained_seconds"] == pytest.approx(kept.size * T_R)
        assert np.isnan(row["mean_dvars_initial"]) and np.isnan(row["fd_dvars_correlation_final"])
        meta = json.loads(table.with_suffix(".json").read_text())
        assert "not read" in meta["Notes"][0] and meta["Despiked"] is False
        assert set(QC_COLUMNS) <= set(meta)
    dataset = pd.read_csv(out / "desc-simple_qc.tsv", sep="\t", na_values=["n/a"])
    assert list(dataset["sub"].astype(str).str.zfill(2)) == ["01", "02"]
    assert list(dataset.columns[-len(QC_COLUMNS) :]) == list(QC_COLUMNS)


def test_despike_gives_dvars_and_changes_the_region_series(tree, tmp_path):
    tmp, root = tree
    plain, despiked = tmp_path / "plain", tmp_path / "despiked"
    _run(tree, plain, measures=("timeseries",), participant_label="01")
    _run(tree, despiked, measures=("timeseries",), participant_label="01", despike=True)
    name = "sub-01/func/sub-01_task-rest_space-MNI152NLin2009cAsym_seg-Slab4_desc-simple"
    before, _ = load_timeseries(plain / f"{name}_timeseries.tsv")
    after, _ = load_timeseries(despiked / f"{name}_timeseries.tsv")
    assert not np.allclose(before, after, atol=1e-6)
    row = pd.read_csv(next(despiked.glob("sub-01/func/*_qc.tsv")), sep="\t").iloc[0]
    # The initial DVARS is of the BOLD as read, before despiking (XCP-D's).
    bold = nib.load(next(root.glob("sub-01/func/*_desc-preproc_bold.nii.gz"))).get_fdata()
    mask = nib.load(next(root.glob("sub-01/func/*_desc-brain_mask.nii.gz"))).get_fdata() > 0
    expected = _xcpd_dvars(bold[mask].astype(np.float32).astype(np.float64))[1]
    assert row["mean_dvars_initial"] == pytest.approx(expected.mean(), rel=1e-5)
    assert np.isfinite(row["mean_dvars_final"]) and np.isfinite(row["fd_dvars_correlation_final"])


def test_despiked_region_means_are_means_of_despiked_voxels(tree, tmp_path):
    tmp, root = tree
    config = ParticipantConfig(
        str(root),
        str(tmp_path),
        atlas=str(tmp / ATLAS),
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic"},
        measures=("timeseries",),
        reports=False,
        despike=True,
        device="cpu",
    )
    run = find_runs(root, participant_label=["01"], strategy="simple")[0]
    decoded = decode_run(config, run)
    assert decoded.data is not None  # despiking reads the voxels
    data = decoded.data.copy()
    data[5, :10] += 400.0  # planted spikes
    decoded = replace(decoded, data=data)
    result = despike_run(config, decoded, {"dummy_scans": 0}, {"clean": 0.0})
    voxels = np.stack(
        [despike_reference(data[:, v].astype(np.float64)) for v in range(data.shape[1])], axis=1
    )
    np.testing.assert_allclose(result.data, voxels, rtol=1e-5)
    labels = decoded.atlas[decoded.mask]
    expected = np.stack([voxels[:, labels == r].mean(axis=1) for r in decoded.regions], axis=1)
    np.testing.assert_allclose(result.region_means, expected, rtol=1e-5)
    assert abs(result.data[5, 0] - data[5, 0]) > 100  # the planted spike is squashed


def test_group_qc_fc_and_its_distance_dependence(tree, tmp_path):
    out = tmp_path / "out"
    _run(tree, out, measures=("fc",))
    run_group(out, strategy="simple", features=("edges",), device="cpu")
    relmats = sorted(out.glob("sub-*/func/*_relmat.tsv"))
    assert len(relmats) == 4
    edges, mean_fd = [], []
    for path in relmats:
        matrix, names = read_relmat_tsv(path)
        edges.append(matrix[np.triu_indices(len(names), 1)])
        mean_fd.append(
            json.loads(path.with_suffix(".json").read_text())["MeanFramewiseDisplacement"]
        )
    edges, mean_fd = np.tanh(np.arctanh(np.clip(edges, -1 + 1e-7, 1 - 1e-7))), np.array(mean_fd)
    table = pd.read_csv(
        out / "group/seg-Slab4_meas-PearsonCorrelation_stat-qcfc_desc-simple_qc.tsv", sep="\t"
    )
    assert np.ptp(mean_fd) > 0.01
    expected = [np.corrcoef(edges[:, k], mean_fd)[0, 1] for k in range(edges.shape[1])]
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(table["qcfc"], expected, rtol=1e-6)
    # The slab atlas: region r spans x = 1 + r (voxels), y and z 1..4; 3 mm voxels.
    labels = np.asarray(atlas_img().dataobj)
    centroids = np.array([np.argwhere(labels == r).mean(axis=0) for r in (1, 2, 3, 4)])
    centroids = centroids * np.diag(AFFINE)[:3]
    i, j = np.triu_indices(4, 1)
    np.testing.assert_allclose(
        table["distance_mm"], np.linalg.norm(centroids[i] - centroids[j], axis=1)
    )
    meta = json.loads(
        (out / "group/seg-Slab4_meas-PearsonCorrelation_stat-qcfc_desc-simple_qc.json").read_text()
    )
    rho = spearmanr(table["qcfc"], table["distance_mm"]).statistic
    assert meta["DistanceDependence"] == pytest.approx(rho)


def test_a_failing_qc_table_keeps_the_run_s_other_sets(tree, tmp_path, monkeypatch):
    import connscale.qc

    def broken(*args, **kwargs):
        raise ValueError("DVARS broke")

    monkeypatch.setattr(connscale.qc, "dvars", broken)
    report = _run(tree, tmp_path / "out", measures=("fc",), participant_label="01", despike=True)
    (record,) = report.records
    assert record["status"] == "partial"
    assert record["failed_measures"] == {"qc": "ValueError: DVARS broke"}
    assert [p for p in record["outputs"] if p.endswith("_relmat.tsv")]
    assert not list((tmp_path / "out").glob("sub-01/func/*_qc.tsv"))
