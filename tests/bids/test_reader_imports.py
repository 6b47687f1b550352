"""The reader processes of the participant level import no torch.

A reader imports ``READER_MODULES`` (in the fork server it is forked from)
and the module of the function it runs; neither may load torch (seconds to
start, and memory held in every reader), and its first read imports no
package they do not (each reader would import it again). What is imported
is checked, not how long it takes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from connscale.bidsapp.participant import READER_MODULES, _run_task


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    path = [str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )


def test_the_reader_modules_import_no_torch():
    imports = "; ".join(f"import {name}" for name in READER_MODULES)
    done = _python(f"{imports}; import sys; assert 'torch' not in sys.modules, 'torch'")
    assert done.returncode == 0, done.stderr


def test_what_a_reader_runs_is_in_its_modules(tmp_path):
    from connscale.bidsapp.config import ParticipantConfig
    from connscale.bidsapp.layout import BoldRun

    bold = tmp_path / "sub-01_task-rest_bold.nii.gz"
    run = BoldRun(bold, None, None, None, 2.0, {"sub": "01", "task": "rest"})
    config = ParticipantConfig(tmp_path, tmp_path / "out", tmp_path / "atlas.nii.gz", "Slab")
    task = _run_task(config, run)
    assert task.prepare.__module__ in READER_MODULES


def test_the_cleaning_operator_is_planned_without_torch():
    done = _python(
        "import sys\n"
        "from connscale._operator import cleaning_operator, residual_dof\n"
        "from connscale._compute import MemoryLimitError\n"
        "try:\n"
        "    cleaning_operator(50, memory_limit=10_000)\n"
        "except MemoryLimitError as exc:\n"
        "    assert 'The cleaning operator of 50 volumes' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no MemoryLimitError')\n"
        "operator = cleaning_operator(50, memory_limit='1MB')\n"
        "assert residual_dof(operator)['dof'] == 48  # 50 volumes, the mean and the trend\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
    )
    assert done.returncode == 0, done.stderr


def test_a_first_read_imports_no_package_the_reader_modules_do_not(tmp_path):
    """Whether a run is published (pybids' output names) and its read: every package
    they use is among the reader modules' imports, so the fork server imports it once."""
    import pickle

    import nibabel as nib

    from connscale.bidsapp.config import ParticipantConfig
    from connscale.bidsapp.layout import find_runs
    from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep

    root = make_fmriprep(tmp_path / "fmriprep", [("01", None, "rest", None)])
    nib.save(atlas_img(), tmp_path / ATLAS)
    config = ParticipantConfig(
        root,
        tmp_path / "out",
        tmp_path / ATLAS,
        "Slab",
        strategy="simple",
        strategy_params={"motion": "basic", "wm_csf": "basic"},
        reports=False,
    )
    task = tmp_path / "task.pickle"
    task.write_bytes(pickle.dumps((config, find_runs(root, strategy="simple")[0])))
    imports = "; ".join(f"import {name}" for name in READER_MODULES)
    done = _python(
        f"{imports}\n"
        "import pickle, sys\n"
        "from connscale.bidsapp.cleaning import prefetch\n"
        "with open(sys.argv[1], 'rb') as fh:\n"
        "    task = pickle.load(fh)\n"
        "before = {name.split('.')[0] for name in sys.modules}\n"
        "assert prefetch(task) is not None\n"
        "new = {name.split('.')[0] for name in sys.modules} - before\n"
        "assert not new, sorted(new)\n",
        str(task),
    )
    assert done.returncode == 0, done.stderr


def test_a_device_name_is_checked_without_torch():
    """The call's parameters are checked before its readers start: a device given by
    name imports no torch (seconds the readers need not wait for); a torch.device is
    taken once torch is imported."""
    done = _python(
        "import sys\n"
        "from connscale._validation import _is_device\n"
        "assert _is_device('cuda:1') and _is_device('auto') and not _is_device('gpu')\n"
        "assert not _is_device(3)\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
        "import torch\n"
        "assert _is_device(torch.device('cuda', 0)) and not _is_device(torch.device('meta'))\n"
    )
    assert done.returncode == 0, done.stderr
