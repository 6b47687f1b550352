"""connscale pairs and connscale cohort from the command line."""

from __future__ import annotations

import csv
import json

import h5py
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from connscale.cli.main import main
from connscale.fc.pairs import pair_summary, pairwise_dfc
from connscale.io.timeseries import save_timeseries


@pytest.fixture
def roi_files(tmp_path):
    rng = np.random.default_rng(11)
    labels = ["DMN", "SMN", "VIS", "SAL"]
    a = tmp_path / "sub-01_task-rest_timeseries.tsv"
    save_timeseries(a, rng.standard_normal((30, 4)), labels)
    b = tmp_path / "sub-02_task-rest_timeseries.npy"
    np.save(b, rng.standard_normal((24, 4)))
    return a, b


def _read_tsv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_pairs_cli_h5(roi_files, tmp_path, capsys):
    a, b = roi_files
    out = tmp_path / "out"
    assert (
        main(
            [
                "pairs",
                str(a),
                str(b),
                "--window",
                "8",
                "--step",
                "3",
                "--threshold",
                "0.1",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    assert "2 scan(s) (2 computed), 6 pairs" in capsys.readouterr().out
    x = np.loadtxt(a, skiprows=1)
    expected = pairwise_dfc(x[None], 8, 3, device="cpu")
    one = out / "sub-01" / "func" / "sub-01_task-rest_meas-PearsonCorrelation_pairs"
    two = out / "sub-02" / "func" / "sub-02_task-rest_meas-PearsonCorrelation_pairs"
    with h5py.File(f"{one}.h5") as h5:
        assert_allclose(h5["courses"][()], expected.courses[0], atol=1e-6)
        assert_array_equal(h5["pairs"][()], expected.pairs)
        assert_array_equal(h5["window_onsets"][()], expected.window_starts)
        assert list(h5["labels"].asstr()[()]) == ["DMN", "SMN", "VIS", "SAL"]
    with h5py.File(f"{two}.h5") as h5:
        assert h5["courses"].shape == (6, (24 - 8) // 3 + 1)  # scans of different lengths
    rows = _read_tsv(f"{one}.tsv")
    summary = pair_summary(expected.courses, threshold=0.1)
    assert (rows[0]["label_i"], rows[0]["label_j"]) == ("DMN", "SMN")
    assert_allclose([float(r["mean"]) for r in rows], summary.mean[0], atol=1e-6)
    assert_allclose([float(r["fraction_above_0.1"]) for r in rows], summary.fraction_above[0])
    sidecar = json.loads(open(f"{one}.json").read())
    assert (sidecar["WindowLength"], sidecar["WindowStep"], sidecar["Threshold"]) == (8, 3, 0.1)
    assert sidecar["NumberOfWindows"] == 8 and sidecar["NodeNames"] == ["DMN", "SMN", "VIS", "SAL"]
    group = out / "task-rest_meas-PearsonCorrelation_features"
    features = _read_tsv(f"{group}.tsv")
    assert [f["scan"] for f in features] == ["sub-01_task-rest", "sub-02_task-rest"]
    assert len(features[0]) == 1 + 3 * 6
    assert json.loads(open(f"{group}.json").read())["Threshold"] == 0.1
    log = json.loads(open(f"{group}_log.json").read())
    assert log["results"]["n_pairs"] == 6 and log["results"]["n_windows"] == [8, 6]
    assert (out / "dataset_description.json").is_file()


def test_pairs_cli_npy(roi_files, tmp_path):
    a, _ = roi_files
    out = tmp_path / "out"
    assert (
        main(
            [
                "pairs",
                str(a),
                "--window",
                "10",
                "--format",
                "npy",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    func = out / "sub-01" / "func"
    courses = np.load(func / "sub-01_task-rest_meas-PearsonCorrelation_pairs.npy")
    assert courses.shape == (6, 21)
    pairs = _read_tsv(func / "sub-01_task-rest_meas-PearsonCorrelation_pairs.tsv")
    assert [(int(p["i"]), int(p["j"])) for p in pairs][:3] == [(0, 1), (0, 2), (0, 3)]
    windows = _read_tsv(func / "sub-01_task-rest_meas-PearsonCorrelation_windows.tsv")
    assert (windows[-1]["onset"], windows[-1]["end"]) == ("20", "30")
    columns = json.loads(
        (func / "sub-01_task-rest_meas-PearsonCorrelation_windows.json").read_text()
    )
    assert columns["onset"]["Units"] == "volumes"


def test_pairs_cli_errors(roi_files, tmp_path, capsys):
    a, _ = roi_files
    assert (
        main(["pairs", str(a), "--window", "99", "--out", str(tmp_path / "o"), "--device", "cpu"])
        == 2
    )
    assert "at most the number of time points" in capsys.readouterr().err
    other = tmp_path / "three.npy"
    np.save(other, np.zeros((30, 3)) + np.arange(30)[:, None] * [1, 2, -1])
    assert (
        main(
            [
                "pairs",
                str(a),
                str(other),
                "--window",
                "5",
                "--out",
                str(tmp_path / "o"),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    assert "same number of regions" in capsys.readouterr().err


def test_cohort_cli(tmp_path, capsys):
    rng = np.random.default_rng(5)
    for sub in ("01", "02"):
        path = tmp_path / "deriv" / f"sub-{sub}" / "func" / f"sub-{sub}_task-rest_timeseries.tsv"
        path.parent.mkdir(parents=True)
        save_timeseries(path, rng.standard_normal((20, 3)), ["a", "b", "c"])
    broken = tmp_path / "deriv" / "sub-03" / "func" / "sub-03_task-rest_timeseries.tsv"
    broken.parent.mkdir(parents=True)
    broken.write_text("a\tb\n")
    out = tmp_path / "out"
    args = [
        "cohort",
        str(tmp_path / "deriv"),
        "--job",
        "pairs",
        "--window",
        "6",
        "--backend",
        "serial",
        "--out",
        str(out),
        "-q",
    ]
    assert main(args) == 1  # one scan failed
    printed = capsys.readouterr().out
    assert "2 done, 0 already complete, 1 failed" in printed
    assert (out / "sub-01" / "func" / "sub-01_task-rest_meas-PearsonCorrelation_pairs.h5").exists()
    assert "sub-03" in (out / "cohort_errors.tsv").read_text()
    log = json.loads((out / "cohort_log.json").read_text())
    assert log["results"]["ok"] == 2 and log["results"]["error"] == 1
    broken.unlink()
    assert main(args) == 0
    assert "0 done, 2 already complete, 0 failed" in capsys.readouterr().out
    assert (
        main(
            [
                "cohort",
                str(tmp_path / "deriv"),
                "--job",
                "fc",
                "--backend",
                "serial",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    assert (out / "sub-02" / "func" / "sub-02_task-rest_meas-PearsonCorrelation_relmat.h5").exists()
    assert (
        main(
            [
                "cohort",
                str(tmp_path / "deriv"),
                "--job",
                "dfc",
                "--window",
                "8",
                "--step",
                "4",
                "--backend",
                "serial",
                "--out",
                str(out),
                "-q",
            ]
        )
        == 0
    )
    assert (out / "sub-01" / "func" / "sub-01_task-rest_meas-PearsonCorrelation_dfc.h5").exists()


def test_cohort_cli_errors(tmp_path, capsys):
    assert (
        main(
            [
                "cohort",
                str(tmp_path),
                "--job",
                "pairs",
                "--out",
                str(tmp_path / "o"),
                "--backend",
                "serial",
            ]
        )
        == 2
    )
    assert "--job pairs needs --window" in capsys.readouterr().err
    assert (
        main(
            [
                "cohort",
                str(tmp_path),
                "--job",
                "fc",
                "--threshold",
                "0.3",
                "--out",
                str(tmp_path / "o"),
                "--backend",
                "serial",
            ]
        )
        == 2
    )
    assert "--threshold applies to --job pairs and dfc" in capsys.readouterr().err
    assert (
        main(
            [
                "cohort",
                str(tmp_path / "nothing"),
                "--job",
                "fc",
                "--out",
                str(tmp_path / "o"),
                "--backend",
                "serial",
            ]
        )
        == 2
    )
    assert "No input file" in capsys.readouterr().err
