"""Run a test script's Triton kernels on the CPU through Triton's interpreter."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SRC = str(Path(__file__).resolve().parents[1] / "src")


def run_interpreted(script: Path, groups: tuple[str, ...] = ()) -> None:
    """Run ``script`` with ``TRITON_INTERPRET=1`` in a fresh interpreter and
    assert it ends with 'ok' (skipped below Triton 3.9, whose interpreter
    cannot take loop bounds given at run time).

    With ``groups``, one interpreter per group runs at the same time, each
    given its group's name as its argument (the script runs that share of its
    checks); every one must end with 'ok'. The checks are the same, the wall
    time shorter on a machine with more than one core.
    """
    pytest.importorskip("triton", minversion="3.9")
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, env.get("PYTHONPATH")) if p)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *([group] if group else [])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in (groups or ("",))
    ]
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            proc.kill()
        assert proc.returncode == 0, stdout + stderr
        assert stdout.strip().endswith("ok"), stdout + stderr
