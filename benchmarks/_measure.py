"""Measurements shared by the benchmark scripts: the physical ceilings that
floors are computed from."""

from __future__ import annotations

import time

import torch


def copy_bandwidth(direction: str = "d2h", nbytes: int = 1 << 30, device="cuda") -> float:
    """Bytes per second of a pinned host<->device copy (``'d2h'`` or ``'h2d'``)."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src, dst = (dev, host) if direction == "d2h" else (host, dev)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return 3 * nbytes / (time.perf_counter() - start)
