import json

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

from connscale.networks import r1dl


def _run(argv):
    # Only this sub-command's parser: others may not be on this branch.
    import argparse

    from connscale.cli import r1dl as cli

    parser = argparse.ArgumentParser(prog="connscale")
    sub = parser.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = parser.parse_args(argv)
    cli.check_arguments(args)  # as connscale.cli.main.main does
    return args.func(args)


def _file(out, subject, name):
    """``<out>/sub-<subject>/func/sub-<subject>_meas-R1DL_<name>``."""
    return out / f"sub-{subject}" / "func" / f"sub-{subject}_meas-R1DL_{name}"


def test_cli_npy(planted, tmp_path):
    S = planted[0]
    np.save(tmp_path / "S.npy", S)
    out = tmp_path / "out"
    rc = _run(
        [
            "r1dl",
            str(tmp_path / "S.npy"),
            "--n-components",
            "3",
            "--sparsity",
            "60",
            "--seed",
            "0",
            "--out",
            str(out),
            "--device",
            "cpu",
            "-q",
        ]
    )
    assert rc == 0
    loadings = sp.load_npz(_file(out, "S", "components.npz"))
    ref = r1dl(S, 3, 60, random_state=0, device="cpu")
    assert_allclose(loadings.toarray(), ref.loadings.toarray(), atol=1e-6)
    tc = np.loadtxt(_file(out, "S", "mixing.tsv"), skiprows=1, delimiter="\t")
    assert_allclose(tc, ref.dictionary, atol=1e-6)
    stats = json.loads((_file(out, "S", "iterations.json")).read_text())
    assert stats["n_iter"] == ref.n_iter.tolist() and stats["sparsity"] == 60
    assert (_file(out, "S", "iterations.tsv")).read_text().count("\n") == 4
    assert (_file(out, "S", "components.png")).stat().st_size > 1000
    log = json.loads((_file(out, "S", "components_log.json")).read_text())
    assert log["command"] == "r1dl" and "r1dl" in log["timings_s"]
    assert log["results"]["mean_iterations"] == pytest.approx(ref.mean_iterations)
    assert not list(out.rglob(".*.tmp"))


def test_cli_tsv_fraction(planted, tmp_path):
    S = planted[0][:, :200]
    header = "\t".join(f"v{i}" for i in range(S.shape[1]))
    np.savetxt(tmp_path / "S.tsv", S, delimiter="\t", header=header, comments="")
    out = tmp_path / "out"
    assert (
        _run(
            [
                "r1dl",
                str(tmp_path / "S.tsv"),
                "-k",
                "2",
                "-r",
                "0.1",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--dtype",
                "float64",
                "--seed",
                "1",
                "-q",
            ]
        )
        == 0
    )
    ref = r1dl(S, 2, 0.1, random_state=1, device="cpu", dtype="float64")
    assert_allclose(
        sp.load_npz(_file(out, "S", "components.npz")).toarray(), ref.loadings.toarray(), atol=1e-7
    )


def test_cli_nifti(planted, tmp_path):
    nib = pytest.importorskip("nibabel")
    pytest.importorskip("nilearn")
    S = planted[0][:, :150]
    shape = (7, 6, 5)
    mask = np.zeros(shape, dtype=bool)
    mask.flat[::1] = np.arange(mask.size) < 150
    data = np.zeros(shape + (S.shape[0],))
    data[mask] = S.T
    affine = np.diag([3.0, 3.0, 3.0, 1.0])
    nib.save(nib.Nifti1Image(data, affine), tmp_path / "bold.nii.gz")
    nib.save(nib.Nifti1Image(mask.astype(np.uint8), affine), tmp_path / "mask.nii.gz")
    out = tmp_path / "out"
    assert (
        _run(
            [
                "r1dl",
                str(tmp_path / "bold.nii.gz"),
                "--mask",
                str(tmp_path / "mask.nii.gz"),
                "--n-components",
                "2",
                "--sparsity",
                "15",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--dtype",
                "float64",
                "--seed",
                "0",
                "-q",
            ]
        )
        == 0
    )
    maps = nib.load(_file(out, "bold", "components.nii.gz"))
    assert maps.shape == shape + (2,)
    ref = r1dl(S, 2, 15, random_state=0, device="cpu", dtype="float64")
    assert_allclose(maps.get_fdata()[mask].T, ref.loadings.toarray(), atol=1e-6)
    assert _file(out, "bold", "components.png").exists()


def test_cli_errors(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="INPUT must be a 4-D NIfTI"):
        _run(
            [
                "r1dl",
                str(tmp_path / "x.json"),
                "-k",
                "2",
                "-r",
                "3",
                "--out",
                str(tmp_path / "o"),
                "-q",
            ]
        )
    np.save(tmp_path / "S.npy", np.ones((5, 5)))
    (tmp_path / "m.nii").touch()
    with pytest.raises(ValueError, match="--mask applies to NIfTI input only"):
        _run(
            [
                "r1dl",
                str(tmp_path / "S.npy"),
                "--mask",
                str(tmp_path / "m.nii"),
                "-k",
                "1",
                "-r",
                "2",
                "--out",
                str(tmp_path / "o"),
                "-q",
            ]
        )
    with pytest.raises(SystemExit):  # a missing INPUT is refused by the parser
        _run(
            [
                "r1dl",
                str(tmp_path / "nope.npy"),
                "-k",
                "1",
                "-r",
                "2",
                "--out",
                str(tmp_path / "o"),
                "-q",
            ]
        )
    with pytest.raises(SystemExit):
        _run(["r1dl", str(tmp_path / "S.npy"), "-k", "1", "-r", "x", "--out", "o"])


def test_cli_main_exit_code(tmp_path, capsys):
    from connscale.cli.main import main

    (tmp_path / "x.json").write_text("{}")
    rc = main(
        [
            "r1dl",
            str(tmp_path / "x.json"),
            "-k",
            "2",
            "-r",
            "3",
            "--out",
            str(tmp_path / "o"),
            "-q",
        ]
    )
    assert rc == 2
    assert "connscale r1dl: error: INPUT must be a 4-D NIfTI" in capsys.readouterr().err


def test_cli_rerun_skips_complete_output(planted, tmp_path):
    S = planted[0][:, :300]
    np.save(tmp_path / "S.npy", S)
    out = tmp_path / "out"
    argv = [
        "r1dl",
        str(tmp_path / "S.npy"),
        "-k",
        "2",
        "-r",
        "20",
        "--seed",
        "0",
        "--out",
        str(out),
        "--device",
        "cpu",
        "-q",
    ]
    assert _run(argv) == 0
    stamp = (_file(out, "S", "components.npz")).stat().st_mtime_ns
    assert _run(argv) == 0
    assert (_file(out, "S", "components.npz")).stat().st_mtime_ns == stamp  # not redone
    # Other parameters: never replaced silently; computed again on request.
    with pytest.raises(FileExistsError, match=r"other parameters \(seed: 0 -> 1\)"):
        _run([a if a != "0" else "1" for a in argv])  # --seed 1
    assert (_file(out, "S", "components.npz")).stat().st_mtime_ns == stamp
    assert _run([a if a != "0" else "1" for a in argv] + ["--overwrite"]) == 0
    assert (_file(out, "S", "components.npz")).stat().st_mtime_ns != stamp
