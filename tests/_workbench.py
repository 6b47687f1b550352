"""Connectome Workbench's ``wb_command`` for the CIFTI tests, and the bundled CIFTI data.

Tests that compare against Workbench call :func:`wb_command` (the path, or a
skip naming why) or use the ``requires_workbench`` mark; :func:`run_wb` runs
one command and fails the test with Workbench's own message when it exits
non-zero. ``.ci/run`` installs Debian's ``connectome-workbench`` when it is
missing and CI runs as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: The bundled CIFTI-2 files (public domain; see SOURCE.md there).
CIFTI_DATA = Path(__file__).resolve().parent / "data" / "cifti"
ONES_DSCALAR = CIFTI_DATA / "ones.dscalar.nii"
CONTE69_DTSERIES = CIFTI_DATA / "Conte69.MyelinAndCorrThickness.32k_fs_LR.dtseries.nii"
CONTE69_DSCALAR = CIFTI_DATA / "Conte69.MyelinAndCorrThickness.32k_fs_LR.dscalar.nii"
CONTE69_PTSERIES = CIFTI_DATA / "Conte69.MyelinAndCorrThickness.32k_fs_LR.ptseries.nii"
CONTE69_DLABEL = CIFTI_DATA / "Conte69.parcellations_VGD11b.32k_fs_LR.dlabel.nii"

WB_COMMAND = shutil.which("wb_command")
_SKIP_REASON = (
    "wb_command (Connectome Workbench) is not installed: apt-get install connectome-workbench"
)

#: Mark for tests that need ``wb_command``.
requires_workbench = pytest.mark.skipif(WB_COMMAND is None, reason=_SKIP_REASON)


def wb_command() -> str:
    """Return the path of ``wb_command``, or skip the calling test with the reason."""
    if WB_COMMAND is None:
        pytest.skip(_SKIP_REASON)
    return WB_COMMAND


def run_wb(*args: str | os.PathLike, timeout: float = 120) -> str:
    """Run ``wb_command ARGS`` and return its standard output.

    Skips when Workbench is absent; fails the test with Workbench's message
    when it exits non-zero. OpenMP is held to 2 threads (the test machines are small).
    """
    command = [wb_command(), *map(str, args)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {result.returncode}: "
            f"{(result.stderr or result.stdout).strip()}"
        )
    return result.stdout
