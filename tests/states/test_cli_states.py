"""connscale dfc-states end to end, and the DFC exports."""

import json

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from connscale import dynamic_correlation
from connscale.cli.main import main
from connscale.datasets import simulate_states
from connscale.io.relmat import read_relmat_tsv

pytest.importorskip("matplotlib")


def test_dfc_states_command(tmp_path):
    cohort = simulate_states(4, 8, 300, random_state=0)
    inputs = []
    for subject, series in zip(cohort.subjects, cohort.timeseries):
        path = tmp_path / f"sub-{subject}_timeseries.npy"
        np.save(path, series)
        inputs.append(str(path))
    out = tmp_path / "out"
    status = main(
        [
            "dfc-states",
            *inputs,
            "--window",
            "40s",
            "--step",
            "4s",
            "--t-r",
            "2",
            "--states",
            "3",
            "--metric",
            "correlation",
            "--seed",
            "0",
            "--device",
            "cpu",
            "--out",
            str(out),
            "-q",
        ]
    )
    assert status == 0
    for j in (1, 2, 3):
        matrix, labels = read_relmat_tsv(
            out / f"dfcstates_state-0{j}_meas-PearsonCorrelation_relmat.tsv"
        )
        assert matrix.shape == (8, 8) and len(labels) == 8
        meta = json.loads(
            (out / f"dfcstates_state-0{j}_meas-PearsonCorrelation_relmat.json").read_text()
        )
        assert meta["State"] == j and meta["NumberOfNodes"] == 8
    found, truth = [], []
    for subject, true in zip(cohort.subjects, cohort.window_states(20, 2)):
        table = np.genfromtxt(out / f"sub-{subject}_dfcstates.tsv", names=True, delimiter="\t")
        assert np.allclose(table["onset_s"], 2 * table["onset"])
        found.append(table["state"].astype(int))
        truth.append(true)
    pure = np.concatenate(cohort.pure_windows(20, 2))
    assert adjusted_rand_score(np.concatenate(truth)[pure], np.concatenate(found)[pure]) >= 0.95
    features = (out / "dfcstates_features.tsv").read_text().splitlines()
    assert features[0].split("\t")[:2] == ["subject", "fraction_time_state-1"]
    assert len(features) == 5
    log = json.loads((out / "dfcstates_log.json").read_text())
    assert log["results"]["n_subjects"] == 4 and len(log["figures"]) == 3
    assert (out / "report.html").read_text().count("data:image/png") == 3


def test_dfc_states_from_dfc_files(tmp_path):
    cohort = simulate_states(3, 6, 200, random_state=1)
    inputs = []
    for subject, series in zip(cohort.subjects, cohort.timeseries):
        path = tmp_path / f"sub-{subject}_dfc.h5"
        dynamic_correlation(series, 20, 2, device="cpu", out=path).close()
        inputs.append(str(path))
    status = main(
        [
            "dfc-states",
            *inputs,
            "--states",
            "3",
            "--metric",
            "euclidean",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out"),
            "-q",
        ]
    )
    assert status == 0
    assert (tmp_path / "out" / "sub-01_dfcstates.tsv").exists()


def test_dfc_states_needs_a_window_for_series(tmp_path, capsys):
    path = tmp_path / "sub-01_timeseries.npy"
    np.save(path, np.random.default_rng(0).standard_normal((50, 4)))
    assert main(["dfc-states", str(path), "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "--window is needed" in capsys.readouterr().err


def test_export_to_xarray():
    xr = pytest.importorskip("xarray")
    from connscale.fc.export import to_xarray

    x = np.random.default_rng(0).standard_normal((40, 5))
    result = dynamic_correlation(x, 10, 5, device="cpu")
    array = to_xarray(result, t_r=2.0)
    assert isinstance(array, xr.DataArray)
    assert array.dims == ("window", "node_i", "node_j")
    np.testing.assert_allclose(array.isel(window=2).values, result.to_dense(2))
    np.testing.assert_array_equal(array["onset_s"].values, 2.0 * result.window_starts)


def test_export_to_teneto():
    pytest.importorskip("teneto")
    from connscale.fc.export import to_teneto_network

    x = np.random.default_rng(0).standard_normal((40, 5))
    result = dynamic_correlation(x, 10, 5, device="cpu")
    network = to_teneto_network(result)
    assert network.netshape == (5, len(result))


def test_exports_say_what_is_missing(monkeypatch):
    import sys

    from connscale.fc.export import to_xarray

    monkeypatch.setitem(sys.modules, "xarray", None)
    result = dynamic_correlation(
        np.random.default_rng(0).standard_normal((20, 3)), 10, device="cpu"
    )
    with pytest.raises(ImportError, match="pip install xarray"):
        to_xarray(result)
