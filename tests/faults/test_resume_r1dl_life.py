"""Resume of ``connscale r1dl`` and ``connscale life``: kill -9, changed and
foreign files, concurrent runs.

A killed run is the CLI as ``python -m connscale`` runs it, with the
checkpoint's ``save`` wrapped to stop the process (SIGSTOP) once it has saved
the seeded number of atoms / solver iterations: the test sees it stopped
(``waitpid``), checks the checkpoint on disk, and sends SIGKILL, so the kill
lands at an exact point with no sleep. Everything runs on one thread, so the
resumed and uninterrupted runs do the same arithmetic and must agree bit for
bit.
"""

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from connscale.cli.main import main

pytestmark = pytest.mark.faults

SRC = Path(__file__).resolve().parents[2] / "src"
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
SEED = 20240611

# `python -m connscale ARGS`, stopped (SIGSTOP) right after the checkpoint
# save that brings it to argv[1] atoms (r1dl) or solver iterations (life).
_STOPPING_CLI = """
import os, runpy, signal, sys
stop_at = int(sys.argv.pop(1))
from connscale.life import _checkpoint as life_checkpoint
from connscale.networks import _checkpoint as r1dl_checkpoint

def stop():
    os.kill(os.getpid(), signal.SIGSTOP)

atom_save = r1dl_checkpoint.AtomCheckpoint.save
def save_atom(self, k, **atom):
    path = atom_save(self, k, **atom)
    if k + 1 == stop_at:
        stop()
    return path
r1dl_checkpoint.AtomCheckpoint.save = save_atom

state_save = life_checkpoint.SolverCheckpoint.save
def save_state(self, state):
    state_save(self, state)
    if state["k"] == stop_at and not state["stop_reason"]:
        stop()
life_checkpoint.SolverCheckpoint.save = save_state
runpy.run_module("connscale", run_name="__main__")
"""


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cli(argv, tmp_path, name):
    """Run ``python -m connscale argv`` to the end; return (rc, stderr)."""
    with open(tmp_path / f"{name}.err", "w+") as err:
        rc = subprocess.run(
            [sys.executable, "-m", "connscale", *argv],
            env=ENV,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=err,
            timeout=300,
        ).returncode
        err.seek(0)
        return rc, err.read()


def _start_stopping(argv, stop_at: int, tmp_path, name) -> subprocess.Popen:
    """Start the CLI and return once it has stopped at its checkpoint."""
    with open(tmp_path / f"{name}.err", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _STOPPING_CLI, str(stop_at), *argv],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        proc.returncode = 0  # reaped above
        pytest.fail(
            f"the run ended before its checkpoint {stop_at}: "
            f"{(tmp_path / f'{name}.err').read_text()}"
        )
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def _log(path: Path) -> dict:
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------
# r1DL
# ---------------------------------------------------------------------------

K = 6
#: The outputs of S.npy: sub-S/func/sub-S_meas-R1DL_<suffix>.
R1DL = "sub-S_meas-R1DL"


def _func(out: Path) -> Path:
    return out / "sub-S" / "func"


def _checkpoints(out: Path) -> Path:
    return _func(out) / f".{R1DL}_components.staging" / "r1dl_checkpoint"


def _r1dl_log(out: Path) -> dict:
    return _log(_func(out) / f"{R1DL}_components_log.json")


@pytest.fixture(scope="module")
def r1dl_input(tmp_path_factory):
    from connscale.datasets import simulate_networks

    d = tmp_path_factory.mktemp("r1dl_faults")
    S, _, _ = simulate_networks(60, 400, 5, sparsity=0.05, noise=0.3, random_state=0)
    np.save(d / "S.npy", S.astype(np.float32))
    return d / "S.npy"


def _r1dl_args(S, out, *extra):
    return [
        "r1dl",
        str(S),
        "--n-components",
        str(K),
        "--sparsity",
        "20",
        "--seed",
        "3",
        "--out",
        str(out),
        "--device",
        "cpu",
        "-q",
        *extra,
    ]


def _r1dl_outputs(out: Path) -> dict:
    loadings = sp.load_npz(_func(out) / f"{R1DL}_components.npz")
    return {
        "indptr": loadings.indptr,
        "indices": loadings.indices,
        "data": loadings.data,
        "timecourses": (_func(out) / f"{R1DL}_mixing.tsv").read_text(),
        "iterations": (_func(out) / f"{R1DL}_iterations.tsv").read_text(),
    }


def _assert_same_r1dl(out: Path, ref: Path) -> None:
    got, want = _r1dl_outputs(out), _r1dl_outputs(ref)
    for key in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert got["timecourses"] == want["timecourses"]
    assert got["iterations"] == want["iterations"]


def test_r1dl_kill_resumes_from_last_atom(r1dl_input, tmp_path, capsys):
    n_done = int(np.random.default_rng(SEED).integers(1, K - 1))
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert _cli(_r1dl_args(r1dl_input, ref), tmp_path, "ref")[0] == 0

    proc = _start_stopping(_r1dl_args(r1dl_input, out), n_done, tmp_path, "killed")
    atoms = sorted(_checkpoints(out).glob("atom_*.npz"))
    assert len(atoms) == n_done
    # While it holds the output, a second run fails at once, naming its pid.
    assert main(_r1dl_args(r1dl_input, out)) == 2
    assert f"pid {proc.pid}" in capsys.readouterr().err
    _kill(proc)
    assert not (_func(out) / f"{R1DL}_components_manifest.json").exists()

    rc, err = _cli(_r1dl_args(r1dl_input, out), tmp_path, "resumed")
    assert rc == 0, err
    assert _r1dl_log(out)["results"]["resumed_atoms"] == n_done
    _assert_same_r1dl(out, ref)
    assert not (_func(out) / f".{R1DL}_components.staging").exists()


def test_r1dl_changed_input_recomputes_complete_output_does_nothing(tmp_path, monkeypatch):
    from connscale.datasets import simulate_networks
    from connscale.networks import _checkpoint

    data_a, data_b = (
        simulate_networks(60, 300, 3, noise=0.3, random_state=seed)[0].astype(np.float32)
        for seed in (1, 2)
    )
    S = tmp_path / "S.npy"
    np.save(S, data_a)
    mtime = S.stat().st_mtime_ns

    def replace_input(data):
        """Other content, same size and modification time."""
        np.save(S, data)
        os.utime(S, ns=(mtime, mtime))

    out = tmp_path / "out"
    args = _r1dl_args(S, out)
    assert main(args) == 0
    manifest = _func(out) / f"{R1DL}_components_manifest.json"
    stamps = {p.name: p.stat().st_mtime_ns for p in _func(out).iterdir()}
    assert main(args) == 0  # nothing to do
    assert {p.name: p.stat().st_mtime_ns for p in _func(out).iterdir()} == stamps
    stamp = manifest.stat().st_mtime_ns

    replace_input(data_b)
    fresh = tmp_path / "fresh"
    assert main(_r1dl_args(S, fresh)) == 0
    assert main(args) == 0
    assert manifest.stat().st_mtime_ns != stamp
    assert _r1dl_log(out)["results"]["resumed_atoms"] == 0
    _assert_same_r1dl(out, fresh)

    # A run of the first data interrupted after two atoms: a run of the
    # second data into the same folder must not resume from its checkpoint.
    save = _checkpoint.AtomCheckpoint.save

    def interrupted(self, k, **atom):
        save(self, k, **atom)
        if k == 1:
            raise KeyboardInterrupt

    replace_input(data_a)
    stale = tmp_path / "stale"
    monkeypatch.setattr(_checkpoint.AtomCheckpoint, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(_r1dl_args(S, stale))
    monkeypatch.setattr(_checkpoint.AtomCheckpoint, "save", save)
    assert len(list(_checkpoints(stale).glob("atom_*"))) == 2
    replace_input(data_b)
    assert main(_r1dl_args(S, stale)) == 0
    assert _r1dl_log(stale)["results"]["resumed_atoms"] == 0
    _assert_same_r1dl(stale, fresh)


def test_r1dl_foreign_file_is_refused(r1dl_input, tmp_path, capsys):
    out = tmp_path / "out"
    _func(out).mkdir(parents=True)
    foreign = _func(out) / f"{R1DL}_mixing.tsv"
    foreign.write_text("my own notes\n")
    assert main(_r1dl_args(r1dl_input, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{R1DL}_mixing.tsv exists and is not part of" in err[0]
    assert foreign.read_text() == "my own notes\n"
    assert not (_func(out) / f"{R1DL}_components_manifest.json").exists()
    assert not (_func(out) / f"{R1DL}_components.npz").exists()
    # Once it is moved away, the next run publishes the atoms it had learned.
    foreign.unlink()
    assert main(_r1dl_args(r1dl_input, out)) == 0
    assert _r1dl_log(out)["results"]["resumed_atoms"] == K


def test_r1dl_wait_for_the_other_run(r1dl_input, tmp_path):
    from connscale.io import lock as _lock

    out = tmp_path / "out"
    first = _start_stopping(_r1dl_args(r1dl_input, out), 1, tmp_path, "first")
    waiting = threading.Event()
    real_time = _lock.time

    def sleep(seconds):
        waiting.set()
        real_time.sleep(seconds)

    _lock.time = types.SimpleNamespace(sleep=sleep, monotonic=real_time.monotonic)
    try:
        result = {}
        second = threading.Thread(
            target=lambda: result.update(rc=main(_r1dl_args(r1dl_input, out, "--wait")))
        )
        second.start()
        assert waiting.wait(timeout=120)  # blocked on the first run's lock
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=300) == 0
        second.join(timeout=300)
    finally:
        _lock.time = real_time
    assert result["rc"] == 0
    assert _r1dl_log(out)["results"]["resumed_atoms"] == 0  # the first's log


# ---------------------------------------------------------------------------
# LiFE
# ---------------------------------------------------------------------------

ITERS, EVERY = 120, 10


@pytest.fixture(scope="module")
def life_inputs(tmp_path_factory):
    nib = pytest.importorskip("nibabel")
    from connscale.datasets.phantom import simulate_life_phantom

    d = tmp_path_factory.mktemp("life_faults")
    ph = simulate_life_phantom(n_true=40, n_false=40, shape=(8, 8, 8), random_state=1)
    nib.save(nib.Nifti1Image(ph.dwi, ph.affine), d / "sub-01_dwi.nii.gz")
    np.savetxt(d / "sub-01_dwi.bval", ph.bvals[None])
    np.savetxt(d / "sub-01_dwi.bvec", ph.bvecs.T)
    tract = nib.streamlines.Tractogram(list(ph.streamlines), affine_to_rasmm=np.eye(4))
    nib.streamlines.save(tract, str(d / "tracks.tck"))
    return d, ph


def _life_args(d, out, *extra):
    return [
        "life",
        str(d / "sub-01_dwi.nii.gz"),
        "--bvals",
        str(d / "sub-01_dwi.bval"),
        "--bvecs",
        str(d / "sub-01_dwi.bvec"),
        "--tractogram",
        str(d / "tracks.tck"),
        "--max-iter",
        str(ITERS),
        "--tol",
        "0",
        "--checkpoint-every",
        str(EVERY),
        "--device",
        "cpu",
        "-q",
        "--out",
        str(out),
        *extra,
    ]


def _assert_same_life(out: Path, ref: Path) -> None:
    import nibabel as nib

    for name in ("sub-01_desc-life_weights.npy",):
        np.testing.assert_array_equal(np.load(out / name), np.load(ref / name))
    for name in ("sub-01_desc-life_weights.tsv", "sub-01_desc-pruned_tractogram.tck"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    rmse = "sub-01_desc-life_rmse.nii.gz"
    assert gzip.decompress((out / rmse).read_bytes()) == gzip.decompress((ref / rmse).read_bytes())
    assert nib.load(out / rmse).shape == (8, 8, 8)
    got, want = (_log(p / "sub-01_life_log.json")["results"] for p in (out, ref))
    assert got["objective_history"] == want["objective_history"]
    assert got["cv_rmse_median"] == want["cv_rmse_median"]


def test_life_kill_resumes_the_solver(life_inputs, tmp_path, capsys):
    d, _ = life_inputs
    stop_at = EVERY * int(np.random.default_rng(SEED + 1).integers(1, ITERS // EVERY - 1))
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert _cli(_life_args(d, ref), tmp_path, "ref")[0] == 0

    proc = _start_stopping(_life_args(d, out), stop_at, tmp_path, "killed")
    assert len(list((out / ".sub-01_life.staging" / "life_checkpoint").glob("sbb_*.npz"))) == 1
    assert main(_life_args(d, out)) == 2
    assert f"pid {proc.pid}" in capsys.readouterr().err
    _kill(proc)
    assert not (out / "sub-01_life_manifest.json").exists()

    rc, err = _cli(_life_args(d, out), tmp_path, "resumed")
    assert rc == 0, err
    assert _log(out / "sub-01_life_log.json")["results"]["resumed_from_iteration"] == stop_at
    _assert_same_life(out, ref)
    assert not (out / ".sub-01_life.staging").exists()


def test_life_complete_output_does_nothing_changed_input_recomputes(life_inputs, tmp_path, capsys):
    import nibabel as nib

    src, ph = life_inputs
    d = tmp_path / "in"
    d.mkdir()
    for p in src.iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    out = tmp_path / "out"
    assert main(_life_args(d, out)) == 0
    manifest = out / "sub-01_life_manifest.json"
    weights = np.load(out / "sub-01_desc-life_weights.npy")
    stamp = manifest.stat().st_mtime_ns
    capsys.readouterr()
    assert main(_life_args(d, out)) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert manifest.stat().st_mtime_ns == stamp

    dwi = ph.dwi.copy()
    dwi[2:6, 2:6, 2:6, 1:] *= 0.9
    nib.save(nib.Nifti1Image(dwi, ph.affine), d / "sub-01_dwi.nii.gz")
    assert main(_life_args(d, out)) == 0
    assert manifest.stat().st_mtime_ns != stamp
    assert _log(out / "sub-01_life_log.json")["results"]["resumed_from_iteration"] == 0
    assert not np.array_equal(np.load(out / "sub-01_desc-life_weights.npy"), weights)


def test_life_foreign_file_is_refused(life_inputs, tmp_path, capsys):
    d, _ = life_inputs
    out = tmp_path / "out"
    out.mkdir()
    foreign = out / "sub-01_desc-life_weights.npy"
    foreign.write_bytes(b"not connscale's")
    assert main(_life_args(d, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sub-01_desc-life_weights.npy exists and is not part of" in err[0]
    assert foreign.read_bytes() == b"not connscale's"
    assert not (out / "sub-01_life_manifest.json").exists()
