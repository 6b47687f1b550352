"""Writes that cannot lie: full disks, kill -9, two runs into one output, changed
or foreign files and planted links, for fc, dfc, pairs and cohort.

Runs that inject a fault run in a subprocess (``python -c`` wrapping
``connscale.cli.main``): a kill -9 is a real SIGKILL sent by the process to
itself at a point chosen by a seeded RNG (the Nth flush, window or block),
and a "running" writer is one paused at a known point until the test
releases it, so nothing here depends on timing. A small full disk is a
tmpfs when the tests run as root and ``mount`` works, otherwise a per-file
size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored, so writes fail with EFBIG);
``CONNSCALE_FAULTS_NO_TMPFS=1`` forces the latter.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from connscale.cli.main import main

pytestmark = pytest.mark.faults

SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
    "OMP_NUM_THREADS": "1",
}

_BOOT = textwrap.dedent("""
    import os, signal, sys
    {patch}
    from connscale.cli.main import main
    sys.exit(main({argv!r}))
""")

# Patch target.attribute so that its nth call kills the process (SIGKILL).
_KILL = textwrap.dedent("""
    def _install_kill(module, owner, name, n):
        import importlib
        target = importlib.import_module(module)
        for part in owner:
            target = getattr(target, part)
        original = getattr(target, name)
        calls = [0]
        def patched(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(*args, **kwargs)
        setattr(target, name, patched)
    _install_kill({module!r}, {owner!r}, {name!r}, {n})
""")

# Patch target.attribute so that its first call says "paused" and waits for
# a line on stdin before going on.
_PAUSE = textwrap.dedent("""
    def _install_pause(module, owner, name):
        import importlib
        target = importlib.import_module(module)
        for part in owner:
            target = getattr(target, part)
        original = getattr(target, name)
        paused = [False]
        def patched(*args, **kwargs):
            if not paused[0]:
                paused[0] = True
                print("paused", flush=True)
                sys.stdin.readline()
            return original(*args, **kwargs)
        setattr(target, name, patched)
    _install_pause({module!r}, {owner!r}, {name!r})
""")


def _target(spec: str) -> dict:
    """'pkg.module:Class.method' -> the format fields of _KILL / _PAUSE."""
    module, attribute = spec.split(":")
    *owner, name = attribute.split(".")
    return {"module": module, "owner": owner, "name": name}


def run_cli(argv, *, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "connscale", *map(str, argv)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
        check=False,
    )


def run_killed(argv, spec: str, n: int) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess that kills itself at the nth call of ``spec``."""
    code = _BOOT.format(patch=_KILL.format(n=n, **_target(spec)), argv=list(map(str, argv)))
    return subprocess.run(
        [sys.executable, "-c", code],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def start_paused(argv, spec: str) -> subprocess.Popen:
    """Start the CLI in a subprocess paused at the first call of ``spec``."""
    code = _BOOT.format(patch=_PAUSE.format(**_target(spec)), argv=list(map(str, argv)))
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if line.strip() != "paused":
        proc.kill()
        raise AssertionError(f"the writer did not start: {line!r} {proc.stderr.read()}")
    return proc


def start_waiting(argv) -> subprocess.Popen:
    """Start the CLI with ``--wait`` in a subprocess (it waits for a run holding the lock)."""
    return subprocess.Popen(
        [sys.executable, "-m", "connscale", *map(str, argv), "--wait"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate("go\n", timeout=120)
    return proc.returncode, out, err


def one_line_error(result, command: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"connscale {command}: error: "), lines[0]
    return lines[0]


def h5_contents(path) -> tuple[dict, dict]:
    data = {}
    with h5py.File(path, "r") as h5:
        h5.visititems(
            lambda name, obj: (
                data.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
        return data, dict(h5.attrs)


def assert_same_h5(path, reference, *, atol: float) -> None:
    """Same datasets (floats to ``atol``: GEMM batches may differ on resume)
    and the same attributes."""
    data, attrs = h5_contents(path)
    expected, expected_attrs = h5_contents(reference)
    assert sorted(data) == sorted(expected)
    for name, values in expected.items():
        if np.issubdtype(np.asarray(values).dtype, np.floating):
            assert_allclose(data[name], values, atol=atol, rtol=0, equal_nan=True, err_msg=name)
        else:
            assert_array_equal(data[name], values, err_msg=name)
    assert sorted(attrs) == sorted(expected_attrs)
    for key, value in expected_attrs.items():
        assert_array_equal(attrs[key], value, err_msg=key)


def hidden_leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(".*"))


class SmallDisk:
    """A folder on a nearly full disk: an 8 MiB tmpfs, else a 4 MiB file-size limit."""

    SIZE = 8 * 2**20
    LIMIT = 4 * 2**20

    def __init__(self, path: Path) -> None:
        path.mkdir()
        self.path = path
        self.mounted = False
        if (
            os.geteuid() == 0
            and shutil.which("mount")
            and not os.environ.get("CONNSCALE_FAULTS_NO_TMPFS")
        ):
            result = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.SIZE}", "tmpfs", str(path)],
                capture_output=True,
                check=False,
            )
            self.mounted = result.returncode == 0
        self.limited = not self.mounted

    def preexec(self):
        """For subprocess: writes beyond the limit fail with EFBIG (tmpfs: none)."""
        if not self.limited:
            return None

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.LIMIT, self.LIMIT))

        return limit

    def grow(self) -> None:
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,size=256m", str(self.path)], check=True)
        self.limited = False

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    disk = SmallDisk(tmp_path / "disk")
    yield disk
    disk.close()


def series(path: Path, n_timepoints: int, n_series: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n_timepoints, n_series))
    np.save(path, x)
    return x


def no_segfault(result) -> None:
    assert result.returncode not in (-signal.SIGSEGV, 128 + signal.SIGSEGV, 139), result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr[-2000:]


# --------------------------------------------------------------------------
# Full disk
# --------------------------------------------------------------------------


def test_full_disk_dfc_stops_cleanly_and_resumes(tmp_path, small_disk, caplog):
    x = series(tmp_path / "sub-01_timeseries.npy", 60, 300)
    out = small_disk.path / "out"
    # sparse, keeping every pair: 51 windows of ~360 kB, more than the disk holds
    argv = [
        "dfc",
        tmp_path / "sub-01_timeseries.npy",
        "--window",
        "10",
        "--step",
        "1",
        "--threshold",
        "-1",
        "--out",
        out,
        "--device",
        "cpu",
        "-q",
    ]
    failed = run_cli(argv, preexec=small_disk.preexec())
    no_segfault(failed)
    message = one_line_error(failed, "dfc")
    assert ".partial" in message and ("No space left" in message or "too large" in message)
    name, func = "sub-01_meas-PearsonCorrelation_dfc.h5", out / "sub-01" / "func"
    assert not (func / name).exists()
    assert not (func / "sub-01_meas-PearsonCorrelation_dfc_manifest.json").exists()
    assert (func / ".sub-01_meas-PearsonCorrelation_dfc.staging" / f".{name}.partial").is_file()

    small_disk.grow()
    assert main([str(a) for a in argv[:-1]]) == 0  # INFO log on
    resumed = re.search(r"Resuming .*partial: (\d+) of 51 windows already done", caplog.text)
    assert resumed and 0 < int(resumed.group(1)) < 51, caplog.text
    from connscale import dynamic_correlation, load_dynamic

    reference = dynamic_correlation(x, 10, 1, kind="sparse", threshold=-1.0, device="cpu")
    with load_dynamic(func / name) as result:
        assert len(result) == len(reference) == 51
        for i in range(len(result)):
            assert_allclose(result.to_dense(i), reference.to_dense(i), atol=1e-6)
    assert hidden_leftovers(out) == []


def test_full_disk_fc_stops_cleanly_then_completes(tmp_path, small_disk):
    x = series(tmp_path / "sub-01_timeseries.npy", 30, 1500)
    out = small_disk.path / "out"
    # sparse |r| >= 0 ... every pair kept: ~9 MB, more than the disk holds
    argv = [
        "fc",
        tmp_path / "sub-01_timeseries.npy",
        "--threshold",
        "-1",
        "--out",
        out,
        "--device",
        "cpu",
        "-q",
    ]
    failed = run_cli(argv, preexec=small_disk.preexec())
    no_segfault(failed)
    one_line_error(failed, "fc")
    assert not list(out.rglob("*relmat*"))

    small_disk.grow()
    assert main([str(a) for a in argv]) == 0
    from connscale import correlation
    from connscale.io import load_relmat
    from connscale.io.publish import read_manifest

    func = out / "sub-01" / "func"
    stored, attrs = load_relmat(func / "sub-01_meas-PearsonCorrelation_relmat.h5")
    expected = correlation(x, kind="sparse", threshold=-1.0, device="cpu")
    assert attrs["complete"] and stored.nnz == expected.nnz
    assert_allclose(stored.toarray(), expected.toarray(), atol=1e-6)
    read_manifest(func, "sub-01_meas-PearsonCorrelation_relmat", verify="full")
    assert hidden_leftovers(out) == []  # the killed run's staging folder and temporary


def test_full_disk_pairs(tmp_path, small_disk):
    series(tmp_path / "sub-01_timeseries.npy", 400, 100)
    out = small_disk.path / "out"
    argv = [
        "pairs",
        tmp_path / "sub-01_timeseries.npy",
        "--window",
        "10",
        "--out",
        out,
        "--device",
        "cpu",
        "-q",
    ]  # courses: 4950 pairs x 391 windows, 7.7 MB
    failed = run_cli(argv, preexec=small_disk.preexec())
    no_segfault(failed)
    message = one_line_error(failed, "pairs")
    if small_disk.mounted:  # the size is known: refused before anything is computed
        assert "not enough free space" in message and "needed" in message
    func, stem = out / "sub-01" / "func", "sub-01_meas-PearsonCorrelation_pairs"
    assert not (func / f"{stem}.h5").exists() and not (func / f"{stem}_manifest.json").exists()
    small_disk.grow()
    assert main([str(a) for a in argv]) == 0
    from connscale.io.publish import read_manifest

    manifest = read_manifest(func, stem, verify="full")
    assert f"{stem}.h5" in manifest["files"]
    read_manifest(out, "meas-PearsonCorrelation_features", verify="full")


def test_free_space_is_checked_up_front(tmp_path, monkeypatch):
    import shutil as shutil_module

    from connscale import correlation, dynamic_correlation
    from connscale.io.atomic import InsufficientSpaceError

    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(
        "connscale.io.atomic.shutil.disk_usage", lambda path: usage._replace(free=1000)
    )
    x = np.random.default_rng(0).standard_normal((30, 50))
    for call, path in (
        (lambda p: dynamic_correlation(x, 10, out=p, device="cpu"), tmp_path / "dfc.h5"),
        (lambda p: correlation(x, kind="triu", out=p, device="cpu"), tmp_path / "fc.h5"),
    ):
        with pytest.raises(InsufficientSpaceError, match=r"needed, 1000 B available") as info:
            call(path)
        assert str(tmp_path) in str(info.value)
        assert list(tmp_path.iterdir()) == []  # nothing written, nothing left


def test_full_disk_cohort(tmp_path, small_disk):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    data = {
        f"0{seed}": series(inputs / f"sub-0{seed}_timeseries.npy", 60, 300, seed=seed)
        for seed in (1, 2)
    }
    out = small_disk.path / "out"
    # 51 windows of 44,850 pairs: 9 MB per scan, more than the disk holds
    argv = [
        "cohort",
        inputs,
        "--job",
        "dfc",
        "--window",
        "10",
        "--backend",
        "serial",
        "--out",
        out,
        "-q",
    ]
    failed = run_cli(argv, preexec=small_disk.preexec())
    no_segfault(failed)
    assert failed.returncode == 1, failed.stderr[-2000:]  # scans failed, the cohort did not
    assert "Traceback" not in failed.stderr
    errors = (out / "cohort_errors.tsv").read_text().splitlines()
    assert len(errors) == 3 and all("space" in e or "too large" in e for e in errors[1:])
    from connscale import dynamic_correlation

    def check(path, x):
        """A file under an output's name holds every window, right."""
        reference = dynamic_correlation(x, 10, device="cpu")
        with h5py.File(path, "r") as h5:
            assert h5["done"][...].all()
            assert_allclose(h5["triu"][...], np.stack(list(reference)), atol=1e-6)

    for sub, x in data.items():
        path = out / f"sub-{sub}" / "func" / f"sub-{sub}_meas-PearsonCorrelation_dfc.h5"
        if path.exists():
            check(path, x)
    small_disk.grow()
    assert main([str(a) for a in argv]) == 0
    report = json.loads((out / "cohort_report.json").read_text())
    assert [r["status"] for r in report["records"]] == ["ok", "ok"]
    for sub, x in data.items():
        check(out / f"sub-{sub}" / "func" / f"sub-{sub}_meas-PearsonCorrelation_dfc.h5", x)


# --------------------------------------------------------------------------
# kill -9 at a random point, then resume
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0])
def test_killed_dfc_resumes_to_the_uninterrupted_result(tmp_path, seed):
    series(tmp_path / "sub-01_timeseries.npy", 80, 250)
    argv = [
        "dfc",
        tmp_path / "sub-01_timeseries.npy",
        "--window",
        "10",
        "--step",
        "2",
        "--device",
        "cpu",
        "--dtype",
        "float64",
        "-q",
    ]
    n_windows = 36
    # flush_h5 runs once at creation, then twice per window (data, done flag):
    # killing at its nth call stops before a flush, between data and flag,
    # or between windows.
    kill_at = int(np.random.default_rng(seed).integers(2, 2 * n_windows))
    killed = run_killed([*argv, "--out", tmp_path / "out"], "connscale.io.dfc:flush_h5", kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    name = "sub-01/func/sub-01_meas-PearsonCorrelation_dfc.h5"
    assert not (tmp_path / "out" / name).exists()
    staging = tmp_path / "out" / "sub-01/func/.sub-01_meas-PearsonCorrelation_dfc.staging"
    assert (staging / ".sub-01_meas-PearsonCorrelation_dfc.h5.partial").exists()
    assert main([*map(str, argv), "--out", str(tmp_path / "out")]) == 0
    assert main([*map(str, argv), "--out", str(tmp_path / "ref")]) == 0
    assert_same_h5(tmp_path / "out" / name, tmp_path / "ref" / name, atol=1e-12)
    assert hidden_leftovers(tmp_path / "out") == []


def test_killed_fc_leaves_nothing_and_reruns_to_the_same_result(tmp_path):
    series(tmp_path / "sub-01_timeseries.npy", 30, 1100)
    argv = [
        "fc",
        tmp_path / "sub-01_timeseries.npy",
        "--kind",
        "triu",
        "--memory-limit",
        "2MB",
        "--device",
        "cpu",
        "-q",
    ]
    # Killed while writing its blocks: at the nth block, or before the
    # store is flagged complete when it has fewer.
    kill_at = int(np.random.default_rng(1).integers(1, 4))
    code = _KILL.format(
        n=kill_at, **_target("connscale.io.hdf5:RelmatWriter.write_triu")
    ) + _KILL.format(n=1, **_target("connscale.io.hdf5:RelmatWriter.close"))
    out = tmp_path / "out"
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            _BOOT.format(patch=code, argv=[*map(str, argv), "--out", str(out)]),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # killed mid-write
    assert list(out.glob("sub-01/func/.sub-01_meas-PearsonCorrelation_relmat.staging/.*.tmp"))
    assert not list(out.rglob("*relmat.h5"))
    assert main([*map(str, argv), "--out", str(out)]) == 0
    assert hidden_leftovers(out) == []
    assert main([*map(str, argv), "--out", str(tmp_path / "ref")]) == 0
    name = "sub-01/func/sub-01_meas-PearsonCorrelation_relmat.h5"
    assert_same_h5(out / name, tmp_path / "ref" / name, atol=1e-6)


def test_killed_cohort_resumes_to_the_uninterrupted_result(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for seed in (1, 2, 3):
        series(inputs / f"sub-0{seed}_timeseries.npy", 40, 220, seed=seed)
    argv = [
        "cohort",
        inputs,
        "--job",
        "dfc",
        "--window",
        "8",
        "--step",
        "4",
        "--backend",
        "serial",
        "--dtype",
        "float64",
        "-q",
    ]
    windows = 9 * 3  # per scan (40 - 8) // 4 + 1
    kill_at = int(np.random.default_rng(2).integers(2, windows))
    killed = run_killed(
        [*argv, "--out", tmp_path / "out"], "connscale.io.dfc:HDF5Backend.write", kill_at
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert main([*map(str, argv), "--out", str(tmp_path / "out")]) == 0
    assert main([*map(str, argv), "--out", str(tmp_path / "ref")]) == 0
    for sub in ("01", "02", "03"):
        name = f"sub-{sub}/func/sub-{sub}_meas-PearsonCorrelation_dfc.h5"
        assert_same_h5(tmp_path / "out" / name, tmp_path / "ref" / name, atol=1e-12)
    assert not [p for p in hidden_leftovers(tmp_path / "out") if p.suffix != ".lock"]


# --------------------------------------------------------------------------
# Two runs into one output
# --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["dfc", "fc"])
def test_second_run_into_the_same_output_fails_naming_the_first(tmp_path, command):
    path = tmp_path / "sub-01_timeseries.npy"
    if command == "dfc":
        series(path, 60, 250)
        argv = [
            "dfc",
            path,
            "--window",
            "10",
            "--step",
            "5",
            "--device",
            "cpu",
            "-q",
            "--out",
            tmp_path / "out",
        ]
        spec = "connscale.io.dfc:HDF5Backend.write"
    else:
        series(path, 30, 1100)
        argv = ["fc", path, "--kind", "triu", "--device", "cpu", "-q", "--out", tmp_path / "out"]
        spec = "connscale.io.hdf5:RelmatWriter.write_triu"
    first = start_paused(argv, spec)
    try:
        second = run_cli(argv)
        message = one_line_error(second, command)
        assert f"pid {first.pid}" in message and "--wait" in message
        waiting = start_waiting(argv)
    finally:
        code, _, err = finish(first)
    assert code == 0, err[-2000:]
    _, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err[-2000:]
    from connscale.io.publish import read_manifest

    prefix = "sub-01_meas-PearsonCorrelation_" + ("dfc" if command == "dfc" else "relmat")
    func = tmp_path / "out" / "sub-01" / "func"
    manifest = read_manifest(func, prefix, verify="full")
    log = json.loads((func / f"{prefix}_log.json").read_text())
    assert sorted(Path(p).name for p in log["outputs"]) == sorted(
        n for n in manifest["files"] if n.endswith((".h5", ".json")) and "_log" not in n
    )
    assert hidden_leftovers(tmp_path / "out") == []


def test_second_cohort_run_fails_and_sweeps_only_free_temporaries(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for seed in (1, 2):
        series(inputs / f"sub-0{seed}_timeseries.npy", 30, 5, seed=seed)
    argv = [
        "cohort",
        inputs,
        "--job",
        "pairs",
        "--window",
        "6",
        "--backend",
        "serial",
        "-q",
        "--out",
        tmp_path / "out",
    ]
    first = start_paused(argv, "connscale.cohort:_job_pairs")
    try:
        message = one_line_error(run_cli(argv), "cohort")
        assert f"pid {first.pid}" in message
    finally:
        code, _, err = finish(first)
    assert code == 0, err[-2000:]

    from connscale.cohort import _remove_stale_temporaries
    from connscale.io.lock import OutputLock

    output = tmp_path / "out" / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_pairs.h5"
    in_flight = output.with_name(f".{output.name}.abc123.tmp")
    in_flight.write_bytes(b"being written")
    with OutputLock(output):  # a live writer of this output
        assert _remove_stale_temporaries(output) == 0
        assert in_flight.exists()
    assert _remove_stale_temporaries(output) == 1
    assert not in_flight.exists()


# --------------------------------------------------------------------------
# Changed input, foreign files, unfinished files, planted links
# --------------------------------------------------------------------------


def test_cohort_recomputes_a_scan_whose_input_changed(tmp_path):
    from connscale.cohort import run_cohort

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    paths = [inputs / f"sub-0{i}_timeseries.npy" for i in (1, 2)]
    for seed, path in enumerate(paths):
        series(path, 30, 5, seed=seed)
    params = {"window_length": 6, "step": 2}
    first = run_cohort(inputs, "pairs", tmp_path / "out", params=params, engine="serial", verbose=0)
    assert first.n_ok == 2
    # Same size and modification time, other data.
    info = os.stat(paths[1])
    new = series(paths[1], 30, 5, seed=9)
    os.utime(paths[1], ns=(info.st_atime_ns, info.st_mtime_ns))
    again = run_cohort(inputs, "pairs", tmp_path / "out", params=params, engine="serial", verbose=0)
    assert [r["status"] for r in again.records] == ["skipped", "ok"]
    from connscale.fc.pairs import pairwise_dfc

    data, _ = h5_contents(
        tmp_path / "out" / "sub-02" / "func" / "sub-02_meas-PearsonCorrelation_pairs.h5"
    )
    assert_allclose(
        data["courses"], pairwise_dfc(new[None], 6, 2, device="cpu").courses[0], atol=1e-6
    )


def test_cohort_reports_a_foreign_file_and_replaces_it_only_when_asked(tmp_path):
    from connscale.cohort import _job_key, check_job_params, run_cohort

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    series(inputs / "sub-01_timeseries.npy", 30, 5)
    params = {"window_length": 6}
    out = tmp_path / "out"
    (out / "sub-01" / "func").mkdir(parents=True)
    foreign = out / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_pairs.h5"
    with h5py.File(foreign, "w") as h5:  # carries the job key, nothing else of a result
        h5.attrs["cohort_job"] = _job_key("pairs", check_job_params("pairs", params))
        h5.attrs["complete"] = True
    before = foreign.read_bytes()
    report = run_cohort(inputs, "pairs", out, params=params, engine="serial", verbose=0)
    [record] = report.records
    assert record["status"] == "error" and "not written by connscale" in record["error"]
    assert foreign.read_bytes() == before
    replaced = run_cohort(
        inputs, "pairs", out, params=params, engine="serial", overwrite=True, verbose=0
    )
    assert replaced.n_ok == 1
    assert "courses" in h5_contents(foreign)[0]


def test_fc_refuses_a_foreign_file_at_its_output_name(tmp_path, capsys):
    series(tmp_path / "sub-01_timeseries.npy", 30, 6)
    out = tmp_path / "out"
    (out / "sub-01" / "func").mkdir(parents=True)
    foreign = out / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_relmat.tsv"
    foreign.write_text("somebody else's matrix\n")
    assert main(["fc", str(tmp_path / "sub-01_timeseries.npy"), "--out", str(out), "-q"]) == 2
    assert "is not part of a connscale" in capsys.readouterr().err
    assert foreign.read_text() == "somebody else's matrix\n"


def test_load_dynamic_refuses_unfinished_windows(tmp_path, monkeypatch):
    from connscale import dynamic_correlation, load_dynamic
    from connscale.io.dfc import HDF5Backend, partial_path
    from connscale.io.publish import IncompleteOutputError

    x = np.random.default_rng(0).standard_normal((40, 6))
    path = tmp_path / "dfc.h5"
    original = HDF5Backend.write
    calls = []

    def interrupted(self, index, *args):
        if len(calls) == 3:
            raise KeyboardInterrupt("stopped")
        calls.append(index)
        return original(self, index, *args)

    monkeypatch.setattr(HDF5Backend, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dynamic_correlation(x, 10, 3, out=path, device="cpu")
    os.replace(partial_path(path), path)  # as a buggy or foreign publisher would
    with pytest.raises(IncompleteOutputError, match="3 of 11 windows"):
        load_dynamic(path)


def test_planted_links_are_refused_and_nothing_is_written_outside(tmp_path, capsys):
    from connscale import dynamic_correlation
    from connscale.cohort import run_cohort
    from connscale.io.dfc import partial_path

    outside = tmp_path / "outside"
    outside.mkdir()
    x = series(tmp_path / "sub-01_timeseries.npy", 30, 6)
    out = tmp_path / "out"
    out.mkdir()
    # the library's predictable partial file, dangling and pointing outside
    target = out / "sub-01.h5"
    os.symlink(outside / "victim.h5", partial_path(target))
    with pytest.raises(PermissionError, match="symbolic link"):
        dynamic_correlation(x, 10, out=target, device="cpu")
    # the CLI's staging folder
    (out / "sub-01" / "func").mkdir(parents=True)
    os.symlink(outside, out / "sub-01" / "func" / ".sub-01_meas-PearsonCorrelation_dfc.staging")
    assert (
        main(
            [
                "dfc",
                str(tmp_path / "sub-01_timeseries.npy"),
                "--window",
                "10",
                "--out",
                str(out),
                "--device",
                "cpu",
                "-q",
            ]
        )
        == 2
    )
    assert "symbolic link" in capsys.readouterr().err
    # the cohort's partial file beside a scan's output
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    shutil.copy(tmp_path / "sub-01_timeseries.npy", inputs)
    cohort_out = tmp_path / "cohort"
    (cohort_out / "sub-01" / "func").mkdir(parents=True)
    os.symlink(
        outside / "victim2.h5",
        partial_path(cohort_out / "sub-01" / "func" / "sub-01_meas-PearsonCorrelation_dfc.h5"),
    )
    report = run_cohort(
        inputs, "dfc", cohort_out, params={"window_length": 10}, engine="serial", verbose=0
    )
    assert report.records[0]["status"] == "error"
    assert "symbolic link" in report.records[0]["error"]
    assert list(outside.iterdir()) == []
