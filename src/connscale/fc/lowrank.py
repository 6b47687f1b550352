"""Compressed forms of a window's correlation matrix S = U Uᵀ.

U is the (N, w) matrix of the window's normalised series (unit-norm, centred
rows), so S has rank at most w − 1 and every product with S can go through
U without forming the N×N matrix: S Ω = U (Uᵀ Ω) costs 2·N·w·l flops
instead of 2·N²·l.

* ``lowrank`` (GPU-DFC Algorithm 4, Halko et al.'s randomized range
  finder): Ω Gaussian N×l, Y = S Ω, (optional power iterations
  Y ← S (Sᵀ Q)), Q, R = qr(Y), B = Qᵀ S; stores Q (N×l) and B (l×N).
  ``method="svd"`` stores the exact truncated eigendecomposition in the same
  (Q, B) form.
* ``factor``: stores F (N×l) with S ≈ F Fᵀ: F = U exactly (l = w), or
  F = U V_l = P_l Σ_l from the thin SVD U = P Σ Vᵀ (V_l from the small
  w × w Gram matrix) — the optimal rank-l
  approximation of S (Eckart–Young), in N·l numbers instead of 2·N·l.

All functions work on batches (leading dimension B). Rows of constant series
must be zeroed before the call; callers put NaN back into the stored form.
"""

from __future__ import annotations

import torch


def randomized_qb(
    u: torch.Tensor, omega: torch.Tensor, *, power_iterations: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 4 on S = U Uᵀ for a batch of windows.

    Parameters
    ----------
    u : torch.Tensor of shape (B, N, w)
        Normalised windows (constant rows zeroed).
    omega : torch.Tensor of shape (B, N, l)
        Gaussian test matrices (one per window, from the caller's seeded
        generators so that each window's draw does not depend on batching).
    power_iterations : int, default=0
        Subspace iterations (each re-orthonormalised), for slowly decaying
        spectra.

    Returns
    -------
    q : torch.Tensor of shape (B, N, l), orthonormal columns
    b : torch.Tensor of shape (B, l, N), b = qᵀ S
    """
    ut = u.transpose(1, 2)
    y = torch.bmm(u, torch.bmm(ut, omega))
    for _ in range(power_iterations):
        q, _ = torch.linalg.qr(y)
        y = torch.bmm(u, torch.bmm(ut, q))
    q, _ = torch.linalg.qr(y)
    b = torch.bmm(torch.bmm(q.transpose(1, 2), u), ut)
    return q, b


def top_right_vectors(u: torch.Tensor, rank: int) -> torch.Tensor:
    """Return the ``rank`` leading right singular vectors V_l of each U (B, N, w).

    From the eigendecomposition of the small Gram matrix UᵀU (w × w),
    accumulated in float64: far cheaper than an SVD of the tall U, and
    U V_l = P_l Σ_l needs no division by small singular values.
    """
    u64 = u.to(torch.float64)
    gram = torch.bmm(u64.transpose(1, 2), u64)
    _, vectors = torch.linalg.eigh(gram)  # ascending eigenvalues
    return vectors[:, :, -rank:].flip(-1).to(u.dtype)


def svd_qb(u: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact truncated form of S = U Uᵀ as (Q, B) with Q B = F_l F_lᵀ.

    Parameters
    ----------
    u : torch.Tensor of shape (B, N, w)
    rank : int
        l; columns beyond w are zero (S has rank <= w − 1).

    Returns
    -------
    q : torch.Tensor of shape (B, N, l), orthonormal columns (zero padding)
    b : torch.Tensor of shape (B, l, N)
    """
    keep = min(rank, u.shape[-1])
    factor = truncated_factor(u, keep)
    q_keep, _ = torch.linalg.qr(factor)
    b_keep = torch.bmm(torch.bmm(q_keep.transpose(1, 2), factor), factor.transpose(1, 2))
    if keep == rank:
        return q_keep, b_keep
    q = u.new_zeros((u.shape[0], u.shape[1], rank))
    b = u.new_zeros((u.shape[0], rank, u.shape[1]))
    q[:, :, :keep] = q_keep
    b[:, :keep] = b_keep
    return q, b


def truncated_factor(u: torch.Tensor, rank: int | None) -> torch.Tensor:
    """F with S ≈ F Fᵀ: U itself (rank None or >= w) or U V_l = P_l Σ_l.

    Parameters
    ----------
    u : torch.Tensor of shape (B, N, w)
    rank : int or None

    Returns
    -------
    torch.Tensor of shape (B, N, min(rank, w)) (or (B, N, w) for None)
    """
    if rank is None or rank >= u.shape[-1]:
        return u.contiguous()
    return torch.bmm(u, top_right_vectors(u, rank))


def reconstruction_mae(
    u: torch.Tensor, left: torch.Tensor, right: torch.Tensor, *, tile_rows: int
) -> torch.Tensor:
    """Mean absolute error of L·R against S = U Uᵀ over off-diagonal pairs.

    Computed in row tiles (never N×N at once), accumulated in float64;
    rows and columns of constant series (zero rows of ``u``; NaN in L or R)
    are left out.

    Parameters
    ----------
    u : torch.Tensor of shape (B, N, w)
        Normalised windows (constant rows zeroed).
    left : torch.Tensor of shape (B, N, l)
    right : torch.Tensor of shape (B, l, N)
    tile_rows : int

    Returns
    -------
    torch.Tensor of shape (B,), float64
    """
    n_batch, n, _ = u.shape
    valid = u.abs().sum(dim=2) > 0  # (B, N)
    total = torch.zeros(n_batch, dtype=torch.float64, device=u.device)
    left = torch.nan_to_num(left, nan=0.0)
    right = torch.nan_to_num(right, nan=0.0)
    ut = u.transpose(1, 2)
    for r0 in range(0, n, tile_rows):
        r1 = min(n, r0 + tile_rows)
        # approx - exact in one temporary: baddbmm(L_t R, U_t, Uᵀ, alpha=-1)
        diff = torch.baddbmm(torch.bmm(left[:, r0:r1], right), u[:, r0:r1], ut, alpha=-1)
        diff.abs_()
        pair_ok = valid[:, r0:r1, None] & valid[:, None, :]
        local = torch.arange(r1 - r0, device=u.device)
        pair_ok[:, local, local + r0] = False  # the diagonal
        diff.masked_fill_(~pair_ok, 0)
        total += diff.sum(dim=(1, 2), dtype=torch.float64)
        del diff, pair_ok
    n_valid = valid.sum(dim=1).to(torch.float64)
    count = n_valid * (n_valid - 1)
    return torch.where(count > 0, total / count.clamp_min(1), torch.nan)
