"""The static-FC and sparse-DFC Triton kernels of ``connscale.fc._triton_kernels``,
run on the CPU by Triton's interpreter (CUDA runs them compiled in
test_static.py / test_dfc_kernels.py on a GPU machine)."""

from pathlib import Path

from .._interpreted import run_interpreted


def test_fc_triton_kernels_interpreted_on_cpu():
    run_interpreted(Path(__file__).with_name("_triton_fc_interpreted.py"))
