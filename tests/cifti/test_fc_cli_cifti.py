"""``connscale fc X.dtseries.nii`` / ``X.ptseries.nii``: names, sidecar, options, errors."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
from nibabel.cifti2 import BrainModelAxis, Cifti2Image, SeriesAxis

from connscale.cli.main import main

from .._workbench import CONTE69_PTSERIES, run_wb

N_TIMEPOINTS = 20


def _write_series(path, axis, seed=0):
    x = np.random.default_rng(seed).standard_normal((N_TIMEPOINTS, len(axis))).astype(np.float32)
    Cifti2Image(x, header=(SeriesAxis(0, 2.0, N_TIMEPOINTS, unit="SECOND"), axis)).to_filename(path)
    return x


@pytest.fixture
def dtseries(tmp_path):
    left = BrainModelAxis.from_surface(np.array([0, 2, 3, 5, 8]), 10, "CortexLeft")
    right = BrainModelAxis.from_surface(np.array([1, 4, 6]), 9, "CortexRight")
    path = tmp_path / "sub-01_ses-1_task-rest_space-fsLR_den-91k_bold.dtseries.nii"
    return path, _write_series(path, left + right)


def _fc(*arguments) -> int:
    return main(["fc", *map(str, arguments), "--device", "cpu", "-q"])


def test_dtseries_gives_xcpd_named_dconn_with_sidecar(tmp_path, dtseries):
    path, x = dtseries
    weights = tmp_path / "censor.txt"
    censor = np.ones(N_TIMEPOINTS)
    censor[[2, 9]] = 0
    np.savetxt(weights, censor)
    assert _fc(path, "--out", tmp_path / "out", "--fisher-z", "--weights", weights) == 0
    folder = tmp_path / "out" / "sub-01" / "ses-1" / "func"
    stem = "sub-01_ses-1_task-rest_space-fsLR_den-91k_stat-fisherz_boldmap"
    image = nib.load(folder / f"{stem}.dconn.nii")
    expected = np.arctanh(np.clip(np.corrcoef(x[censor > 0].T), -0.999999, 0.999999))
    np.testing.assert_allclose(np.asarray(image.dataobj), expected, atol=2e-6)
    sidecar = json.loads((folder / f"{stem}.json").read_text())
    assert sidecar["Measure"] == "Fisher z (artanh) of Pearson correlation"
    assert sidecar["WorkbenchEquivalent"].endswith(f"-fisher-z -weights {weights}")
    log = json.loads((folder / f"{stem}_log.json").read_text())
    assert log["results"]["n_rows"] == 8 and log["results"]["nodes"] == "grayordinates"


def test_plain_name_roi_rows_and_relmat(tmp_path, dtseries):
    path, x = dtseries
    plain = tmp_path / "run1.dtseries.nii"
    path.rename(plain)
    assert _fc(plain, "--out", tmp_path / "out", "--roi-structures", "CORTEX_RIGHT") == 0
    matrix = np.asarray(nib.load(tmp_path / "out" / "run1.dconn.nii").dataobj).T
    np.testing.assert_allclose(matrix, np.corrcoef(x.T)[5:], atol=2e-6)
    assert _fc(plain, "--out", tmp_path / "h5", "--kind", "triu") == 0
    assert (tmp_path / "h5" / "run1.h5").is_file()


def test_ptseries_gives_pconn_equal_to_workbench(tmp_path):
    parcels = nib.load(CONTE69_PTSERIES).header.get_axis(1)
    path = tmp_path / "sub-02_task-rest_space-fsLR_seg-VGD11b_stat-mean_timeseries.ptseries.nii"
    _write_series(path, parcels, seed=1)
    assert _fc(path, "--out", tmp_path / "out", "--covariance") == 0
    name = "sub-02_task-rest_space-fsLR_seg-VGD11b_stat-covariance_boldmap.pconn.nii"
    ours = tmp_path / "out" / "sub-02" / "func" / name
    run_wb("-cifti-correlation", path, tmp_path / "wb.pconn.nii", "-covariance")
    np.testing.assert_allclose(
        np.asarray(nib.load(ours).dataobj),
        np.asarray(nib.load(tmp_path / "wb.pconn.nii").dataobj),
        rtol=1e-6,
        atol=1e-6,
    )


def test_cifti_options_with_other_input_are_refused(tmp_path, capsys):
    table = tmp_path / "sub-01_timeseries.tsv"
    np.savetxt(table, np.random.default_rng(0).standard_normal((20, 3)), delimiter="\t")
    assert (
        main(["fc", str(table), "--out", str(tmp_path / "out"), "--fisher-z", "--no-demean"]) == 2
    )
    message = capsys.readouterr().err
    assert "--fisher-z, --no-demean apply to CIFTI-2 input (.dtseries.nii, .ptseries.nii) only" in (
        message
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("a.dconn.nii", [], "or a CIFTI-2 series (.dtseries.nii, .ptseries.nii); got a.dconn.nii"),
        ("a.dtseries.nii", ["--roi-structures", "X", "--roi-cifti", "{roi}"], "not both"),
        ("a.dtseries.nii", ["--atlas", "{roi}"], "--mask and --atlas apply to NIfTI input only"),
    ],
)
def test_bad_cifti_command_lines(tmp_path, capsys, name, arguments, message):
    path = tmp_path / name
    path.write_bytes(b"")
    roi = tmp_path / "roi.dscalar.nii"
    roi.write_bytes(b"")
    arguments = [a.format(roi=roi) for a in arguments]
    assert main(["fc", str(path), "--out", str(tmp_path / "out"), *arguments]) == 2
    assert message in capsys.readouterr().err
