"""``memory_limit`` holds for every public function and for ``connscale cohort``.

Each call runs in a fresh interpreter on inputs sized to exceed its limit:
after the imports, a warm-up call and the input are in place, the peak
resident set (``VmHWM``) is reset (``/proc/self/clear_refs``), the call is
made, and the peak's growth must stay under the limit plus a fixed margin
(torch's and the allocator's own overhead) - or the call must stop with a
:class:`connscale.MemoryLimitError` that names the limit and what to do.

glibc's malloc moves its mmap threshold up to 32 MB as large blocks are
freed, after which freed blocks stay in the heap and count as resident; the
runs fix the threshold (``MALLOC_MMAP_THRESHOLD_``) so that what is measured
is what connscale allocates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status"),
]

MB = 1000**2
# torch's thread pools, the allocator's bookkeeping and small temporaries
# that no plan counts (e.g. input validation's finiteness mask).
MARGIN = 32 * MB
SRC = str(Path(__file__).resolve().parents[2] / "src")

_HARNESS = """
import gc, json, sys
import numpy as np

def _status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

{setup}
gc.collect()
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")  # reset VmHWM to the current resident set
_base = _status("VmRSS")
_error = None
try:
{call}
except MemoryError as exc:
    _error = [type(exc).__name__, str(exc)]
print(json.dumps({{"growth": _status("VmHWM") - _base, "error": _error}}))
"""


def _measure(setup: str, call: str, tmp_path: Path) -> dict:
    code = _HARNESS.format(
        setup=textwrap.dedent(setup), call=textwrap.indent(textwrap.dedent(call), "    ")
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
        "MALLOC_MMAP_THRESHOLD_": str(1 << 20),
        "OMP_NUM_THREADS": "2",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check(result: dict, limit: int) -> None:
    """Peak growth within the limit and margin, or a clear MemoryLimitError."""
    if result["error"] is not None:
        name, message = result["error"]
        assert name == "MemoryLimitError", message
        assert "memory_limit=" in message and "bytes" in message, message
        assert "out=" in message or "raise" in message.lower(), message
    assert result["growth"] <= limit + MARGIN, (
        f"peak RSS grew by {result['growth'] / MB:.1f} MB under a {limit / MB:.0f} MB limit"
    )


WARM_UP = """
import connscale
rng = np.random.default_rng(0)
small = rng.standard_normal((40, 30)).astype(np.float32)
for kind in ("dense", "triu"):
    connscale.correlation(small, kind=kind, device="cpu", memory_limit="50MB")
connscale.correlation(small, kind="sparse", threshold=0.5, device="cpu", memory_limit="50MB")
for kind, extra in (("triu", {}), ("sparse", {"threshold": 0.5}), ("lowrank", {"rank": 3}),
                    ("factor", {"rank": 3})):
    connscale.dynamic_correlation(small, 10, 5, kind=kind, device="cpu", memory_limit="50MB",
                                  **extra)
connscale.pairwise_dfc(small.reshape(2, 20, 30), 10, 5, device="cpu", memory_limit="50MB")
"""


@pytest.mark.parametrize(
    "kind, shape, limit, extra",
    [
        # 32 MB of series whose float64 normalisation temporaries alone exceed the limit
        ("dense", (2000, 4000), 150 * MB, {}),
        ("triu", (4000, 3000), 100 * MB, {}),
        # every pair kept: a 256 MB sparse result under 100 MB
        ("sparse", (20, 8000), 100 * MB, {"threshold": 0.0, "absolute": True}),
    ],
)
def test_correlation(tmp_path, kind, shape, limit, extra):
    setup = WARM_UP + f"x = rng.standard_normal({shape}).astype(np.float32)\n"
    call = (
        f"r = connscale.correlation(x, kind={kind!r}, device='cpu', memory_limit={limit},"
        f" **{extra!r})"
    )
    _check(_measure(setup, call, tmp_path), limit)


@pytest.mark.parametrize(
    "kind, shape, window, step, limit, extra",
    [
        # 33 windows' triangles: 264 MB of the 300 MB kept in memory
        ("triu", (158, 2000), 30, 4, 300 * MB, {}),
        # sparse windows that grow past the limit as they are computed
        ("sparse", (200, 1500), 20, 5, 50 * MB, {"threshold": 0.2}),
        # 110 windows of Q and B, 352 MB of the 400 MB kept in memory
        ("lowrank", (159, 10000), 50, 1, 400 * MB, {"rank": 40, "random_state": 0}),
        # 220 windows of F, 352 MB of the 400 MB
        ("factor", (269, 10000), 50, 1, 400 * MB, {"rank": 40}),
    ],
)
def test_dynamic_correlation_in_memory(tmp_path, kind, shape, window, step, limit, extra):
    setup = WARM_UP + f"x = rng.standard_normal({shape}).astype(np.float32)\n"
    call = (
        f"r = connscale.dynamic_correlation(x, {window}, {step}, kind={kind!r}, device='cpu',"
        f" memory_limit={limit}, **{extra!r})"
    )
    _check(_measure(setup, call, tmp_path), limit)


def test_pairwise_dfc(tmp_path):
    # 124 MB of courses under 100 MB
    limit = 100 * MB
    setup = WARM_UP + "x = rng.standard_normal((60, 300, 60)).astype(np.float32)\n"
    call = f"r = connscale.pairwise_dfc(x, 10, 1, device='cpu', memory_limit={limit})"
    _check(_measure(setup, call, tmp_path), limit)


def test_r1dl(tmp_path):
    # S of 120 MB (the caller's) under 50 MB: streamed in blocks
    limit = 50 * MB
    setup = """
import connscale
rng = np.random.default_rng(0)
connscale.r1dl(rng.standard_normal((30, 200)).astype(np.float32), 2, 10, device="cpu",
               random_state=0, memory_limit="50MB")
S = rng.standard_normal((200, 150_000)).astype(np.float32)
"""
    call = (
        f"r = connscale.r1dl(S, 3, 500, device='cpu', random_state=0, max_iter=5,"
        f" memory_limit={limit})"
    )
    _check(_measure(setup, call, tmp_path), limit)


def test_life_fit(tmp_path):
    # ~470k streamline points: the default build chunk alone takes more than the limit
    limit = 40 * MB
    setup = """
from connscale import life
from connscale.datasets import simulate_life_phantom
small = simulate_life_phantom(n_true=30, n_false=30, random_state=0)
life.fit(small.dwi, small.bvals, small.bvecs, small.streamlines, affine=small.affine,
         device="cpu", max_iter=3, memory_limit="50MB")
ph = simulate_life_phantom(n_true=600, n_false=600, shape=(30, 30, 30), step=0.1, random_state=0)
"""
    call = (
        f"fit = life.fit(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,"
        f" device='cpu', max_iter=10, memory_limit={limit})"
    )
    _check(_measure(setup, call, tmp_path), limit)


def test_cohort_passes_the_limit_on(tmp_path):
    # One 48 MB scan whose fc job needs far more than 100 MB without the limit.
    limit = 100 * MB
    setup = """
from connscale.cli.main import main
rng = np.random.default_rng(0)
np.save("warm.npy", rng.standard_normal((40, 30)).astype(np.float32))
assert main(["cohort", "warm.npy", "-q", "--job", "fc", "--backend", "serial",
             "--memory-limit", "50MB", "--out", "warm"]) == 0
np.save("sub-01_timeseries.npy", rng.standard_normal((4000, 3000)).astype(np.float32))
"""
    call = f"""
rc = main(["cohort", "sub-01_timeseries.npy", "-q", "--job", "fc", "--kind", "triu",
           "--backend", "serial", "--memory-limit", "{limit}", "--out", "out"])
assert rc == 0, open("out/cohort_errors.tsv").read()
"""
    _check(_measure(setup, call, tmp_path), limit)


_STATES_SETUP = """
from connscale.states import DFCStates
rng = np.random.default_rng(0)
DFCStates(2, n_init=1, device="cpu", random_state=0).fit(
    np.tanh(rng.standard_normal((20, 30))).astype(np.float32)
)
# two subjects' 150 windows of 19,900 edges (200 regions): 24 MB, the caller's
w = [np.tanh(rng.standard_normal((150, 19900))).astype(np.float32) for _ in range(2)]
"""


@pytest.mark.parametrize("metric", ["l1", "euclidean"])
def test_dfc_states(tmp_path, metric):
    # Without a plan, one block of float64 temporaries (all 300 windows) takes 144 MB.
    limit = 100 * MB
    call = (
        f"s = DFCStates(3, metric={metric!r}, n_init=2, max_iter=10, device='cpu',"
        f" random_state=0, fisher_z=True, memory_limit={limit}).fit(w)"
    )
    result = _measure(_STATES_SETUP, call, tmp_path)
    assert result["error"] is None, result["error"]
    _check(result, limit)


def test_dfc_states_too_small_a_limit_fails_up_front(tmp_path):
    call = "s = DFCStates(3, device='cpu', random_state=0, memory_limit='1MB').fit(w)"
    result = _measure(_STATES_SETUP, call, tmp_path)
    _check(result, 1 * MB)
    name, message = result["error"]
    assert "DFC states of 300 windows x 19900 edges" in message, message


def test_dfc_states_command_passes_the_limit_on(tmp_path, capsys):
    import numpy as np

    from connscale.cli.main import main

    inputs = []
    for seed in (1, 2):
        path = tmp_path / f"sub-0{seed}_timeseries.npy"
        np.save(path, np.random.default_rng(seed).standard_normal((60, 200)).astype(np.float32))
        inputs.append(str(path))
    # each subject's 41 windows (3.3 MB) fit the limit, the clustering of both does not
    argv = ["dfc-states", *inputs, "--window", "20", "--states", "2", "--device", "cpu"]
    argv += ["--memory-limit", "5MB", "--out", str(tmp_path / "out"), "-q"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "DFC states of 82 windows x 19900 edges" in error
    assert not list((tmp_path / "out").glob("*dfcstates*"))


_MAPS_SETUP = """
import nibabel as nib
from connscale.cli.main import main
rng = np.random.default_rng(0)
nib.Nifti1Image(rng.standard_normal((6, 6, 5, 20)).astype(np.float32) + 100,
                np.eye(4)).to_filename("warm_bold.nii")
assert main(["maps", "warm_bold.nii", "--gcor", "--ecm", "--device", "cpu", "-q",
             "--memory-limit", "50MB", "--out", "warm"]) == 0
# 21,600 voxels x 300 volumes: 26 MB of float32 series
data = rng.standard_normal((30, 30, 24, 300)).astype(np.float32) + 100
nib.Nifti1Image(data, np.diag([3.0, 3.0, 3.0, 1.0])).to_filename("sub-01_bold.nii")
del data
"""


def test_maps_command(tmp_path):
    # Each map's own float64 normalisation took 5 copies of the series (130 MB).
    limit = 100 * MB
    call = f"""
rc = main(["maps", "sub-01_bold.nii", "--gcor", "--ecm", "--device", "cpu", "-q",
           "--memory-limit", "{limit}", "--out", "out"])
assert rc == 0
"""
    result = _measure(_MAPS_SETUP, call, tmp_path)
    _check(result, limit)


def test_maps_command_too_small_a_limit_fails_up_front(tmp_path):
    call = """
rc = main(["maps", "sub-01_bold.nii", "--gcor", "--device", "cpu", "-q",
           "--memory-limit", "20MB", "--out", "out"])
assert rc == 2
"""
    result = _measure(_MAPS_SETUP, call, tmp_path)
    assert result["growth"] <= MARGIN, result  # refused before the image is read
    assert not list((tmp_path / "out").glob("*_boldmap*"))


def _bids_tree(tmp_path: Path, shape: tuple, n_volumes: int) -> Path:
    """Two fMRIPrep runs: sub-01's BOLD replaced by ``shape`` x ``n_volumes`` of noise,
    its mask every voxel; sub-02 the fixture's small run."""
    import nibabel as nib
    import numpy as np

    from tests.bids._fmriprep import AFFINE, ATLAS, atlas_img, make_fmriprep

    root = make_fmriprep(
        tmp_path / "fmriprep", [("01", None, "rest", None), ("02", None, "rest", None)]
    )
    nib.save(atlas_img(), tmp_path / ATLAS)
    func = root / "sub-01" / "func"
    stem = "sub-01_task-rest_space-MNI152NLin2009cAsym"
    data = np.random.default_rng(0).standard_normal((*shape, n_volumes), dtype=np.float32)
    nib.save(nib.Nifti1Image(data + 100, AFFINE), func / f"{stem}_desc-preproc_bold.nii.gz")
    mask = nib.Nifti1Image(np.ones(shape, np.uint8), AFFINE)
    nib.save(mask, func / f"{stem}_desc-brain_mask.nii.gz")
    return root


def _bids_argv(tmp_path: Path, root: Path, out: str, *extra: str) -> list[str]:
    from tests.bids._fmriprep import ATLAS

    argv = ["bids", str(root), out, "participant", "--atlas", str(tmp_path / ATLAS)]
    argv += ["--atlas-name", "Slab4", "--denoise", "none", "--backend", "serial"]
    return argv + ["--no-reports", "-q", *extra]


def test_bids_participant_measures_get_what_the_run_leaves(tmp_path, monkeypatch):
    # The limit covers the whole run: its correlation gets the limit less the
    # run's data (read and cleaned), not the whole limit again.
    import connscale.fc.static as static
    from connscale.cli.main import main

    root = _bids_tree(tmp_path, (20, 20, 15), 30)
    limits = []
    correlation = static.compute_correlation

    def recording(*args, **kwargs):
        limits.append(kwargs["memory_limit"])
        return correlation(*args, **kwargs)

    monkeypatch.setattr(static, "compute_correlation", recording)
    argv = _bids_argv(tmp_path, root, str(tmp_path / "out"), "--measures", "voxelfc")
    assert main([*argv, "--participant-label", "01", "--memory-limit", "10MB"]) == 0
    # sub-01: 6000 voxels x 30 volumes, read (float32) and cleaned (float32), and its mask
    assert limits == [10 * MB - 2 * 6000 * 30 * 4 - 6000]


def test_bids_participant_run_whose_data_exceed_the_limit_is_refused(tmp_path, capsys):
    from connscale.cli.main import main
    from tests.bids._fmriprep import participant_log

    root = _bids_tree(tmp_path, (20, 20, 15), 30)  # sub-01 holds 1.45 MB; sub-02 about 16 KB
    out = tmp_path / "out"
    argv = _bids_argv(tmp_path, root, str(out), "--measures", "voxelfc", "--memory-limit", "1MB")
    assert main(argv) == 1
    report, _ = participant_log(out)
    first, second = report["records"]
    assert first["status"] == "error" and "\n" not in first["error"]
    assert first["error"].startswith("MemoryLimitError: The data of sub-01_task-rest")
    assert "memory_limit='1MB'" in first["error"] and "Raise --memory-limit" in first["error"]
    # the voxel relmat and the QC table, each with its sidecar
    assert second["status"] == "ok" and len(second["outputs"]) == 4
    assert not list(out.glob("sub-01/**/*_relmat.h5"))


def test_bids_participant_run_passes_the_limit_on(tmp_path):
    # 6000 voxels x 300 volumes: the voxel correlation's 72 MB triangle, which
    # takes more than the limit without it.
    limit = 100 * MB
    setup = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from connscale.cli.main import main
from tests.faults.test_memory_limits import _bids_argv, _bids_tree
from pathlib import Path
root = _bids_tree(Path("."), (20, 20, 15), 300)
argv = _bids_argv(Path("."), root, "warm", "--measures", "voxelfc", "--memory-limit", "50MB")
assert main(argv + ["--participant-label", "02"]) == 0
"""
    call = f"""
argv = _bids_argv(Path("."), root, "out", "--measures", "voxelfc", "--memory-limit", "{limit}")
rc = main(argv + ["--participant-label", "01"])
assert rc == 0, next(Path("out/logs").glob("participant_*_errors.tsv")).read_text()
"""
    _check(_measure(setup, call, tmp_path), limit)


def _equal_runs_tree(tmp_path: Path, n_runs: int) -> Path:
    """``n_runs`` fMRIPrep runs of 20 x 20 x 15 voxels (all in the mask) and 30 volumes."""
    import nibabel as nib
    import numpy as np

    from tests.bids._fmriprep import AFFINE, ATLAS, atlas_img, make_fmriprep

    subjects = [f"{i:02d}" for i in range(1, n_runs + 1)]
    root = make_fmriprep(tmp_path / "fmriprep", [(s, None, "rest", None) for s in subjects])
    nib.save(atlas_img(), tmp_path / ATLAS)
    rng = np.random.default_rng(0)
    for sub in subjects:
        func = root / f"sub-{sub}" / "func"
        stem = f"sub-{sub}_task-rest_space-MNI152NLin2009cAsym"
        data = rng.standard_normal((20, 20, 15, 30), dtype=np.float32) + 100
        nib.save(nib.Nifti1Image(data, AFFINE), func / f"{stem}_desc-preproc_bold.nii.gz")
        mask = nib.Nifti1Image(np.ones((20, 20, 15), np.uint8), AFFINE)
        nib.save(mask, func / f"{stem}_desc-brain_mask.nii.gz")
    return root


#: What each run of :func:`_equal_runs_tree` holds for voxelfc: 6000 voxels x 30
#: volumes read (float32) and cleaned (float32), and its mask.
_HELD = 2 * 6000 * 30 * 4 + 6000


@pytest.mark.parametrize(
    ("limit", "readers"),
    [(5 * MB, 1), (8 * MB, 2), (2_890_000, 0)],  # 0: just under 2 runs; the QC cleaning fits
    ids=["one-fits", "two-fit", "none-fits"],
)
def test_bids_participant_counts_the_runs_read_ahead(tmp_path, monkeypatch, limit, readers):
    # --memory-limit is the call's: the runs read ahead are held at the largest
    # run's size, no more read ahead than fit in half the limit, and each run's
    # measures get the limit less those runs and its own data.
    import connscale.fc.static as static
    from connscale.cli.main import main
    from tests.bids._fmriprep import participant_log

    root = _equal_runs_tree(tmp_path, 4)
    limits = []
    correlation = static.compute_correlation

    def recording(*args, **kwargs):
        limits.append(kwargs["memory_limit"])
        return correlation(*args, **kwargs)

    monkeypatch.setattr(static, "compute_correlation", recording)
    out = tmp_path / "out"
    argv = _bids_argv(tmp_path, root, str(out), "--measures", "voxelfc", "--n-jobs", "3")
    assert main([*argv, "--memory-limit", str(limit)]) == 0
    report, _ = participant_log(out)
    assert report["memory"] == {
        "memory_limit": limit,
        "run_limit": limit - readers * _HELD,
        "largest_run_bytes": _HELD,
        "readers_asked": 3,
        "readers": readers,
    }
    assert any(f"{readers} run(s) read ahead instead of 3" in n for n in report["notes"])
    assert [r["status"] for r in report["records"]] == ["ok"] * 4
    assert limits == [limit - readers * _HELD - _HELD] * 4


def test_bids_participant_reads_ahead_as_asked_when_the_runs_fit(tmp_path):
    from connscale.cli.main import main
    from tests.bids._fmriprep import participant_log

    root = _equal_runs_tree(tmp_path, 3)
    out = tmp_path / "out"
    argv = _bids_argv(tmp_path, root, str(out), "--measures", "voxelfc", "--n-jobs", "2")
    assert main([*argv, "--memory-limit", "100MB"]) == 0
    report, _ = participant_log(out)
    memory = report["memory"]
    assert memory["readers"] == 2 and memory["run_limit"] == 100 * MB - 2 * _HELD
    assert not any("read ahead instead" in n for n in report["notes"])
