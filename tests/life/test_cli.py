"""``connscale life`` end to end on a small phantom."""

import json

import numpy as np
import pytest

from connscale.cli.main import main
from connscale.datasets.phantom import simulate_life_phantom
from tests.bids._pybids import assert_pybids_reads

nib = pytest.importorskip("nibabel")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("life_cli")
    ph = simulate_life_phantom(n_true=60, n_false=60, shape=(10, 10, 10), random_state=1)
    nib.save(nib.Nifti1Image(ph.dwi, ph.affine), d / "sub-01_dwi.nii.gz")
    nib.save(nib.Nifti1Image(ph.dwi_repeat, ph.affine), d / "sub-01_run-2_dwi.nii.gz")
    np.savetxt(d / "sub-01_dwi.bval", ph.bvals[None])
    np.savetxt(d / "sub-01_dwi.bvec", ph.bvecs.T)
    tract = nib.streamlines.Tractogram(list(ph.streamlines), affine_to_rasmm=np.eye(4))
    nib.streamlines.save(tract, str(d / "tracks.tck"))
    labels = np.zeros((10, 10, 10), np.int16)
    labels[:3], labels[7:], labels[3:7, :5], labels[3:7, 5:] = 1, 2, 3, 4
    nib.save(nib.Nifti1Image(labels, ph.affine), d / "labels.nii.gz")
    return d, ph


def _args(d, *extra):
    return [
        "life",
        str(d / "sub-01_dwi.nii.gz"),
        "--bvals",
        str(d / "sub-01_dwi.bval"),
        "--bvecs",
        str(d / "sub-01_dwi.bvec"),
        "--tractogram",
        str(d / "tracks.tck"),
        "--device",
        "cpu",
        "-q",
        *extra,
    ]


def test_cli_single_lambda(inputs, capsys):
    d, ph = inputs
    out = d / "out1"
    rc = main(
        _args(
            d,
            "--lambda",
            "0.02",
            "--labels",
            str(d / "labels.nii.gz"),
            "--measure",
            "count",
            "--repeat",
            str(d / "sub-01_run-2_dwi.nii.gz"),
            "--out",
            str(out),
        )
    )
    assert rc == 0
    assert "connscale life:" in capsys.readouterr().out
    w = np.load(out / "sub-01_desc-life_weights.npy")
    assert w.shape == (120,)
    pruned = nib.streamlines.load(str(out / "sub-01_desc-pruned_tractogram.tck"))
    assert len(pruned.streamlines) == int((w > 0).sum())
    rmse = nib.load(str(out / "sub-01_desc-life_rmse.nii.gz"))
    assert rmse.shape == (10, 10, 10) and np.allclose(rmse.affine, ph.affine)
    log = json.loads((out / "sub-01_life_log.json").read_text())
    res = log["results"]
    assert res["lambda"] == 0.02 and res["n_nonzero"] == int((w > 0).sum())
    assert len(res["objective_history"]) == res["n_iter"]  # the start + one per update
    assert res["objective_history"][-1] <= res["objective_history"][0]
    assert 0 < res["cv_rmse_median"]
    assert {"load", "build", "solve", "write"} <= set(log["timings_s"])
    assert len(log["figures"]) == 2 and all(
        (out / p.split("/")[-1]).exists() for p in log["figures"]
    )
    counts = np.loadtxt(out / "sub-01_meas-LiFEStreamlineCount_relmat.tsv", skiprows=1)
    assert counts.shape == (4, 4) and np.allclose(counts, counts.T)
    assert_pybids_reads(out)


def test_cli_lambda_sweep(inputs):
    d, _ = inputs
    out = d / "out2"
    rc = main(
        _args(
            d,
            "--lambda-sweep",
            "0,0.05,0.3",
            "--max-iter",
            "100",
            "--memory-limit",
            "4MB",
            "--out",
            str(out),
        )
    )
    assert rc == 0
    table = np.loadtxt(out / "sub-01_desc-lambdasweep_table.tsv", skiprows=1)
    assert table.shape == (3, 7)
    assert table[0, 2] > table[2, 2]  # non-zero count falls with λ
    log = json.loads((out / "sub-01_life_log.json").read_text())
    assert log["results"]["lambda_selected"] in (0.0, 0.05, 0.3)
    assert any(p.endswith("lambdasweep_plot.png") for p in log["figures"])


def test_cli_bad_input_exit_code(inputs, capsys, tmp_path):
    d, _ = inputs
    rc = main(_args(d, "--max-iter", "0", "--out", str(tmp_path / "o")))
    assert rc == 2
    assert "argument --max-iter: expected a whole number >= 1; got '0'" in capsys.readouterr().err
    bad = tmp_path / "bad.tck"
    bad.write_bytes(b"mrtrix tracks\nbroken")
    rc = main(
        [
            "life",
            str(d / "sub-01_dwi.nii.gz"),
            "--bvals",
            str(d / "sub-01_dwi.bval"),
            "--bvecs",
            str(d / "sub-01_dwi.bvec"),
            "--tractogram",
            str(bad),
            "--out",
            str(tmp_path / "o"),
            "--device",
            "cpu",
            "-q",
        ]
    )
    assert rc == 2
    assert "Could not read tractogram" in capsys.readouterr().err
