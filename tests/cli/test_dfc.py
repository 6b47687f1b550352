"""``connscale dfc`` end to end on a small ROI table."""

import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

from connscale import dynamic_correlation, load_dynamic
from connscale.cli.main import main

N_TIMEPOINTS, N_REGIONS = 60, 7


@pytest.fixture
def roi_tsv(tmp_path):
    x = np.random.default_rng(0).standard_normal((N_TIMEPOINTS, N_REGIONS))
    path = tmp_path / "sub-01_task-rest_timeseries.tsv"
    header = "\t".join(f"roi{i}" for i in range(N_REGIONS))
    np.savetxt(path, x, delimiter="\t", header=header, comments="")
    return path, x


def test_dfc_command_end_to_end(tmp_path, roi_tsv, capsys):
    path, x = roi_tsv
    out = tmp_path / "out"
    argv = [
        "dfc",
        str(path),
        "--window",
        "15",
        "--step",
        "4",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--dtype",
        "float64",
        "-q",
    ]
    assert main(argv) == 0
    func = out / "sub-01" / "func"
    h5 = func / "sub-01_task-rest_meas-PearsonCorrelation_dfc.h5"
    assert h5.exists()
    assert "wrote" in capsys.readouterr().out
    reference = dynamic_correlation(x, 15, 4, device="cpu", dtype="float64")
    with load_dynamic(h5) as result:
        assert len(result) == len(reference) == (N_TIMEPOINTS - 15) // 4 + 1
        for i in range(len(result)):
            assert_allclose(result[i], reference[i], atol=1e-12)
    log = json.loads((func / "sub-01_task-rest_meas-PearsonCorrelation_dfc_log.json").read_text())
    assert log["command"] == "dfc"
    sidecar = json.loads(h5.with_suffix(".json").read_text())
    assert (sidecar["WindowLength"], sidecar["WindowStep"], sidecar["Kind"]) == (15, 4, "triu")
    assert log["results"]["n_windows"] == len(reference)
    assert log["results"]["n_series"] == N_REGIONS
    assert "dynamic_correlation" in log["timings_s"]
    assert len(log["figures"]) == 2
    for figure in log["figures"]:
        with open(figure, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    # A second run over the finished output reuses it.
    assert main(argv) == 0


def test_dfc_command_sparse_and_lowrank(tmp_path, roi_tsv):
    path, _x = roi_tsv
    out = tmp_path / "out"
    assert (
        main(
            [
                "dfc",
                str(path),
                "--window",
                "20",
                "--step",
                "5",
                "--threshold",
                "0.3",
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
    func = out / "sub-01" / "func"
    with load_dynamic(func / "sub-01_task-rest_meas-PearsonCorrelation_dfc.h5") as result:
        assert result.kind == "sparse" and result.parameters["absolute"] is True
        assert result.parameters["precision"] == "exact"
    log = json.loads((func / "sub-01_task-rest_meas-PearsonCorrelation_dfc_log.json").read_text())
    assert log["results"]["precision"] == "exact"
    assert log["results"]["confirmation"] is None  # the CPU computes 'exact' in fp32
    assert (
        main(
            [
                "dfc",
                str(path),
                "--window",
                "20",
                "--step",
                "5",
                "--kind",
                "lowrank",
                "--rank",
                "3",
                "--seed",
                "1",
                "--error",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
                "--overwrite",
            ]
        )
        == 0
    )  # same name, other parameters: replaced on request
    log = json.loads((func / "sub-01_task-rest_meas-PearsonCorrelation_dfc_log.json").read_text())
    assert log["results"]["kind"] == "lowrank"
    assert 0 < log["results"]["mae_mean"] < 1


def test_dfc_command_bad_window(tmp_path, roi_tsv, capsys):
    path, _ = roi_tsv
    code = main(
        [
            "dfc",
            str(path),
            "--window",
            "100",
            "--out",
            str(tmp_path / "o"),
            "--device",
            "cpu",
            "-q",
        ]
    )
    assert code == 2
    assert "--window must be at most the number of time points" in capsys.readouterr().err


def test_dfc_command_on_nifti_with_mask(tmp_path):
    nib = pytest.importorskip("nibabel")
    pytest.importorskip("nilearn")
    rng = np.random.default_rng(2)
    data = rng.standard_normal((4, 4, 3, 30)).astype(np.float32) + 100
    affine = np.diag([3.0, 3.0, 3.0, 1.0])
    image = tmp_path / "sub-02_bold.nii.gz"
    nib.save(nib.Nifti1Image(data, affine), image)
    mask = np.zeros((4, 4, 3), dtype=np.uint8)
    mask[1:3, 1:3, :] = 1
    mask_path = tmp_path / "mask.nii.gz"
    nib.save(nib.Nifti1Image(mask, affine), mask_path)
    out = tmp_path / "out"
    assert (
        main(
            [
                "dfc",
                str(image),
                "--mask",
                str(mask_path),
                "--window",
                "10",
                "--step",
                "5",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--dtype",
                "float64",
                "-q",
            ]
        )
        == 0
    )
    with load_dynamic(out / "sub-02/func/sub-02_meas-PearsonCorrelation_dfc.h5") as result:
        assert result.n_series == int(mask.sum())
        assert len(result) == (30 - 10) // 5 + 1
        series = data[mask.astype(bool)].T  # (T, voxels), nilearn's C order
        reference = np.corrcoef(series[5:15].T)
        assert_allclose(result.to_dense(1), reference, atol=1e-10)
