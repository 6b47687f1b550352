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


@pytest.mark.parametrize(("n", "block_m"), [(2, 64), (130, 64), (300, 128), (257, 64)])
def test_tiles_table_lists_each_tile_of_the_strict_upper_triangle_once(n, block_m):
    from connscale.fc import _exact_triton
    from connscale.fc._kernel_helpers import tiles_on

    bn = _exact_triton.BLOCK_N
    table = tiles_on(n, block_m, bn, torch.device("cpu")).reshape(-1, 2).tolist()
    rows, cols = torch.triu_indices(n, n, offset=1)
    expected = {(int(i) // block_m, int(j) // bn) for i, j in zip(rows, cols)}
    listed = {tuple(p) for p in table}
    assert len(table) == len(listed)  # each tile once
    assert expected <= listed  # every tile holding an entry (edge tiles may hold none)
    assert _exact_triton.tiles_in(n, block_m) == len(table)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tiles_table_is_pinned_for_copies_without_a_host_sync():  # pragma: no cover - GPU
    from connscale.fc._kernel_helpers import upper_tiles

    assert upper_tiles(300, 64, 128).is_pinned()
