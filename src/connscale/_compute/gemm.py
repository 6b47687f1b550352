"""Matrix products A Bᵀ on the CPU through the faster of torch's and numpy's BLAS.

torch's CPU wheels link Intel's MKL. On other x86 CPUs MKL's single-precision
GEMM runs well below the machine's rate: on the development machine (2 cores
of an AMD EPYC) torch.mm reaches 45-70 GFLOP/s where numpy's OpenBLAS, on
the same cores and threads, reaches about 1.5 times that. So, on the CPU,
:func:`gemm_nt` calls numpy's BLAS through views of the same memory (no
copy) when the rule below picks it, and torch's otherwise; CUDA tensors always
go to torch.

The choice is a documented rule, made once per process
(:func:`cpu_gemm_backend`), not a timing: on a machine shared by other
processes a calibration of a few milliseconds measures the load, not the
library (2-14 GFLOP/s for either on a busy 2-core machine). The rule: numpy's
BLAS when torch's is MKL, numpy's is not, and the CPU is not Intel's;
torch's otherwise. The choice never depends on the data, and numpy's BLAS
runs on as many threads as torch's (``torch.get_num_threads()``) during the
call.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

#: The CPU GEMM libraries :func:`gemm_nt` may call.
CPU_GEMM_BACKENDS = ("torch", "numpy")


def _cpu_vendor() -> str:
    """Return the CPU's vendor string from ``/proc/cpuinfo`` ('' where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _numpy_blas_name() -> str:
    """Return the BLAS numpy was built with ('scipy-openblas', 'mkl', ...; '' when unknown)."""
    try:
        config = np.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"]["name"]).lower()
    except (TypeError, KeyError, ValueError):  # numpy < 1.25: no dicts
        return ""


@functools.cache
def cpu_gemm_backend() -> str:
    """Return the library of the CPU's products: ``'numpy'`` or ``'torch'``.

    ``'numpy'`` when torch's BLAS is MKL, numpy's BLAS is known and not MKL,
    and the CPU is not an Intel one (module docstring); ``'torch'`` otherwise.
    Decided once per process.
    """
    numpy_blas = _numpy_blas_name()
    use_numpy = (
        torch.backends.mkl.is_available()
        and numpy_blas != ""
        and "mkl" not in numpy_blas
        and _cpu_vendor() not in ("", "GenuineIntel")
    )
    return "numpy" if use_numpy else "torch"


@functools.cache
def _threadpools():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _blas_layout(t: torch.Tensor) -> bool:
    """Whether numpy hands this 2-D view to BLAS as it is (one unit stride)."""
    rows, cols = t.shape
    row_stride, col_stride = t.stride()
    return (col_stride == 1 and row_stride >= max(cols, 1)) or (
        row_stride == 1 and col_stride >= max(rows, 1)
    )


def gemm_nt(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, backend: str | None = None
) -> torch.Tensor:
    """Compute ``out = a @ b.T`` in place.

    Parameters
    ----------
    a : torch.Tensor of shape (m, k)
    b : torch.Tensor of shape (n, k)
    out : torch.Tensor of shape (m, n)
        Same dtype and device as ``a`` and ``b``; may be a view with a row
        stride larger than ``n`` (a band of a wider buffer).
    backend : {'torch', 'numpy'} or None, default=None
        The CPU library; None: :func:`cpu_gemm_backend`. CUDA tensors, other
        dtypes than float32/float64, and views numpy's BLAS cannot take as
        they are, always use torch.

    Returns
    -------
    torch.Tensor
        ``out``.
    """
    backend = cpu_gemm_backend() if backend is None else backend
    if backend not in CPU_GEMM_BACKENDS:
        raise ValueError(f"backend must be one of {CPU_GEMM_BACKENDS}; got {backend!r}.")
    numpy_path = (
        backend == "numpy"
        and out.device.type == "cpu"
        and out.dtype in (torch.float32, torch.float64)
        and a.dtype == b.dtype == out.dtype
        and all(_blas_layout(t) for t in (a, b, out))
    )
    if not numpy_path:
        return torch.mm(a, b.T, out=out)
    with _threadpools().limit(limits=torch.get_num_threads(), user_api="blas"):
        np.matmul(a.numpy(), b.numpy().T, out=out.numpy())
    return out
