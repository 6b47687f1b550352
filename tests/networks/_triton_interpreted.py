"""Run under TRITON_INTERPRET=1 by test_fast_update.py: the Triton kernels of
the r1DL update, executed by Triton's interpreter on the CPU, against their
pure-torch equivalents. Prints 'ok' when every check passes.

:func:`run_atoms` and :func:`assert_same_atoms` are shared with the CUDA tests."""

import torch

from connscale.networks import _triton_r1dl as kernels
from connscale.networks._select import top_r_sorted_torch
from connscale.networks._update import ResidentUpdater


def run_atoms(updater, n_atoms, n_steps, n_time, device="cpu", seed=1):
    """Learn n_atoms atoms of n_steps updates each from seeded starts:
    [(u, idx, val, last stats)]."""
    starts = torch.Generator(device=device).manual_seed(seed)
    out = []
    for _ in range(n_atoms):
        updater.start(
            torch.nn.functional.normalize(
                torch.randn(n_time, generator=starts, device=device), dim=0
            )
        )
        for _ in range(n_steps):
            stats = updater.step()
        u, idx, val = updater.current()
        updater.commit(u, idx, val)
        out.append((u, idx, val, stats))
    return out


def assert_same_atoms(first, second, atol=1e-5, rtol_stats=1e-4):
    """Same selections; time courses, loadings and statistics equal to rounding."""
    for a, b in zip(first, second):
        assert torch.equal(a[1], b[1])
        assert torch.allclose(a[0], b[0], atol=atol)
        assert torch.allclose(a[2], b[2], atol=atol)
        assert all(abs(x - y) <= rtol_stats * max(abs(y), 1e-12) for x, y in zip(a[3], b[3]))


def main():
    assert kernels.usable(torch.zeros(1)), "the interpreter is not active"
    gen = torch.Generator().manual_seed(0)

    # Exact top-r with ties (zeros, repeated +-0.5), both selections, edge r.
    for n, r in [(1000, 70), (3000, 1), (3000, 2999), (10000, 700)]:
        for selection in ("magnitude", "signed"):
            y = torch.randn(n, generator=gen)
            y[::7] = 0.0
            y[3::11] = 0.5
            y[5::13] = -0.5
            idx, val = kernels.radix_top_r(y, r, selection)
            ref_idx, ref_val = top_r_sorted_torch(y, r, selection)
            assert torch.equal(idx, ref_idx), (n, r, selection)
            assert torch.equal(val, ref_val), (n, r, selection)

    # GEMV on rows padded to 16 bytes, gathered GEMV, CSR deflation, atom dots.
    n_voxels, n_time = 3000, 45
    St = torch.randn(n_voxels, 48, generator=gen)[:, :n_time]
    u = torch.randn(n_time, generator=gen)
    y = torch.empty(n_voxels)
    kernels.gemv(St, u, y)
    assert torch.allclose(y, St @ u, atol=1e-5)
    idx = torch.arange(0, n_voxels, 3)
    val = torch.randn(idx.numel(), generator=gen)
    part = kernels.gather_gemv(St, idx, val, torch.empty(100_000))
    assert torch.allclose(part.sum(0), val @ St[idx], atol=1e-4)
    n_atoms = 3
    voxel = torch.randint(0, n_voxels, (n_atoms * 200,), generator=gen)
    atom = torch.arange(n_atoms).repeat_interleave(200)
    key = torch.unique(voxel * n_atoms + atom)
    voxel, atom = key // n_atoms, (key % n_atoms).int()
    weight = torch.randn(key.numel(), generator=gen)
    rowptr = torch.zeros(n_voxels + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(voxel, minlength=n_voxels), 0)
    c = torch.randn(n_atoms, generator=gen)
    y0 = torch.randn(n_voxels, generator=gen)
    y = y0.clone()
    kernels.csr_deflate(y, rowptr, atom, weight, c)
    ref = y0.double().index_add(0, voxel, -(c.double()[atom.long()] * weight.double()))
    assert torch.allclose(y.double(), ref, atol=1e-5)
    dense = torch.randn(n_voxels, generator=gen)
    atom_idx = torch.sort(torch.randint(0, n_voxels, (n_atoms, 300), generator=gen), dim=1).values
    atom_val = torch.randn(n_atoms, 300, generator=gen)
    count = torch.tensor([2], dtype=torch.int32)  # the third atom is not learned yet
    dots = kernels.atom_dots(
        dense, atom_idx, atom_val, torch.empty(n_atoms, kernels.DOT_SPLITS), count
    ).sum(1)
    expected = (atom_val * dense[atom_idx]).sum(1)
    expected[2] = 0
    assert torch.allclose(dots, expected, atol=1e-4)
    part = torch.randn(300, n_time, generator=gen)
    assert torch.allclose(kernels.column_sum(part, torch.empty(n_time)), part.sum(0), atol=1e-4)

    # The whole update (kernels, eagerly) against the torch update.
    n_time, n_voxels, r = 30, 2000, 140
    St = torch.randn(n_voxels, n_time, generator=gen)
    St /= St.norm(dim=1, keepdim=True)
    for selection in ("magnitude", "signed"):
        runs = [
            run_atoms(
                ResidentUpdater(
                    St,
                    n_atoms=4,
                    r=r,
                    selection=selection,
                    use_triton=use_triton,
                    use_graphs=False,
                ),
                4,
                3,
                n_time,
            )
            for use_triton in (True, False)
        ]
        assert_same_atoms(*runs)
    print("ok")


if __name__ == "__main__":
    main()
