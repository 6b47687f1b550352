"""Exact thresholded correlation: decide on tensor cores, confirm the close entries.

Every thresholded job (sparse FC and DFC, degree centrality, the sparsity
threshold search) only needs to know on which side of θ each correlation
falls. Tensor-core products are 9–18× faster than fp32 FMA on an H100 but
take their inputs at 11 significant bits; here they decide every entry whose
side is certain, and the close entries are recomputed one by one.

The scheme
----------
U (N×T, float32) holds the normalised series (unit rows; NaN rows for
constant series). Split each value in two TF32 numbers (:func:`split_tf32`)::

    hi = tf32(u),  lo = tf32(u − hi)

(``tf32``: round to nearest, ties away from zero, at 10 explicit mantissa
bits, as the ``cvt.rna.tf32.f32`` instruction). The approximate matrix is
r̃ = hi·hiᵀ: the product of two such numbers has at most 22 significant
bits, so every product is exact in fp32 and only the accumulation rounds (on
CUDA the fp16 tensor cores, the operands scaled by 2¹⁵ —
:mod:`connscale.fc._exact_triton`; on the CPU an fp32 GEMM of ``hi``: the
same numbers).

The bound ε (:func:`decision_margin`). For rows u, v and the real r = u·v,
with |u − hi_u| ≤ 2⁻¹¹|u| and |hi_v| ≤ (1 + 2⁻¹¹)|v|::

    u·v − hi_u·hi_v = (u − hi_u)·hi_v + u·(v − hi_v)
    |u·v − Σ hi_u hi_v| ≤ Σ (|u − hi_u||hi_v| + |u||v − hi_v|)
                        ≤ 2⁻¹¹(2 + 2⁻¹¹) Σ |u_t||v_t|
                        ≤ 2⁻¹¹(2 + 2⁻¹¹) ‖u‖‖v‖ ≤ 2⁻¹¹(2 + 2⁻¹¹) s

(Cauchy–Schwarz; s = max_i ‖u_i‖² over the rows that are not NaN, in
float64: 1 up to rounding for normalised rows). Adding T exact products in
fp32 in any order, with an error of up to 2 ulp per addition (so that tensor
cores that truncate are covered), is off by at most γ(T) Σ|hi_u||hi_v| with
γ(T) = (T − 1)·2⁻²³ / (1 − (T − 1)·2⁻²³), and Σ|hi_u||hi_v| ≤ (1 + 2⁻¹¹)² s.
So |r̃ − r| ≤ ε with::

    ε = s · [2⁻¹¹(2 + 2⁻¹¹) + γ(T)(1 + 2⁻¹¹)²]

(≈ 1.1e-3 for T = 1,200). An entry with |r̃ − θ| > ε is on the same side of θ
as r. The bound is far from tight: it needs every product rounded the worst
way and |u| ∝ |v|.

Kept values (weighted degree, sparse values) need fp32's accuracy: a *tile*
holding one (r̃ ≥ θ_min − ε) is **corrected**, r₃ = r̃ + (lo·hiᵀ + hi·loᵀ)
(3 products of TF32 numbers), with the bound ε₃ (:func:`correction_margin`)::

    ε₃ = s · [3·2⁻²²(1 + 2⁻¹⁰) + γ(T)(1 + 2⁻¹¹)² + γ(2T)·2⁻¹⁰(1 + 2⁻¹¹)² + 2⁻²³]

(u = hi + lo + d exactly with |d| ≤ 2⁻²²|u|, so r − (hi·hi + lo·hi + hi·lo)
= lo·lo + d_u·v + (hi + lo)_u·d_v; then the two sums' accumulation and the
final addition): 1.4e-4 at T = 1,200, 1.8e-5 at T = 150. Tiles that chain
each K step's three products in one accumulator before adding them to the sum
(the one-pass Triton tiles) count, instead of T and 2T, the additions each
term passes through where those are more (short series only:
:func:`connscale.fc._kernel_helpers.correction_margin_tensor`).

**Confirmation, entry by entry.** An entry within ε of a threshold (ε₃ in a
corrected tile) is not decided by the tensor cores: it is recomputed from
its two rows of U in float64 (exact products of float32 numbers; a list
and a second kernel for degree counts, in place in the compaction kernel and
the torch path here) and decided there with the fp32 path's comparison (r > θ
for degree, r ≥ θ for sparse output); its float32 value is its nearest
(:func:`rounded_as_decided` in the torch path, so that later comparisons agree). Only
those entries are recomputed, so the cost does not depend on how the
networks are ordered in the index (issue 26: every tile of a raster-ordered
mask holds one). The decisions' errors against float64 are then those of
U's own float32 rounding: two-sided. Before, a tile holding a close entry
was corrected and decided on r₃ whose tensor-core sums had been rounded
toward zero step after step, which dropped entries up to ~2e-6 above θ.

Counts (``stats``, an int64 device tensor of shape (3,), accumulated in place
without synchronising): [entries recomputed, corrected tiles, tiles];
:class:`Confirmation` reads them at the end of a run.

Where it runs (:func:`exact_method`): ``precision="exact"`` on CUDA calls the
fused Triton kernels of :mod:`connscale.fc._exact_triton`, or the torch
functions here when Triton is absent; on the CPU fp32 is as fast as anything,
so the plain fp32 path runs there (the torch functions here only when
``FORCE_ON_CPU`` is set, for tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from connscale._compute import allow_tf32
from connscale._compute.device import use_triton
from connscale.fc import _tiles
from connscale.fc._kernel_helpers import (
    correction_margin_tensor,
    decision_margin_tensor,
    split_tf32,
    tf32_round,
)
from connscale.fc.sparse import compact_tile, keep_mask

#: Run the torch exact functions on the CPU too (tests; the CPU runs fp32 otherwise).
FORCE_ON_CPU = False


def correction_margin(u: torch.Tensor) -> float:
    """Return the bound ε₃ of a corrected value r₃ of the rows of ``u``.

    ε₃ with |r₃ − u_i·u_j| ≤ ε₃ for r₃ = hi·hiᵀ + lo·hiᵀ + hi·loᵀ summed in
    fp32 (N×T, or B×N×T bounded together); see the module notes.
    """
    return float(correction_margin_tensor(u))


def decision_margin(u: torch.Tensor) -> float:
    """Return the decision margin ε of the rows of ``u``.

    ε with |r̃ − u_i·u_j| ≤ ε for every pair of rows of ``u`` (N×T, or
    B×N×T for a batch of windows, bounded together); see the module notes.
    """
    return float(decision_margin_tensor(u))


def new_stats(device: torch.device | str) -> torch.Tensor:
    """Zeroed counts [recomputed entries, corrected tiles, tiles] (int64, on ``device``)."""
    return torch.zeros(3, dtype=torch.int64, device=device)


@dataclass(frozen=True)
class Confirmation:
    """How much of a run the exact scheme had to confirm.

    Attributes
    ----------
    n_entries : int
        Correlations compared (pairs of the upper triangle, all windows).
    n_confirmed : int
        Entries recomputed from their two rows (their tensor-core value lay
        within ε, or within ε₃ once corrected, of a threshold).
    n_tiles : int
        Tiles formed.
    n_corrected_tiles : int
        Tiles recomputed with the 3×TF32 correction.
    """

    n_entries: int
    n_confirmed: int
    n_tiles: int
    n_corrected_tiles: int

    @property
    def fraction_corrected_tiles(self) -> float:
        """Return n_corrected_tiles / n_tiles (0 when no tile was formed)."""
        return self.n_corrected_tiles / self.n_tiles if self.n_tiles else 0.0

    @property
    def fraction_confirmed(self) -> float:
        """n_confirmed / n_entries (0 when nothing was compared)."""
        return self.n_confirmed / self.n_entries if self.n_entries else 0.0

    @classmethod
    def from_stats(cls, stats: torch.Tensor, n_entries: int) -> Confirmation:
        """From a ``stats`` tensor (:func:`new_stats`; one synchronisation)."""
        confirmed, corrected, tiles = (int(v) for v in stats.tolist())
        return cls(int(n_entries), confirmed, tiles, corrected)

    def as_dict(self) -> dict:
        """JSON-ready values, for plans and run logs."""
        return {
            "n_entries": self.n_entries,
            "n_confirmed": self.n_confirmed,
            "fraction_confirmed": self.fraction_confirmed,
            "n_tiles": self.n_tiles,
            "n_corrected_tiles": self.n_corrected_tiles,
            "fraction_corrected_tiles": self.fraction_corrected_tiles,
        }


# --- the choice -------------------------------------------------------------


def exact_method(u: torch.Tensor, precision: str) -> str | None:
    """Return how ``precision`` runs on ``u``: ``'triton'``, ``'torch'`` or None.

    ``'triton'``: the fused kernels of :mod:`connscale.fc._exact_triton`;
    ``'torch'``: the functions here; None: the plain path (fp32 or float64
    products, TF32 when ``'tf32'``).
    """
    if precision != "exact" or u.dtype != torch.float32:
        return None
    if u.device.type == "cpu" and not FORCE_ON_CPU:
        return None
    if use_triton(u, float32=True):
        return "triton"
    return "torch"


def products_in_tf32(precision: str, method: str | None) -> bool:
    """Return whether matrix products may use TF32.

    They may when asked for (``'tf32'``), or in the torch exact path (whose
    operands are TF32 numbers already: exact products).
    """
    return precision == "tf32" or method == "torch"


# --- torch tiles ------------------------------------------------------------


class Split:
    """U, its TF32 parts and its bounds ε and ε₃, made once per U (N×T or B×N×T)."""

    def __init__(self, u: torch.Tensor) -> None:
        self.u = u
        self.hi, self.lo = split_tf32(u)
        self.margin = decision_margin(u)
        self.correction_margin = correction_margin(u)


def _strict_upper_(mask: torch.Tensor) -> torch.Tensor:
    """Limit a row block's ``mask`` to the strict upper triangle, in place.

    The row block is [..., R, N − r0]; only its first R columns hold entries
    on or below the diagonal.
    """
    rows = mask.shape[-2]
    mask[..., :rows] &= torch.ones((rows, rows), dtype=torch.bool, device=mask.device).triu_(1)
    return mask


def exact_block(
    split: Split,
    r0: int,
    r1: int,
    *,
    thresholds: list[float],
    absolute: bool,
    lowest: float | None,
    stats: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compute a row block of U·Uᵀ decided by the exact scheme.

    Rows [r0, r1) against columns [r0, N) of U·Uᵀ (signed), decided on r̃,
    corrected where the scheme asks and the entries close to a threshold
    recomputed in float64 (see the module notes).

    ``thresholds``: the θ whose close entries are confirmed; ``lowest``: keep
    values from θ_min − ε on exact (None when only decisions are needed).
    With a batch ``split`` (B×N×T) the block is B×R×(N − r0) and each window's
    block is a tile. ``stats`` is updated in place.
    """
    hi, lo = split.hi, split.lo
    rows_hi, cols_hi = hi[..., r0:r1, :], hi[..., r0:, :].transpose(-1, -2)
    tile = torch.matmul(rows_hi, cols_hi, out=out)
    needs = _near(tile, thresholds, split.margin, absolute)
    if lowest is not None:
        needs |= _strict_upper_((tile.abs() if absolute else tile) >= lowest - split.margin)
    flat = needs.reshape(-1, needs.shape[-2] * needs.shape[-1])
    corrected = torch.nonzero(flat.any(1)).flatten().tolist()  # synchronises
    stats[1] += len(corrected)
    stats[2] += flat.shape[0]
    del needs, flat
    if tile.dim() == 2:
        if corrected:
            tile.addmm_(lo[r0:r1], hi[r0:].T).addmm_(hi[r0:r1], lo[r0:].T)
            stats[0] += _confirm_entries(split, tile, r0, thresholds, absolute)
        return tile
    for b in corrected:
        tile[b].addmm_(lo[b, r0:r1], hi[b, r0:].T).addmm_(hi[b, r0:r1], lo[b, r0:].T)
    if corrected:
        stats[0] += _confirm_entries(split, tile, r0, thresholds, absolute)
    return tile


def _near(tile: torch.Tensor, thresholds: list[float], margin: float, absolute: bool):
    """Return the strict-upper entries of a row block within ``margin`` of a threshold."""
    values = tile.abs() if absolute else tile
    near = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    for theta in thresholds:
        near |= (values - theta).abs_() <= margin  # NaN compares False
    return _strict_upper_(near)


def _confirm_entries(
    split: Split, tile: torch.Tensor, r0: int, thresholds: list[float], absolute: bool
) -> int:
    """Recompute in float64 the entries of a corrected row block within ε₃ of a threshold.

    Their value in ``tile`` becomes U[i]·U[j] summed in float64 (exact
    products of the float32 rows), rounded to the tile's dtype, so that they
    are decided as the fp32 path decides them. Entries of uncorrected windows
    are farther than ε from every threshold and are never within ε₃. Returns
    their number. Their float32 value is :func:`rounded_as_decided`.
    """
    found = torch.nonzero(_near(tile, thresholds, split.correction_margin, absolute))
    if not found.numel():
        return 0
    rows, cols = found[:, -2] + r0, found[:, -1] + r0
    if tile.dim() == 2:
        exact = exact_products(split.u, rows, cols)
    else:  # an entry of window b
        windows = found[:, 0]
        exact = (split.u[windows, rows].double() * split.u[windows, cols].double()).sum(-1)
    tile[tuple(found.T)] = rounded_as_decided(exact, thresholds, absolute=absolute)
    return found.shape[0]


def exact_products(u: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Return U[rows[k]]·U[cols[k]] for every k in float64 (exact products of the float32 rows).

    By chunks of entries, so that the gathered rows stay small.
    """
    chunk = max(1, (1 << 24) // max(u.shape[-1], 1))
    out = torch.empty(rows.numel(), dtype=torch.float64, device=u.device)
    for start in range(0, rows.numel(), chunk):
        part = slice(start, start + chunk)
        out[part] = (u[rows[part]].double() * u[cols[part]].double()).sum(-1)
    return out


def rounded_as_decided(exact: torch.Tensor, thresholds: list[float], *, absolute: bool):
    """Return float64 ``exact`` as float32 values that compare with every θ as ``exact`` does.

    Rounded to nearest, then moved to the float32 neighbour of θ where the
    rounding crossed it: a value above θ (in float64) stays above it, one
    below stays below, one equal becomes θ. So ``>`` and ``>=`` decide on the
    float32 value as on the float64 one.
    """
    magnitude = exact.abs() if absolute else exact
    value = magnitude.float()
    for theta in thresholds:
        t32 = torch.tensor(theta, dtype=torch.float32)
        t = float(t32)
        value = torch.where(
            magnitude > t, torch.maximum(value, torch.nextafter(t32, t32 + 1)), value
        )
        value = torch.where(
            magnitude < t, torch.minimum(value, torch.nextafter(t32, t32 - 1)), value
        )
        value = torch.where(magnitude == t, t32, value)
    return torch.where(exact < 0, -value, value) if absolute else value


def degree_exact_torch(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    block_rows: int,
    stats: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Count degrees (r > θ) by the exact scheme with torch, by row blocks.

    :func:`connscale.fc._tiles.degree_torch` (r > θ) decided by the exact
    scheme, by row blocks (float32 ``u``).
    """
    split = Split(u)
    theta = [float(t) for t in thresholds.tolist()]
    n = u.shape[0]
    counts = torch.zeros((len(theta), n), dtype=torch.int64, device=u.device)
    sums = torch.zeros((len(theta), n), dtype=torch.float64, device=u.device) if weighted else None
    with allow_tf32(True):
        for r0, r1 in _tiles._blocks(n, block_rows):
            tile = exact_block(
                split,
                r0,
                r1,
                thresholds=theta,
                absolute=absolute,
                lowest=min(theta) if weighted else None,
                stats=stats,
            )
            if absolute:
                tile.abs_()
            _tiles.accumulate_degree(tile, r0, r1, theta, counts, sums)
            del tile
    return counts, sums


def compact_exact_torch(
    u: torch.Tensor,
    threshold: float,
    *,
    absolute: bool,
    block_rows: int,
    stats: torch.Tensor,
    upper: float = math.inf,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the kept upper-triangle entries decided by the exact scheme with torch.

    The strict upper triangle's threshold <= r < upper (|r| with
    ``absolute``) decided by the exact scheme: kept values (signed), int32
    columns and per-row counts, as :func:`connscale.fc.sparse.compact_tile`.
    """
    split = Split(u)
    n = u.shape[0]
    theta = [threshold] + ([upper] if math.isfinite(upper) else [])
    values, columns, counts = [], [], []
    with allow_tf32(True):
        for r0, r1 in _tiles._blocks(n, block_rows):
            tile = exact_block(
                split, r0, r1, thresholds=theta, absolute=absolute, lowest=threshold, stats=stats
            )
            keep = keep_mask(tile, threshold, absolute=absolute)
            if math.isfinite(upper):
                keep &= (tile.abs() if absolute else tile) < upper
            kept = compact_tile(tile, keep, r0)
            for part, found in zip((values, columns, counts), kept):
                part.append(found)
            del tile, keep
    return torch.cat(values), torch.cat(columns), torch.cat(counts)


# --- dispatch ---------------------------------------------------------------


def degree_exact(
    u: torch.Tensor,
    thresholds: torch.Tensor,
    *,
    absolute: bool,
    weighted: bool,
    block_rows: int,
    stats: torch.Tensor,
    method: str,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Count degrees (and sums) of r > θ by the exact scheme on ``method``.

    ``method`` as :func:`exact_method` gives it. Returns (K, N) int64 counts
    and (K, N) float64 sums or None.
    """
    if method == "triton":
        from connscale.fc._exact_triton import degree_exact_triton

        return degree_exact_triton(
            u,
            thresholds.to(u.device),
            absolute=absolute,
            weighted=weighted,
            margin=decision_margin(u),
            stats=stats,
        )
    return degree_exact_torch(
        u,
        thresholds.to(u.device),
        absolute=absolute,
        weighted=weighted,
        block_rows=block_rows,
        stats=stats,
    )


def compact_exact(
    u: torch.Tensor,
    threshold: float,
    *,
    absolute: bool,
    block_rows: int,
    stats: torch.Tensor,
    method: str,
    capacity: int,
    max_capacity: int | None = None,
    upper: float = math.inf,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Compact the kept upper-triangle entries by the exact scheme, on the device.

    Returns the kept values, int32 columns and int64 row counts of
    threshold <= r < upper (|r|).

    With ``method='triton'`` the buffers hold ``capacity`` entries first and
    are grown to the count on overflow (one synchronisation per try); None
    when more than ``max_capacity`` entries would be needed (the caller then
    runs row blocks with :func:`compact_exact_torch`).
    """
    if method != "triton":
        return compact_exact_torch(
            u, threshold, absolute=absolute, block_rows=block_rows, stats=stats, upper=upper
        )
    from connscale.fc._exact_triton import compact_exact_triton

    n = u.shape[0]
    capacity = max(1, capacity)
    while True:
        tried = stats.clone()
        values = torch.empty(capacity, dtype=u.dtype, device=u.device)
        columns = torch.empty(capacity, dtype=torch.int32, device=u.device)
        staged_values = torch.empty_like(values)
        staged_columns = torch.empty_like(columns)
        row_counts = torch.zeros(n, dtype=torch.int64, device=u.device)
        cursor = compact_exact_triton(
            u,
            threshold,
            absolute=absolute,
            values=values,
            columns=columns,
            row_counts=row_counts,
            staged_values=staged_values,
            staged_columns=staged_columns,
            stats=stats,
            upper=upper,
        )
        nnz = int(cursor)
        if nnz <= capacity:
            return values[:nnz], columns[:nnz], row_counts
        stats.copy_(tried)  # the retry counts again
        if max_capacity is not None and nnz > max_capacity:
            return None
        capacity = nnz


def top_threshold_exact(
    u: torch.Tensor,
    n_kept: list[int],
    *,
    absolute: bool,
    block_rows: int,
    stats: torch.Tensor,
    method: str,
    use_triton_histogram: bool = False,
) -> tuple[list[float], int]:
    """Return the k-th largest upper-triangle r for each k, by the exact scheme.

    :func:`connscale.fc._tiles.top_threshold` by the exact scheme: for each
    k, the k-th largest upper-triangle r (|r|) as the exact path gives it, and
    the number of passes over the matrix that were decided by the scheme
    (counted in ``stats``; the histogram pass is not).

    The histogram is of r̃ (within ε of r). The k-th largest r̃ falls in bin b;
    so the k-th largest r lies in [c_lo, c_hi) = [lower(b) − ε, upper(b) + ε):
    the entries r >= c_hi are counted (decided, corrected near c_hi) and those
    in [c_lo, c_hi) collected (corrected), and the k-th value selected there.
    """
    margin = decision_margin(u)
    hi = tf32_round(u)
    n_bins = _tiles.HISTOGRAM_BINS
    with allow_tf32(True):
        if use_triton_histogram:
            hist = _tiles.histogram_triton(hi, absolute=absolute, block_rows=block_rows)
        else:
            hist = _tiles.histogram_torch(hi, absolute=absolute, block_rows=block_rows)
    del hi
    above = torch.flip(torch.cumsum(torch.flip(hist, [0]), 0), [0])  # count in bins >= b
    low, width = (0.0, 1.0) if absolute else (-1.0, 2.0)
    edge = width / n_bins
    found: dict[int, tuple[int, torch.Tensor]] = {}
    result = []
    n_passes = 0
    for k in n_kept:
        b = int(torch.nonzero(above >= k).max())
        if b not in found:
            c_lo = -math.inf if b == 0 else low + b * edge - margin
            c_hi = math.inf if b == n_bins - 1 else low + (b + 1) * edge + margin
            found[b] = _bracket(
                u, hist, c_lo, c_hi, absolute, block_rows, stats, method, margin, low, edge
            )
            n_passes += 1 + math.isfinite(c_hi)
        higher, values = found[b]
        if not higher < k <= higher + values.numel():
            raise RuntimeError(
                f"The exact sparsity threshold search lost the {k}-th value (bin {b}: "
                f"{higher} above, {values.numel()} in the bin); use precision='fp32'."
            )
        result.append(float(values[k - higher - 1]))
    return result, n_passes


def _bracket(u, hist, c_lo, c_hi, absolute, block_rows, stats, method, margin, low, edge):
    """Exact count of r >= c_hi and the sorted (descending) exact r in [c_lo, c_hi)."""
    higher = 0
    if math.isfinite(c_hi):
        cut = torch.tensor([_tiles.below(c_hi, u.dtype)], dtype=u.dtype)
        counts, _ = degree_exact(
            u,
            cut,
            absolute=absolute,
            weighted=False,
            block_rows=block_rows,
            stats=stats,
            method=method,
        )
        higher = int(counts.sum()) // 2
    # Capacity: the approximate values within ε of [c_lo, c_hi), and a bin more each side.
    n_bins = hist.numel()
    first = max(0, math.floor((max(c_lo, low) - margin - low) / edge) - 1)
    last = min(n_bins - 1, math.floor((min(c_hi, low + n_bins * edge) + margin - low) / edge) + 1)
    capacity = int(hist[first : last + 1].sum())
    values, columns, row_counts = compact_exact(
        u,
        c_lo if math.isfinite(c_lo) else -math.inf,
        absolute=absolute,
        block_rows=block_rows,
        stats=stats,
        method=method,
        capacity=capacity,
        upper=c_hi,
    )
    # The k-th value is returned as a threshold whose degree is then counted:
    # take the collected entries' float64 values, as the counts decide close ones.
    rows = torch.repeat_interleave(torch.arange(u.shape[0], device=u.device), row_counts)
    values = exact_products(u, rows, columns.long())
    if absolute:
        values = values.abs()
    return higher, torch.sort(values, descending=True).values
