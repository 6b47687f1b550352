"""connscale._compute.gemm: A Bᵀ through torch's or numpy's BLAS, equal to numpy float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from connscale._compute.gemm import CPU_GEMM_BACKENDS, cpu_gemm_backend, gemm_nt


@pytest.mark.parametrize("backend", CPU_GEMM_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gemm_nt_equals_numpy_float64(backend, dtype):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((70, 33))).to(dtype)
    a, b = x[5:20], x[5:]
    wide = torch.full((15, 80), 7.0, dtype=dtype)  # a band of a wider buffer: row stride 80
    out = gemm_nt(a, b, wide[:, 15:], backend=backend)
    expected = a.double().numpy() @ b.double().numpy().T
    atol = 1e-4 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(out.double().numpy(), expected, atol=atol)
    assert (wide[:, :15] == 7.0).all()  # nothing written left of the band


@pytest.mark.parametrize("backend", CPU_GEMM_BACKENDS)
def test_gemm_nt_takes_views_numpy_cannot_as_they_are(backend):
    """A view of non-unit strides in both dimensions (numpy would not call BLAS on it)."""
    rng = np.random.default_rng(1)
    a = torch.from_numpy(rng.standard_normal((12, 20)))[:, ::2]
    b = torch.from_numpy(rng.standard_normal((9, 10)))
    out = torch.empty(12, 9, dtype=torch.float64)
    gemm_nt(a, b, out, backend=backend)
    np.testing.assert_allclose(out.numpy(), a.numpy() @ b.numpy().T, atol=1e-12)


def test_numpy_backend_follows_torch_threads(monkeypatch):
    """numpy's BLAS runs on torch's thread count during the call, and is restored after."""
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before = blas_threads()
    seen = []
    matmul = np.matmul

    def spying(*args, **kwargs):
        seen.append(blas_threads())
        return matmul(*args, **kwargs)

    monkeypatch.setattr(np, "matmul", spying)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.randn(4, 3)
        gemm_nt(a, a, torch.empty(4, 4), backend="numpy")
    finally:
        torch.set_num_threads(saved)
    assert len(seen) == 1 and seen[0] and all(n == 1 for n in seen[0])
    assert blas_threads() == before


def test_cpu_backend_is_one_rule_per_process():
    assert cpu_gemm_backend() in CPU_GEMM_BACKENDS
    assert cpu_gemm_backend() == cpu_gemm_backend()
    with pytest.raises(ValueError, match="backend must be one of"):
        gemm_nt(torch.ones(2, 2), torch.ones(2, 2), torch.empty(2, 2), backend="mkl")
