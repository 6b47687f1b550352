import json
import subprocess
import sys

import h5py
import nibabel as nib
import numpy as np
import pytest

from connscale import load_relmat
from connscale.cli.main import main
from connscale.io import read_relmat_tsv


@pytest.fixture
def fmri(tmp_path, rng):
    data = rng.standard_normal((5, 6, 4, 30)).astype(np.float32) + 100
    img = nib.Nifti1Image(data, np.diag([3.0, 3.0, 3.0, 1.0]))
    path = tmp_path / "sub-01_task-rest_bold.nii.gz"
    img.to_filename(path)
    mask = np.zeros((5, 6, 4), dtype=np.uint8)
    mask[1:4, 1:5, 1:3] = 1
    mask_path = tmp_path / "sub-01_mask.nii.gz"
    nib.Nifti1Image(mask, img.affine).to_filename(mask_path)
    atlas = np.zeros((5, 6, 4), dtype=np.int16)
    atlas[:2], atlas[2:4], atlas[4:] = 1, 2, 3
    atlas_path = tmp_path / "atlas.nii.gz"
    nib.Nifti1Image(atlas, img.affine).to_filename(atlas_path)
    return path, mask_path, atlas_path, data, mask.astype(bool)


def test_fc_nifti_mask_triu_end_to_end(tmp_path, fmri):
    path, mask_path, _, data, mask = fmri
    out = tmp_path / "out"
    assert (
        main(
            [
                "fc",
                str(path),
                "--mask",
                str(mask_path),
                "--kind",
                "triu",
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
    h5 = func / "sub-01_task-rest_meas-PearsonCorrelation_relmat.h5"
    stored, attrs = load_relmat(h5)
    series = data[mask].T
    expected = np.corrcoef(series.T)[np.triu_indices(mask.sum(), 1)]
    np.testing.assert_allclose(stored, expected, atol=2e-6)
    with h5py.File(h5, "r") as fh:
        assert fh.attrs["kind"] == "triu" and fh.attrs["N"] == mask.sum()
        assert "sub-01_task-rest_bold.nii.gz" in fh.attrs["source"]
    sidecar = json.loads(
        (func / "sub-01_task-rest_meas-PearsonCorrelation_relmat.json").read_text()
    )
    assert sidecar["NumberOfNodes"] == int(mask.sum())
    log = json.loads(
        (func / "sub-01_task-rest_meas-PearsonCorrelation_relmat_log.json").read_text()
    )
    assert log["parameters"]["kind"] == "triu" and "correlation" in log["timings_s"]
    assert log["device"] == "cpu"
    assert (out / "dataset_description.json").exists()


def test_fc_atlas_tsv(tmp_path, fmri):
    path, _, atlas_path, data, _ = fmri
    out = tmp_path / "out"
    assert (
        main(
            [
                "fc",
                str(path),
                "--atlas",
                str(atlas_path),
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    tsvs = list(out.glob("sub-01/func/*_seg-atlas_meas-PearsonCorrelation_relmat.tsv"))
    assert len(tsvs) == 1
    matrix, _ = read_relmat_tsv(tsvs[0])
    means = np.stack(
        [
            data[:2].reshape(-1, 30).mean(0),
            data[2:4].reshape(-1, 30).mean(0),
            data[4:].reshape(-1, 30).mean(0),
        ],
        axis=1,
    )
    np.testing.assert_allclose(
        matrix, np.corrcoef(means.T), atol=1e-4
    )  # float32 means at offset 100


def test_fc_sparse_from_tsv(tmp_path, rng):
    x = rng.standard_normal((40, 8))
    x[:, 1] = x[:, 0] + 0.1 * rng.standard_normal(40)
    src = tmp_path / "sub-02_timeseries.tsv"
    np.savetxt(src, x, delimiter="\t", header="\t".join(f"r{i}" for i in range(8)), comments="")
    out = tmp_path / "out"
    assert (
        main(
            [
                "fc",
                str(src),
                "--threshold",
                "0.5",
                "--absolute",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    stored, attrs = load_relmat(out / "sub-02/func/sub-02_meas-PearsonCorrelation_relmat.h5")
    assert attrs["kind"] == "sparse" and stored[0, 1] > 0.9


def test_fc_bad_input_clean_error(tmp_path, capsys, fmri):
    path, _, _, _, _ = fmri
    wrong = tmp_path / "wrong_mask.nii.gz"
    nib.Nifti1Image(np.ones((5, 6, 3), np.uint8), np.eye(4)).to_filename(wrong)
    assert (
        main(
            [
                "fc",
                str(path),
                "--mask",
                str(wrong),
                "--out",
                str(tmp_path / "o"),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 2
    )
    assert "does not match" in capsys.readouterr().err
    assert main(["fc", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "o"), "-q"]) == 2
    capsys.readouterr()
    assert main(["fc", str(path), "--mask", str(path), "--atlas", str(path), "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not allowed with argument" in err


def test_version_and_help():
    result = subprocess.run(
        [sys.executable, "-m", "connscale", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("connscale ")
    result = subprocess.run(
        [sys.executable, "-m", "connscale", "fc", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--memory-limit" in result.stdout and "--threshold" in result.stdout


def test_fc_precision_flag_is_logged(tmp_path, rng, monkeypatch):
    from connscale.fc import _exact

    x = rng.standard_normal((40, 8))
    src = tmp_path / "sub-03_timeseries.tsv"
    np.savetxt(src, x, delimiter="\t", header="\t".join(f"r{i}" for i in range(8)), comments="")
    argv = ["fc", str(src), "--threshold", "0.1", "--device", "cpu", "-q"]
    func = "sub-03/func/sub-03_meas-PearsonCorrelation_relmat"
    assert main([*argv, "--out", str(tmp_path / "a"), "--precision", "fp32"]) == 0
    log = json.loads((tmp_path / "a" / f"{func}_log.json").read_text())
    assert log["parameters"]["precision"] == "fp32"
    assert log["results"]["precision"] == "fp32" and log["results"]["confirmation"] is None
    monkeypatch.setattr(_exact, "FORCE_ON_CPU", True)  # the exact scheme's torch path
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    log = json.loads((tmp_path / "b" / f"{func}_log.json").read_text())
    confirmation = log["results"]["confirmation"]
    assert log["results"]["precision"] == "exact" and confirmation["n_entries"] == 28
    assert confirmation["n_tiles"] >= 1
    exact, _ = load_relmat(tmp_path / "b" / f"{func}.h5")
    fp32, _ = load_relmat(tmp_path / "a" / f"{func}.h5")
    np.testing.assert_allclose(exact.toarray(), fp32.toarray(), atol=2e-6)
    assert main([*argv, "--out", str(tmp_path / "c"), "--precision", "tf32"]) == 0
    log = json.loads((tmp_path / "c" / f"{func}_log.json").read_text())
    assert log["parameters"]["precision"] == "tf32"
    assert main([*argv, "--out", str(tmp_path / "d"), "--precision", "fp16"]) != 0
