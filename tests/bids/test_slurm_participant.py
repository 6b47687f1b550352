"""``connscale bids ... participant --backend dask --cluster slurm``: the runs in SLURM jobs.

The option checks run without SLURM; the run uses the SLURM of
:mod:`tests.engines._slurm` (skipped, with the reason, where it cannot start).
"""

from __future__ import annotations

import re

import nibabel as nib
import numpy as np
import pytest

from connscale.bidsapp.participant import run_participant
from connscale.cli.main import main
from connscale.io.relmat import read_relmat_tsv
from connscale.io.timeseries import load_timeseries
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep
from tests.engines._slurm import slurm_fixture  # noqa: F401 (the fixture slurm)

RUNS = [("01", None, "rest", "1"), ("01", None, "rest", "2"), ("02", None, "rest", None)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"walltime": "02:00:00", "gpus_per_job": 1},
            "'walltime', 'gpus_per_job' apply to cluster='slurm' only; got cluster=None.",
        ),
        ({"cluster": "slurm"}, "cluster='slurm' needs backend='dask'; got backend='local'."),
        (
            {"cluster": "slurm", "backend": "dask", "gpus": "all"},
            "cluster='slurm' computes on the jobs' GPUs ('gpus_per_job'), not on this "
            "node's: drop 'gpus'; got gpus='all'.",
        ),
        (
            {"cluster": "slurm", "backend": "dask", "n_jobs": -1},
            "With cluster='slurm', 'n_jobs' is the most SLURM jobs at once "
            "(>= 1, or None: one per run left); got -1.",
        ),
    ],
)
def test_slurm_options_fail_in_one_line_before_any_write(tmp_path, options, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        run_participant(
            tmp_path / "fmriprep", tmp_path / "out", atlas=tmp_path / ATLAS, atlas_name="A",
            **options,
        )  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_the_command_names_its_flags(tmp_path, capsys):
    args = [str(tmp_path / "fmriprep"), str(tmp_path / "out"), "participant"]
    args += ["--atlas", str(tmp_path / ATLAS), "--atlas-name", "A", "--denoise", "simple"]
    args += ["--cores-per-job", "2"]
    (tmp_path / "fmriprep").mkdir()
    nib.save(atlas_img(), tmp_path / ATLAS)
    assert main(["bids", *args]) != 0
    err = capsys.readouterr().err
    assert "--cores-per-job" in err and "--cluster" in err
    assert not (tmp_path / "out").exists()


def _outputs(report) -> dict:
    """Return each output's values: matrices and series by file name."""
    values = {}
    for record in report.records:
        for path in record["outputs"]:
            name = path.rsplit("/", 1)[-1]
            if name.endswith("_relmat.tsv"):
                values[name] = read_relmat_tsv(path)[0]
            elif name.endswith("_timeseries.tsv"):
                values[name] = load_timeseries(path)[0]
    return values


@pytest.mark.cluster
def test_runs_in_slurm_jobs_give_the_serial_outputs(slurm, tmp_path):
    root = make_fmriprep(tmp_path / "fmriprep", RUNS)
    nib.save(atlas_img(), tmp_path / ATLAS)
    common = {
        "atlas": tmp_path / ATLAS,
        "atlas_name": "Slab4",
        "strategy": "simple",
        "strategy_params": {"motion": "basic"},
        "device": "cpu",
        "reports": False,
        "verbose": 0,
    }
    reference = run_participant(root, tmp_path / "serial", backend="serial", **common)
    report = run_participant(
        root, tmp_path / "out", backend="dask", cluster="slurm", n_jobs=2, walltime="00:10:00",
        **common,
    )  # fmt: skip
    assert report.counts == reference.counts == {"ok": len(RUNS), "skipped": 0, "error": 0}
    assert list((tmp_path / "out" / "logs").glob("*.err"))  # the jobs' logs beside the runs'
    got, expected = _outputs(report), _outputs(reference)
    assert got.keys() == expected.keys() and len(expected) == 2 * len(RUNS)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=2e-6, rtol=0)
