"""Resolve ``device`` arguments to torch devices and choose Triton or pure-torch kernels.

:func:`use_triton` chooses between the Triton kernels and their pure-torch
fallbacks. ``dtype`` arguments
are resolved by :func:`connscale._validation.resolve_dtype`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import torch

try:  # pragma: no cover - depends on the machine
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    HAS_TRITON = True
except ImportError:  # pragma: no cover - CPU machines without triton
    HAS_TRITON = False


def use_triton(
    where: torch.Tensor | torch.device, *, float32: bool = False, interpreted: bool = True
) -> bool:
    """Return whether a Triton kernel, rather than its pure-torch fallback, runs on ``where``.

    This is the one place where connscale chooses.

    Parameters
    ----------
    where : torch.Tensor or torch.device
        The tensor (or device) the kernel would run on.
    float32 : bool, default=False
        The kernel takes float32 only (``where`` must then be a tensor).
    interpreted : bool, default=True
        The kernel may also run on the CPU under Triton's interpreter
        (``TRITON_INTERPRET=1``, for the CPU tests of the kernels).

    Returns
    -------
    bool
        True when Triton imports and ``where`` is on CUDA (or on the CPU
        under the interpreter), in float32 when asked.
    """
    if not HAS_TRITON:
        return False
    device = where if isinstance(where, torch.device) else where.device
    if float32 and where.dtype != torch.float32:
        return False
    if device.type == "cuda":
        return True
    return interpreted and os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """Turn a user's ``device`` argument into a :class:`torch.device`.

    Parameters
    ----------
    device : {'auto', 'cpu', 'cuda', 'cuda:N'} or torch.device, default='auto'
        ``'auto'`` (or None) picks the current CUDA device when one is present,
        the CPU otherwise.

    Returns
    -------
    torch.device
    """
    if device is None or (isinstance(device, str) and device.lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"'device' must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got {device!r}."
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} was requested but CUDA is not available "
                "(no GPU, or a CPU-only build of torch). Use device='cpu' or "
                "'auto'."
            )
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} was requested but only "
                f"{torch.cuda.device_count()} CUDA device(s) exist."
            )
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise ValueError(f"'device' must be 'auto', 'cpu' or a CUDA device; got {device!r}.")
    return dev


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """Return the numpy dtype matching a torch floating dtype."""
    return np.dtype("float64" if dtype == torch.float64 else "float32")


@contextlib.contextmanager
def allow_tf32(enabled: bool = False) -> Iterator[None]:
    """Set TF32 matmuls on or off for the duration of a block.

    connscale keeps TF32 off unless the user asks for it: TF32 rounds inputs
    to 10 mantissa bits, which can flip values that sit near a threshold.
    """
    matmul = torch.backends.cuda.matmul
    cudnn = torch.backends.cudnn
    old = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32 = enabled
    cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = old


def start_device(device: str | torch.device | None = "auto") -> None:
    """Start ``device`` as a first computation would: a GPU's context and its BLAS.

    A no-op on the CPU. What a process computing a batch of runs calls while
    their first reads are under way, so that its first run does not pay it
    (~0.7 s on an H100 host).
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        ones = torch.ones((8, 8), device=dev)
        (ones @ ones).sum().item()


def synchronize(device: torch.device) -> None:
    """Wait for all work on ``device`` (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
