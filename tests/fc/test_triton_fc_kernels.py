"""The static-FC and sparse-DFC Triton kernels of ``connscale.fc._triton_kernels``,
run on the CPU by Triton's interpreter (CUDA runs them compiled in
test_static.py / test_dfc_kernels.py on a GPU machine)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_fc_triton_kernels_interpreted_on_cpu():
    pytest.importorskip("triton", minversion="3.9")
    script = Path(__file__).with_name("_triton_fc_interpreted.py")
    env = dict(os.environ, TRITON_INTERPRET="1")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
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
