"""The exact TF32 decide + confirm kernels (connscale.fc._exact_triton):
on the CPU through Triton's interpreter, on CUDA where there is one."""

from pathlib import Path

import pytest
import torch

from .._interpreted import run_interpreted

_SCRIPT = Path(__file__).with_name("_exact_triton_interpreted.py")


def test_exact_kernels_interpreted():
    run_interpreted(_SCRIPT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_exact_kernels_cuda():  # pragma: no cover - GPU machines
    pytest.importorskip("triton")
    from ._exact_triton_interpreted import main

    main("cuda")
