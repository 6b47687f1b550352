"""XCP-D's post-processing on CIFTI runs: the QC table, --despike and --output-type interpolated."""

import json

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from connscale.bidsapp.participant import run_participant
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from connscale.qc import QC_COLUMNS
from tests.bids._fmriprep import (
    CIFTI_ATLAS,
    T_R,
    brain_model_91k,
    make_fmriprep_cifti,
    write_cifti_atlas,
)
from tests.qc.test_despike import _reference as despike_reference
from tests.qc.test_qc import _xcpd_dvars

CORTEX = 59412
STRATEGY = {"strategy": "simple", "strategy_params": {"motion": "basic"}}
BOLD = "sub-{}/func/sub-{}_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
SERIES = "sub-01/func/sub-01_task-rest_space-fsLR_seg-Struct10_den-91k_desc-simple"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    # The first subcortical structures (accumbens, amygdala, brain stem): a small brain model.
    tmp = tmp_path_factory.mktemp("cifti")
    small = brain_model_91k()[CORTEX : CORTEX + 4394]
    runs = [("01", None, "rest", None), ("02", None, "rest", None)]
    root = make_fmriprep_cifti(tmp / "fmriprep", runs, brain_model=small)
    labels = 1 + (4 * np.arange(len(small))) // len(small)  # 4 parcels
    write_cifti_atlas(tmp / CIFTI_ATLAS, brain_model=small, labels=labels)
    return tmp, root


def _run(tree, out, **kwargs):
    tmp, root = tree
    return run_participant(
        root, out, atlas=tmp / CIFTI_ATLAS, atlas_name="Struct10", space=["fsLR"], den=["91k"],
        backend="serial", device="cpu", reports=False, **{**STRATEGY, **kwargs},
    )  # fmt: skip


def _data(root, sub="01") -> np.ndarray:
    return np.asarray(nib.load(root / BOLD.format(sub, sub)).get_fdata(), dtype=np.float64)


def _context(tree, **options) -> dict:
    from connscale.bidsapp.cleaning import _cleaning_context
    from connscale.bidsapp.config import ParticipantConfig
    from connscale.bidsapp.layout import find_runs

    tmp, root = tree
    config = ParticipantConfig(
        str(root), str(tmp / "unused"), str(tmp / CIFTI_ATLAS), "Struct10", **STRATEGY, **options
    )
    run = find_runs(root, participant_label=["01"], strategy="simple", file_format="cifti")[0]
    return _cleaning_context(config, run, _data(root).shape[0])


def _parcel_means(tree, data: np.ndarray) -> np.ndarray:
    from connscale.io.cifti import read_cifti_labels

    tmp, _ = tree
    labels = read_cifti_labels(tmp / CIFTI_ATLAS).labels
    keys = sorted(k for k in np.unique(labels) if k > 0)
    return np.stack([data[:, labels == k].mean(axis=1) for k in keys], axis=1)


def test_cifti_qc_table_has_the_grayordinates_dvars_and_the_runs_fd(tree, tmp_path):
    from connscale.denoise import clean_signals
    from connscale.qc import dvars

    _, root = tree
    out = tmp_path / "out"
    report = _run(tree, out, measures=["timeseries"])
    assert report.counts["ok"] == 2, report.records
    table = out / "sub-01/func/sub-01_task-rest_space-fsLR_den-91k_desc-simple_qc.tsv"
    row = pd.read_csv(table, sep="\t", na_values=["n/a"]).iloc[0]
    data = _data(root)
    fd = pd.read_csv(next(root.glob("sub-01/func/*_desc-confounds_timeseries.tsv")), sep="\t")
    fd = fd["framewise_displacement"].fillna(0).to_numpy()
    assert row["mean_fd"] == pytest.approx(fd.mean())
    assert row["max_fd"] == pytest.approx(fd.max())
    kept = np.asarray(json.loads((out / f"{SERIES}_timeseries.json").read_text())["KeptVolumes"])
    assert row["num_retained_volumes"] == kept.size
    assert row["num_censored_volumes"] == fd.size - kept.size
    assert row["mean_fd_post_censoring"] == pytest.approx(fd[kept].mean())
    assert row["retained_seconds"] == pytest.approx(kept.size * T_R)
    # DVARS of the grayordinate series (XCP-D's compute_dvars, transcribed in numpy).
    assert row["mean_dvars_initial"] == pytest.approx(_xcpd_dvars(data.T)[1].mean(), rel=1e-5)
    context = _context(tree)
    cleaned = clean_signals(data, context["operator"], standardize=None, dtype="float64")
    final = _xcpd_dvars(np.asarray(cleaned).T)[1]
    assert row["mean_dvars_final"] == pytest.approx(final.mean(), rel=1e-4)
    assert row["mean_dvars_final"] == pytest.approx(dvars(cleaned)[1].mean(), rel=1e-4)
    correlation = np.corrcoef(fd[kept], final)[0, 1]
    assert row["fd_dvars_correlation_final"] == pytest.approx(correlation, abs=1e-4)
    meta = json.loads(table.with_suffix(".json").read_text())
    assert set(QC_COLUMNS) <= set(meta) and "Notes" not in meta
    dataset = pd.read_csv(out / "desc-simple_qc.tsv", sep="\t", na_values=["n/a"])
    assert list(dataset["sub"].astype(str).str.zfill(2)) == ["01", "02"]
    assert list(dataset["den"]) == ["91k", "91k"]


def test_cifti_qc_table_under_xcpds_spelling(tree, tmp_path):
    out = tmp_path / "out"
    report = _run(tree, out, measures=["fc"], participant_label=["01"], output_spelling="xcpd")
    assert report.counts["ok"] == 1, report.records
    assert list(out.glob("sub-01/func/*_desc-linc_qc.tsv"))


def test_despiked_cifti_parcel_series_are_cleaned_means_of_despiked_grayordinates(tree, tmp_path):
    from connscale.denoise import clean_signals

    _, root = tree
    bold = root / BOLD.format("01", "01")
    before = bold.read_bytes()
    out = tmp_path / "out"
    report = _run(tree, out, measures=["timeseries"], participant_label=["01"], despike=True)
    assert report.counts["ok"] == 1, report.records
    assert bold.read_bytes() == before  # the memory-mapped series are not written to
    data = _data(root)
    despiked = np.stack([despike_reference(data[:, v]) for v in range(data.shape[1])], axis=1)
    context = _context(tree, despike=True)
    expected = clean_signals(
        _parcel_means(tree, despiked), context["operator"], standardize="zscore_sample",
        dtype="float64",
    )  # fmt: skip
    series, _ = load_timeseries(out / f"{SERIES}_timeseries.tsv")
    np.testing.assert_allclose(series, expected, atol=1e-5)
    plain = clean_signals(
        _parcel_means(tree, data), context["operator"], standardize="zscore_sample",
        dtype="float64",
    )  # fmt: skip
    assert not np.allclose(series, plain, atol=1e-5)  # despiking changed them
    row = pd.read_csv(next(out.glob("sub-01/func/*_qc.tsv")), sep="\t").iloc[0]
    # The initial DVARS is of the grayordinates as read, before despiking (XCP-D's).
    assert row["mean_dvars_initial"] == pytest.approx(_xcpd_dvars(data.T)[1].mean(), rel=1e-5)


def test_interpolated_cifti_series_have_every_volume_after_the_dummy_scans(tree, tmp_path):
    from connscale.io.cifti import read_cifti_series

    out = tmp_path / "out"
    options = dict(fd_thresh=0.17, min_time=0, dummy_scans=2, output_type="interpolated")
    report = _run(
        tree, out, measures=["fc", "timeseries"], participant_label=["01"], write_denoised=True,
        **options,
    )  # fmt: skip
    assert report.counts["ok"] == 1, report.records
    context = _context(tree, **options)
    every, kept = context["series_operator"].volumes, context["operator"].volumes
    assert every.tolist() == list(range(2, _data(tree[1]).shape[0]))
    assert kept.size < every.size  # some volumes censored
    series, _ = load_timeseries(out / f"{SERIES}_timeseries.tsv")
    meta = json.loads((out / f"{SERIES}_timeseries.json").read_text())
    assert series.shape[0] == every.size and meta["KeptVolumes"] == every.tolist()
    assert meta["InterpolatedVolumes"] == sorted(set(every.tolist()) - set(kept.tolist()))
    ptseries = read_cifti_series(out / f"{SERIES.replace('desc-', 'stat-mean_desc-')}"
                                 "_timeseries.ptseries.nii")  # fmt: skip
    np.testing.assert_allclose(ptseries.data, series, atol=1e-5)
    # The correlations are of the kept volumes, not the interpolated ones.
    relmat, _ = read_relmat_tsv(
        out / f"{SERIES.replace('desc-', 'meas-PearsonCorrelation_desc-')}_relmat.tsv"
    )
    rows = np.isin(every, kept)
    np.testing.assert_allclose(relmat, np.corrcoef(series[rows].T), atol=1e-5)
    dtseries = next(out.glob("sub-01/func/*_desc-simple_bold.dtseries.nii"))
    assert read_cifti_series(dtseries).data.shape[0] == every.size
    denoised = json.loads(dtseries.with_name(dtseries.name.replace(".dtseries.nii", ".json"))
                          .read_text())  # fmt: skip
    assert denoised["InterpolatedVolumes"] == meta["InterpolatedVolumes"]
