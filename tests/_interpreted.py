"""Run a test script's Triton kernels on the CPU through Triton's interpreter."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

_SRC = str(Path(__file__).resolve().parents[1] / "src")


def run_interpreted(script: Path) -> None:
    """Run ``script`` with ``TRITON_INTERPRET=1`` in a fresh interpreter and
    assert it ends with 'ok' (skipped below Triton 3.9, whose interpreter
    cannot take loop bounds given at run time)."""
    pytest.importorskip("triton", minversion="3.9")
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")
