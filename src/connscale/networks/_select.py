"""Exact top-r selection for r1DL, with a deterministic tie rule.

The r entries of ``y`` kept by an update are those with the largest *order
key*: ``|y|`` (``selection='magnitude'``) or ``y`` (``'signed'``), compared
through the integer image of the float's bits (an order-preserving map, so
the threshold is exact and ties are exact ties). Entries strictly above the
r-th largest key are all kept; of those equal to it, the lowest voxel
indices are kept. Indices come back sorted ascending.

:func:`top_r_sorted` runs the Triton radix select of
:mod:`connscale.networks._triton_r1dl` on CUDA (float32) and the pure-torch
:func:`top_r_sorted_torch` elsewhere; both give the same set.
"""

from __future__ import annotations

import numpy as np
import torch

from connscale.networks import _triton_r1dl

_INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64}


def order_keys(y: torch.Tensor, selection: str) -> torch.Tensor:
    """Signed integers ordered as ``|y|`` (magnitude) or ``y`` (signed).

    For IEEE floats read as two's-complement integers, non-negative values
    already sort correctly; negative ones sort backwards, so their lower
    bits are flipped. The magnitude key clears the sign bit.
    """
    int_dtype = _INT_OF[y.dtype]
    bits = y.contiguous().view(int_dtype)
    low = torch.iinfo(int_dtype).max  # all bits but the sign bit
    if selection == "magnitude":
        return bits & low
    return bits ^ ((bits >> (bits.element_size() * 8 - 1)) & low)


def top_r_sorted_torch(
    y: torch.Tensor, r: int, selection: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-r (see the module docstring) in plain torch: indices, values."""
    n = y.numel()
    if r >= n:
        idx = torch.arange(n, device=y.device)
    else:
        keys = order_keys(y, selection)
        if keys.device.type == "cpu":  # introselect: far faster than kthvalue here
            k = keys.numpy()
            threshold = np.partition(k, n - r)[n - r]
            above = np.flatnonzero(k > threshold)
            ties = np.flatnonzero(k == threshold)[: r - above.size]
            idx = torch.from_numpy(np.sort(np.concatenate([above, ties])))
        else:
            threshold = torch.kthvalue(keys, n - r + 1).values
            above = keys > threshold
            ties = keys == threshold
            need = r - above.sum()
            take = above | (ties & (torch.cumsum(ties, 0) <= need))
            idx = torch.nonzero(take).ravel()
    values = y[idx]
    if selection == "signed":
        values = values.clamp(min=0)
    return idx, values


def top_r_sorted(
    y: torch.Tensor,
    r: int,
    selection: str,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-r of ``y``: (indices ascending, values).

    On CUDA with float32 and Triton available the selection runs as a
    radix select on the device with no host synchronisation, writing into
    ``out=(idx, values)`` when given (int64 (r,), y.dtype (r,)).
    """
    if r < y.numel() and _triton_r1dl.usable(y):
        return _triton_r1dl.radix_top_r(y, r, selection, out=out)
    idx, values = top_r_sorted_torch(y, r, selection)
    if out is not None:
        out[0].copy_(idx)
        out[1].copy_(values)
        return out
    return idx, values
