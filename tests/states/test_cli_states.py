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


# The references are built by teneto itself, whose pandas calls pandas 3 deprecates.
_TENETO_ON_PANDAS_3 = pytest.mark.filterwarnings("ignore::DeprecationWarning:teneto")


def _teneto_or_skip():
    """teneto, imported through the export (which makes it importable with
    nilearn >= 0.14); skips where it is not installed."""
    import importlib.util

    if importlib.util.find_spec("teneto") is None:
        pytest.skip("teneto is not installed")
    from connscale.fc.export import _import_teneto

    return _import_teneto()


def _reference_windows(x, result, threshold=None):
    """Every window's np.corrcoef, (N, N, n_windows), r < threshold set to 0."""
    w = result.window_length
    dense = np.stack([np.corrcoef(x[s : s + w].T) for s in result.window_starts], axis=2)
    if threshold is not None:
        assert np.abs(dense - threshold).min() > 1e-4  # no pair on the fence
        dense = np.where(dense >= threshold, dense, 0.0)
    return dense


@_TENETO_ON_PANDAS_3
def test_export_to_teneto_equals_teneto_from_the_dense_windows():
    teneto = _teneto_or_skip()
    from connscale.fc.export import to_teneto_network

    x = np.random.default_rng(0).standard_normal((60, 6))
    result = dynamic_correlation(x, 12, 4, device="cpu")
    network = to_teneto_network(result)
    reference = teneto.TemporalNetwork(from_array=_reference_windows(x, result), nettype="wu")
    assert isinstance(network, teneto.TemporalNetwork)
    assert (network.netshape, network.nettype, network.sparse) == (
        reference.netshape,
        reference.nettype,
        reference.sparse,
    )
    np.testing.assert_allclose(network.network, reference.network, atol=1e-6)
    np.testing.assert_allclose(
        network.calc_networkmeasure("temporal_degree_centrality", calc="pertime"),
        reference.calc_networkmeasure("temporal_degree_centrality", calc="pertime"),
        atol=1e-5,
    )


@_TENETO_ON_PANDAS_3
def test_sparse_export_is_teneto_edge_list_of_the_thresholded_windows():
    teneto = _teneto_or_skip()
    from connscale.fc.export import to_teneto_network

    x = np.random.default_rng(1).standard_normal((60, 6))
    result = dynamic_correlation(x, 12, 4, device="cpu", kind="sparse", threshold=0.4)
    network = to_teneto_network(result)
    reference = teneto.TemporalNetwork(
        from_array=_reference_windows(x, result, threshold=0.4), nettype="wu"
    )
    assert network.sparse and reference.sparse  # both edge lists
    assert len(network.network) == len(reference.network) > 0
    for column in ("i", "j", "t"):
        np.testing.assert_array_equal(network.network[column], reference.network[column])
    np.testing.assert_allclose(network.network["weight"], reference.network["weight"], atol=1e-6)


def test_teneto_export_time_and_labels_and_no_lasting_alias():
    import sys

    _teneto_or_skip()
    from connscale.fc.export import to_teneto_network

    x = np.random.default_rng(0).standard_normal((40, 3))
    result = dynamic_correlation(x, 10, 5, device="cpu")
    network = to_teneto_network(result, t_r=2.0, labels=["a", "b", "c"])
    assert network.timeunit == "10 s"  # one network time step is one window step
    assert network.timelabels == (2.0 * result.window_starts).tolist()
    assert network.nodelabels == ["a", "b", "c"]
    # the alias that let teneto import is gone again
    assert sys.modules.get("nilearn.input_data") is not sys.modules["nilearn.maskers"]
    with pytest.raises(ValueError, match="Expected 3 node labels; got 2"):
        to_teneto_network(result, labels=["a", "b"])


def test_an_installed_package_that_fails_to_import_is_named(tmp_path, monkeypatch):
    from connscale.fc.export import _require

    (tmp_path / "brokenpeer").mkdir()
    (tmp_path / "brokenpeer" / "__init__.py").write_text("import no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="installed but failed to import: No module named"):
        _require("brokenpeer", "to_peer")


def test_exports_say_what_is_missing(monkeypatch):
    import sys

    from connscale.fc.export import to_xarray

    monkeypatch.setitem(sys.modules, "xarray", None)
    result = dynamic_correlation(
        np.random.default_rng(0).standard_normal((20, 3)), 10, device="cpu"
    )
    with pytest.raises(ImportError, match="pip install xarray"):
        to_xarray(result)
