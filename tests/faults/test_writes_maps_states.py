"""``connscale maps`` and ``connscale dfc-states`` publish one locked,
manifested set, as the other commands do: a kill -9 while the files are
written, a full disk and a second run into the same output (the harness of
:mod:`tests.faults.test_writes`)."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest

from connscale.cli.main import main
from connscale.io.publish import read_manifest
from tests.faults.test_writes import (
    SmallDisk,
    finish,
    hidden_leftovers,
    no_segfault,
    one_line_error,
    run_cli,
    run_killed,
    start_paused,
    start_waiting,
)

nib = pytest.importorskip("nibabel")
pytest.importorskip("nilearn")
pytest.importorskip("matplotlib")

pytestmark = pytest.mark.faults

SOURCE = "sub-01_task-rest"
MAPS = f"{SOURCE}_maps"


def scan(path, shape=(10, 10, 8), n_volumes=40, seed=0):
    """A 4-D NIfTI of random series (2 mm voxels)."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((*shape, n_volumes)).astype(np.float32) + 100
    nib.Nifti1Image(data, np.diag([2.0, 2.0, 2.0, 1.0])).to_filename(path)
    return path


def visible_maps(out) -> list[str]:
    return sorted(p.name for p in out.glob("*_boldmap*"))


def maps_argv(bold, out, *maps):
    return ["maps", bold, *maps, "--out", out, "--device", "cpu", "-q"]


def states_argv(inputs, out):
    return [
        "dfc-states",
        *inputs,
        "--window",
        "10",
        "--step",
        "2",
        "--states",
        "2",
        "--n-init",
        "2",
        "--out",
        out,
        "--device",
        "cpu",
        "-q",
    ]


def state_inputs(folder, n_subjects=3):
    folder.mkdir()
    paths = []
    for seed in range(n_subjects):
        path = folder / f"sub-0{seed + 1}_timeseries.npy"
        np.save(path, np.random.default_rng(seed).standard_normal((40, 5)))
        paths.append(path)
    return paths


# --------------------------------------------------------------------------
# kill -9 while the files are written
# --------------------------------------------------------------------------


def test_killed_maps_leave_no_map_then_rerun_completes(tmp_path):
    bold = scan(tmp_path / f"{SOURCE}_bold.nii.gz")
    out = tmp_path / "out"
    argv = maps_argv(bold, out, "--gcor", "--ecm", "--degree", "0.2")
    # killed as the second map is written: the first is already on disk
    killed = run_killed(argv, "connscale.io.maps:write_map", 2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert visible_maps(out) == []
    assert not (out / f"{MAPS}_manifest.json").exists()
    assert main(list(map(str, argv))) == 0
    manifest = read_manifest(out, MAPS, verify="full")
    assert len([n for n in manifest["files"] if n.endswith("_boldmap.nii.gz")]) == 3
    assert hidden_leftovers(out) == []


def test_killed_maps_keep_the_previous_complete_set(tmp_path):
    bold = scan(tmp_path / f"{SOURCE}_bold.nii.gz")
    out = tmp_path / "out"
    assert main(list(map(str, maps_argv(bold, out, "--gcor")))) == 0
    before = read_manifest(out, MAPS, verify="full")
    argv = [*maps_argv(bold, out, "--gcor", "--ecm"), "--overwrite"]
    killed = run_killed(argv, "connscale.io.maps:write_map", 2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert read_manifest(out, MAPS, verify="full") == before
    assert not any("stat-ecm" in name for name in visible_maps(out))
    # other parameters replace the set only with --overwrite; the old set's
    # files that the new one does not hold go with it
    assert main(list(map(str, maps_argv(bold, out, "--ecm")))) == 2
    assert main(list(map(str, [*maps_argv(bold, out, "--ecm"), "--overwrite"]))) == 0
    files = read_manifest(out, MAPS, verify="full")["files"]
    assert any("stat-ecm" in n for n in files) and not any("stat-gcor" in n for n in files)
    assert not any("stat-gcor" in name for name in visible_maps(out))


def test_killed_dfc_states_leave_no_state_then_rerun_completes(tmp_path):
    inputs = state_inputs(tmp_path / "inputs")
    out = tmp_path / "out"
    argv = states_argv(inputs, out)
    killed = run_killed(argv, "connscale.io.states:write_state_sequence", 2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []
    assert (out / ".dfcstates.staging").is_dir()
    assert main(list(map(str, argv))) == 0
    manifest = read_manifest(out, "dfcstates", verify="full")
    assert {"sub-01_dfcstates.tsv", "sub-03_dfcstates.tsv", "dfcstates_features.tsv"} <= set(
        manifest["files"]
    )
    assert hidden_leftovers(out) == []
    # the same inputs and parameters again: nothing to do
    again = run_cli(argv)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr[-2000:]


# --------------------------------------------------------------------------
# Full disk
# --------------------------------------------------------------------------


class TinyDisk(SmallDisk):
    """A 1 MiB tmpfs (root), else a 256 KiB file-size limit."""

    SIZE = 2**20
    LIMIT = 2**18


@pytest.fixture
def tiny_disk(tmp_path):
    disk = TinyDisk(tmp_path / "disk")
    yield disk
    disk.close()


def test_full_disk_maps_publish_nothing_then_complete(tmp_path, tiny_disk):
    # 100,000 voxels: each map ~0.3 MB gzipped, five of them exceed the disk
    bold = scan(tmp_path / f"{SOURCE}_bold.nii", shape=(50, 50, 40), n_volumes=4)
    out = tiny_disk.path / "out"
    seeds = ["--seed=10,10,10", "--seed=30,30,30", "--seed=60,60,40"]
    argv = maps_argv(bold, out, "--gcor", "--ecm", *seeds)
    failed = run_cli(argv, preexec=tiny_disk.preexec())
    no_segfault(failed)
    one_line_error(failed, "maps")
    assert visible_maps(out) == []
    assert not (out / f"{MAPS}_manifest.json").exists()
    tiny_disk.grow()
    assert main(list(map(str, argv))) == 0
    manifest = read_manifest(out, MAPS, verify="full")
    assert len([n for n in manifest["files"] if n.endswith("_boldmap.nii.gz")]) == 5
    assert hidden_leftovers(out) == []


def test_full_disk_dfc_states_publish_nothing_then_complete(tmp_path, tiny_disk):
    # 300 regions: each state is a TSV matrix of 90,000 values, ~2 MB
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    paths = []
    for seed in (1, 2):
        path = inputs / f"sub-0{seed}_timeseries.npy"
        np.save(path, np.random.default_rng(seed).standard_normal((24, 300)).astype(np.float32))
        paths.append(path)
    out = tiny_disk.path / "out"
    argv = states_argv(paths, out)
    failed = run_cli(argv, preexec=tiny_disk.preexec())
    no_segfault(failed)
    one_line_error(failed, "dfc-states")
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []
    tiny_disk.grow()
    assert main(list(map(str, argv))) == 0
    manifest = read_manifest(out, "dfcstates", verify="full")
    assert "dfcstates_state-02_meas-PearsonCorrelation_relmat.tsv" in manifest["files"]
    assert hidden_leftovers(out) == []


# --------------------------------------------------------------------------
# Two runs into one output
# --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["maps", "dfc-states"])
def test_second_run_into_the_same_output_fails_naming_the_first(tmp_path, command):
    out = tmp_path / "out"
    if command == "maps":
        argv = maps_argv(scan(tmp_path / f"{SOURCE}_bold.nii.gz"), out, "--gcor", "--ecm")
        spec, prefix = "connscale.io.maps:write_map", MAPS
    else:
        argv = states_argv(state_inputs(tmp_path / "inputs"), out)
        spec, prefix = "connscale.io.states:write_state_sequence", "dfcstates"
    first = start_paused(argv, spec)
    try:
        message = one_line_error(run_cli(argv), command)
        assert f"pid {first.pid}" in message and "--wait" in message
        waiting = start_waiting(argv)
    finally:
        code, _, err = finish(first)
    assert code == 0, err[-2000:]
    waited, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err[-2000:]
    assert "nothing to do" in waited  # the first run's set, same inputs and parameters
    manifest = read_manifest(out, prefix, verify="full")
    log = json.loads((out / f"{prefix}_log.json").read_text())
    assert {p.split("/")[-1] for p in log["outputs"] + log["figures"]} | {
        f"{prefix}_log.json"
    } == set(manifest["files"])
    assert hidden_leftovers(out) == []
