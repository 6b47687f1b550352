"""Exact decisions from TF32 products (provisional: superseded by the exact-api branch)."""

from __future__ import annotations

import torch


def tf32_round(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to the nearest TF32 number (10 explicit mantissa bits)."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def split_tf32(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """hi = tf32(u), lo = tf32(u - hi)."""
    hi = tf32_round(u)
    return hi, tf32_round(u - hi)


def margin_factor(n_timepoints: int) -> float:
    """ε / s for series of ``n_timepoints``."""
    g = (n_timepoints - 1) * 2.0**-23
    gamma = g / (1 - g)
    return 2.0**-11 * (2 + 2.0**-11) + gamma * (1 + 2.0**-11) ** 2


def decision_margin_tensor(u: torch.Tensor) -> torch.Tensor:
    """ε as a float64 0-d tensor on ``u``'s device (no synchronisation)."""
    norms = torch.nan_to_num(u.double().square().sum(1), nan=0.0)
    return norms.max() * margin_factor(u.shape[1])


def decision_margin(u: torch.Tensor) -> float:
    """ε of the TF32 decision for unit rows of ``u`` (N, T)."""
    return float(decision_margin_tensor(u))
