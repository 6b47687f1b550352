"""--gpus: the plan of one worker per GPU, and the clear CPU fallback without a GPU."""

from contextlib import contextmanager
from pathlib import Path

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


@pytest.mark.parametrize(
    "cores, workers, readers",
    [(16, 1, 15), (16, 2, 7), (16, 4, 3), (64, 4, 15), (5, 4, 1), (2, 4, 1)],
)
def test_plan_readers_shares_the_cores_left_among_the_gpu_workers(cores, workers, readers):
    plan = gpus.plan_readers(workers, cores=cores)
    assert (plan.workers, plan.cores, plan.readers) == (workers, cores, readers)
    assert plan.threads == readers + 1  # a run per reader, and the one computing
    assert plan.processes == (readers > 1)  # one reader is a thread, as on the serial path
    assert gpus.plan_readers(workers, readers=5, cores=cores).readers == 5  # n_jobs


def test_worker_device_is_cuda_unless_the_cpu_is_asked_for():
    assert [gpus.worker_device(d) for d in ("auto", "cuda", "cuda:1", "cpu", "CPU")] == [
        "cuda",
        "cuda",
        "cuda",
        "cpu",
        "cpu",
    ]


@pytest.mark.parametrize("n_jobs, readers", [(None, 3), (5, 5)])
def test_n_jobs_is_the_readers_of_each_gpu_worker(tmp_path, monkeypatch, n_jobs, readers):
    # Behaviour changed by issue 23: n_jobs was the threads of each GPU worker;
    # it is now its readers (default: the host's cores shared out), threads = readers + 1.
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
    monkeypatch.setattr(gpus, "host_cores", lambda: 8)  # (8 - 2 GPUs) // 2 = 3 readers each
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
        "threads": readers + 1,
    }


def test_the_report_records_the_readers_of_each_gpu_worker(tmp_path, monkeypatch):
    from connscale.engines.base import SerialEngine

    seen = {}

    @contextmanager
    def fake_engine(environments, *, readers, preload):
        seen.update(environments=environments, readers=readers, preload=preload)
        with SerialEngine() as engine:
            yield engine

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    monkeypatch.setattr(gpus, "_cuda_count", lambda: 4)
    monkeypatch.setattr(gpus, "host_cores", lambda: 16)
    monkeypatch.setattr(gpus, "gpu_engine", fake_engine)
    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    out = tmp_path / "out"
    argv = ["bids", str(root), str(out), "participant", "--atlas", str(tmp_path / ATLAS)]
    argv += ["--atlas-name", "Slab4", "--denoise", "none", "--no-reports", "--gpus", "3"]
    assert main([*argv, "--device", "cpu", "-q"]) == 0
    assert seen["environments"] == [{"CUDA_VISIBLE_DEVICES": g} for g in ("3", "5", "6")]
    assert seen["readers"] == gpus.ReaderPlan(workers=3, cores=16, readers=4)
    assert "connscale.bidsapp.cleaning" in seen["preload"]
    report, _ = participant_log(out)
    assert report["counts"]["ok"] == 1 and report["device"] == "cpu"
    assert report["gpu_readers"] == {
        "gpu_workers": 3,
        "cores": 16,
        "readers_per_worker": 4,
        "readers_are": "processes",
        "runs_in_flight_per_worker": 5,
    }


def _outputs(out):
    """Every published table of a participant call (its numbers; a header row each), by name."""
    import pandas as pd

    tables = {p.name: pd.read_csv(p, sep="\t") for p in sorted(out.rglob("sub-*/func/*.tsv"))}
    return {name: table.select_dtypes("number").to_numpy(float) for name, table in tables.items()}


@pytest.mark.cluster
def test_gpu_workers_with_reader_processes_publish_what_the_serial_path_does(tmp_path, monkeypatch):
    # Two stand-in GPUs computing on the CPU, each worker with two reader processes,
    # which also draw its runs' reports.
    import numpy as np

    from connscale.bidsapp.participant import run_participant

    monkeypatch.setattr(gpus, "_cuda_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    runs = [("01", None, "rest", None), ("02", None, "rest", None), ("03", None, "rest", "1")]
    root = make_fmriprep(tmp_path / "fmriprep", runs)
    nib.save(atlas_img(), tmp_path / ATLAS)
    common = dict(atlas=tmp_path / ATLAS, atlas_name="Slab4", strategy="none", reports=True)
    common.update(measures=["fc", "timeseries"], device="cpu", n_jobs=2, verbose=0)
    serial = run_participant(root, tmp_path / "serial", backend="serial", **common)
    on_gpus = run_participant(root, tmp_path / "gpus", gpus="all", **common)
    assert serial.counts["ok"] == on_gpus.counts["ok"] == 3
    report, _ = participant_log(tmp_path / "gpus")
    assert report["engine"].endswith("readers=2 processes per worker)")
    assert report["gpu_workers"] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    assert report["gpu_readers"]["readers_per_worker"] == 2
    for result in (serial, on_gpus):
        pages = [p for r in result.records for p in r["outputs"] if p.endswith("_report.html")]
        assert len(pages) == 3
        assert all(Path(page).read_text().count("data:image/png") == 4 for page in pages)
    expected, got = _outputs(tmp_path / "serial"), _outputs(tmp_path / "gpus")
    assert sorted(got) == sorted(expected) and len(got) == 12  # relmat, series, QC, coverage
    for name, values in expected.items():
        np.testing.assert_allclose(got[name], values, rtol=0, atol=1e-6, err_msg=name)


def test_the_memory_limit_is_shared_among_the_gpu_workers_and_their_readers(tmp_path, monkeypatch):
    # The call's limit split over 3 workers; each worker reads ahead only the runs
    # that fit in half its share, and at least one.
    from connscale.engines.base import SerialEngine

    seen = {}

    @contextmanager
    def fake_engine(environments, *, readers, preload):
        seen.update(readers=readers)
        with SerialEngine() as engine:
            yield engine

    monkeypatch.setattr(gpus, "_cuda_count", lambda: 3)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpus, "host_cores", lambda: 16)
    monkeypatch.setattr(gpus, "gpu_engine", fake_engine)
    subjects = [(f"0{i}", None, "rest", None) for i in range(1, 7)]
    root = make_fmriprep(tmp_path / "fmriprep", subjects)
    nib.save(atlas_img(), tmp_path / ATLAS)
    argv = ["bids", str(root), "", "participant", "--atlas", str(tmp_path / ATLAS)]
    argv += ["--atlas-name", "Slab4", "--denoise", "none", "--measures", "voxelfc", "--gpus", "all"]
    argv += ["--device", "cpu", "-q"]
    for limit, expected in ((12_000_000, None), (170_000, 1)):
        out = tmp_path / f"out{limit}"
        argv[2] = str(out)
        assert main([*argv, "--memory-limit", str(limit)]) == 0
        memory = participant_log(out)[0]["memory"]
        run_bytes = memory["largest_run_bytes"]
        if expected is None:  # 2 MB per worker, runs of about 0.1 MB: the 4 readers fit
            assert (limit // 3 // 2) // run_bytes >= 4
            expected = 4
        assert seen["readers"] == gpus.ReaderPlan(workers=3, cores=16, readers=expected)
        assert memory["readers"] == expected
        assert memory["run_limit"] == limit // 3 - expected * run_bytes


@pytest.mark.cluster
def test_gpu_workers_get_dasks_environment_without_its_malloc_trim_threshold():
    # Dask's nannies set MALLOC_TRIM_THRESHOLD_ in their workers (and in this
    # process): every array over 128 kB then faults its pages in one by one.
    import os

    names = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    before = {name: os.environ.pop(name, None) for name in names}
    try:
        with gpus.gpu_cluster([{"CUDA_VISIBLE_DEVICES": ""}], threads=1) as client:
            trim = client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_")
            omp = client.run(os.environ.get, "OMP_NUM_THREADS")
        assert list(trim.values()) == [None] and "MALLOC_TRIM_THRESHOLD_" not in os.environ
        assert list(omp.values()) == ["1"]  # the rest of Dask's settings kept
    finally:
        for name, value in before.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
