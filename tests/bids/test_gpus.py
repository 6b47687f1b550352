"""--gpus: the plan of one worker per GPU, and the clear CPU fallback without a GPU."""

from contextlib import contextmanager

import nibabel as nib
import pytest

from connscale.bidsapp import gpus
from connscale.cli.main import main
from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep, participant_log


@pytest.mark.parametrize("value, expected", [("all", "all"), ("2", 2), (3, 3), (None, None)])
def test_parse_gpus(value, expected):
    assert gpus.parse_gpus(value) == expected


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_parse_gpus_refuses(value):
    with pytest.raises(ValueError, match="'all' or a positive count"):
        gpus.parse_gpus(value)


def test_plan_one_worker_per_gpu():
    node = ["0", "1", "2", "3"]
    assert gpus.plan_gpu_workers("all", node) == [{"CUDA_VISIBLE_DEVICES": g} for g in node]
    assert gpus.plan_gpu_workers(2, node) == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    assert gpus.plan_gpu_workers("all", []) == []
    with pytest.raises(ValueError, match="more GPUs than this node has"):
        gpus.plan_gpu_workers(5, node)


def test_available_gpus_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setattr(gpus, "_cuda_count", lambda: 2)
    assert gpus.available_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert gpus.available_gpus({"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}) == ["GPU-aa", "GPU-bb"]
    assert gpus.available_gpus({"CUDA_VISIBLE_DEVICES": "4,-1,6"}) == ["4"]
    assert gpus.available_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert gpus.available_gpus({}) == ["0", "1"]
    monkeypatch.setattr(gpus, "_cuda_count", lambda: 0)
    assert gpus.available_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == []


def test_worker_spec_pins_one_gpu_per_nanny():
    from distributed import Nanny

    spec = gpus.worker_spec(gpus.plan_gpu_workers("all", ["2", "7"]))
    assert list(spec) == ["gpu-2", "gpu-7"]
    for name, gpu in (("gpu-2", "2"), ("gpu-7", "7")):
        assert spec[name]["cls"] is Nanny
        assert spec[name]["options"]["env"] == {"CUDA_VISIBLE_DEVICES": gpu}
        assert spec[name]["options"]["nthreads"] == gpus.THREADS_PER_GPU_WORKER


def test_cli_gpus_without_gpu_falls_back_to_cpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpus, "_cuda_count", lambda: 0)
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    out = tmp_path / "out"

    def bids(*extra):
        return main(
            ["bids", str(root), str(out), "participant", "--atlas", str(tmp_path / ATLAS)]
            + ["--atlas-name", "Slab4", "--denoise", "none", "--gpus", "all", "-q", *extra]
        )

    assert bids("--backend", "serial", "--no-reports") == 0
    captured = capsys.readouterr()
    assert "--gpus all: no GPU on this node" in captured.err
    assert "running on the CPU with the serial backend" in captured.err
    report, _ = participant_log(out)
    assert report["counts"]["ok"] == 1 and report["device"] == "cpu"
    assert report["gpu_workers"] == [] and "no GPU" in report["notes"][0]
    assert bids("--backend", "spark") == 2
    assert "cannot pin GPUs to Spark" in capsys.readouterr().err


@pytest.mark.parametrize("n_jobs, threads", [(None, gpus.THREADS_PER_GPU_WORKER), (3, 3)])
def test_n_jobs_is_the_threads_of_each_gpu_worker(tmp_path, monkeypatch, n_jobs, threads):
    from connscale.bidsapp.participant import run_participant

    class Started(Exception):
        pass

    seen = {}

    @contextmanager
    def fake_cluster(environments, *, threads):
        seen.update(environments=environments, threads=threads)
        raise Started
        yield

    monkeypatch.setattr(gpus, "_cuda_count", lambda: 2)
    monkeypatch.setattr(gpus, "gpu_cluster", fake_cluster)
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    with pytest.raises(Started):
        run_participant(
            root,
            tmp_path / "out",
            atlas=tmp_path / ATLAS,
            atlas_name="Slab4",
            gpus="all",
            n_jobs=n_jobs,
        )
    assert seen == {
        "environments": [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}],
        "threads": threads,
    }
