"""connscale classify reads every connscale output: the cohort's _pairs.h5 and _dfc.h5, the
BIDS-App's relmat TSV / H5, pairs and DFC stores."""

import json

import nibabel as nib
import numpy as np
import pytest

import connscale
from connscale.classify.features import file_kind, load_features, read_pair_file
from connscale.cli import main as cli_main
from connscale.cohort import run_cohort
from connscale.datasets import simulate_cohort
from connscale.fc.pairs import pair_summary, pairwise_dfc
from connscale.io.timeseries import load_timeseries

WINDOW, STEP = 20, 10


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cohort")
    sim = simulate_cohort(12, 5, 120, effect_edges=2, effect_size=0.9, random_state=1)
    written = sim.write(tmp / "data")
    outputs = {}
    for job, params in (
        ("pairs", {"window_length": WINDOW, "step": STEP, "threshold": 0.3}),
        ("dfc", {"window_length": WINDOW, "step": STEP}),
        (
            "dfc-sparse",
            {"window_length": WINDOW, "step": STEP, "kind": "sparse", "threshold": 0.2},
        ),
    ):
        report = run_cohort(
            written["timeseries"],
            job.split("-")[0],
            tmp / job,
            params=params,
            engine="serial",
            verbose=0,
        )
        assert report.n_failed == 0
        outputs[job] = sorted(str(p) for p in (tmp / job).rglob("*.h5"))
        assert len(outputs[job]) == 12
    return sim, written, outputs


def _reference(timeseries_path, threshold):
    series, _ = load_timeseries(timeseries_path)
    courses = pairwise_dfc(series[None], WINDOW, STEP, device="cpu", dtype="float64").courses
    return pair_summary(courses, threshold=threshold)


def test_cohort_pairs_h5(cohort):
    _, written, outputs = cohort
    assert {file_kind(p) for p in outputs["pairs"]} == {"pairs"}
    features = load_features(outputs["pairs"], statistics=("mean", "std", "fraction_above"))
    assert features.X.shape == (12, 3 * 10)
    assert features.statistic[:10] == ["mean"] * 10 and features.region_labels == [
        f"region_{k:02d}" for k in range(5)
    ]
    by_subject = dict(zip(features.subjects, features.X))
    for path in written["timeseries"][:3]:
        ref = _reference(path, 0.3)
        subject = path.name.split("_")[0][4:]
        np.testing.assert_allclose(by_subject[subject], ref.features()[0], atol=1e-5)


def test_cohort_dfc_h5_every_kind(cohort):
    _, written, outputs = cohort
    assert {file_kind(p) for p in outputs["dfc"]} == {"dfc"}
    features = load_features(outputs["dfc"])
    ref = _reference(written["timeseries"][0], 0.5)
    np.testing.assert_allclose(features.X[0], np.concatenate([ref.mean[0], ref.std[0]]), atol=1e-5)
    pairs = load_features(outputs["pairs"])
    np.testing.assert_allclose(features.X, pairs.X, atol=1e-5)
    # Sparse windows: the unkept pairs read as 0; the kept ones as stored.
    sparse = read_pair_file(outputs["dfc-sparse"][0])
    series, _ = load_timeseries(written["timeseries"][0])
    dfc = connscale.dynamic_correlation(series, WINDOW, STEP, device="cpu")
    dense = np.stack([dfc[w] for w in range(len(dfc))], axis=1)
    kept = np.where(dense >= 0.2, dense, 0.0)
    np.testing.assert_allclose(sparse["mean"], kept.mean(axis=1), atol=1e-5)
    assert "fraction_above" in sparse
    with pytest.raises(ValueError, match="no column"):
        load_features(outputs["dfc"], statistics=("fraction_above",))


def test_cli_classify_on_cohort_pairs_and_dfc(cohort, tmp_path, monkeypatch):
    monkeypatch.setattr(cli_main, "_COMMANDS", ("classify",))
    _, written, outputs = cohort
    for job in ("pairs", "dfc"):
        out = tmp_path / job
        status = cli_main.main(
            [
                "classify",
                *outputs[job],
                "--participants",
                str(written["participants"]),
                "--label",
                "group",
                "--repeats",
                "1",
                "--folds",
                "3",
                "--seed",
                "0",
                "--out",
                str(out),
                "-q",
            ]
        )
        assert status == 0
        metrics = json.loads((out / "classify_metrics.json").read_text())
        assert metrics["n_subjects"] == 12 and metrics["n_features"] == 20


def test_h5_that_is_no_store(tmp_path):
    import h5py

    path = tmp_path / "sub-01_other.h5"
    with h5py.File(path, "w") as h5:
        h5["x"] = np.zeros(3)
    with pytest.raises(ValueError, match="no connscale connectivity store"):
        load_features([path])


def test_bids_app_outputs(tmp_path):
    from connscale.bidsapp.participant import run_participant
    from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

    root = make_fmriprep(
        tmp_path / "fmriprep", [("01", None, "rest", None), ("02", None, "rest", None)]
    )
    nib.save(atlas_img(), tmp_path / ATLAS)
    report = run_participant(
        root,
        tmp_path / "out",
        atlas=tmp_path / ATLAS,
        atlas_name="Slab4",
        strategy="simple",
        strategy_params={"motion": "basic"},
        measures=["fc", "timeseries", "dfc", "pairs", "voxelfc"],
        window_length=8,
        step=4,
        backend="serial",
        reports=False,
    )
    assert report.counts["ok"] == 2
    out = tmp_path / "out"

    def files(pattern):
        return sorted(out.glob(f"sub-*/func/*{pattern}"))

    relmat = load_features(files("_relmat.tsv"))
    assert relmat.region_labels == ["label-1", "label-2", "label-3", "label-4"]
    assert relmat.X.shape == (2, 6) and relmat.subjects == ["01", "02"]
    voxel = load_features(files("_relmat.h5"))
    assert voxel.X.shape[0] == 2 and voxel.X.shape[1] > 1000
    first = connscale.io.load_relmat(files("_relmat.h5")[0])[0]
    np.testing.assert_allclose(voxel.X[0], first)
    dfc = load_features(files("_dfc.h5"))
    pairs = load_features(files("_pairs.h5"))
    assert dfc.region_labels == pairs.region_labels == relmat.region_labels
    np.testing.assert_allclose(dfc.X, pairs.X, atol=1e-5)
    series, _ = load_timeseries(files("_timeseries.tsv")[1])
    ref = pair_summary(pairwise_dfc(series[None], 8, 4, device="cpu").courses, threshold=0.5)
    np.testing.assert_allclose(pairs.X[1], np.concatenate([ref.mean[0], ref.std[0]]), atol=1e-5)
