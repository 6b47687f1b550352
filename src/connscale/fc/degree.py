"""The degree kernels of all-pairs correlation, chosen in one place.

Degree centrality (:func:`connscale.degree_centrality`) and its sparsity
search form every pair of the upper triangle of R = U·Uᵀ once and reduce it
where it is formed. Several kernels do that (:mod:`connscale.fc._tiles`,
:mod:`connscale.fc._exact`, :mod:`connscale.fc._exact_triton`):
:func:`degree_kernel` chooses one for a call, from the precision, the device,
Triton and the memory budget, and sizes its row blocks;
:func:`degree_counts` and :func:`top_threshold` run the chosen one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from connscale._compute.device import use_triton
from connscale.fc import _exact, _tiles
from connscale.fc._tiles import below

if TYPE_CHECKING:
    from tqdm import tqdm

    from connscale._compute.memory import MemoryPlanner

__all__ = [
    "DegreeKernel",
    "below",
    "degree_counts",
    "degree_kernel",
    "top_threshold",
]


@dataclass(frozen=True)
class DegreeKernel:
    """The kernel of one call's degree passes (:func:`degree_kernel`).

    Attributes
    ----------
    exact : {'triton', 'torch'} or None
        The exact scheme's path (:func:`connscale.fc._exact.exact_method`),
        or None for plain products.
    triton : bool
        Whether Triton kernels run (else torch row blocks).
    block_rows : int
        Rows per block of the row-block passes.
    stats : torch.Tensor or None
        The exact scheme's confirmation counts, accumulated on the device.
    """

    exact: str | None
    triton: bool
    block_rows: int
    stats: torch.Tensor | None

    @property
    def method(self) -> str:
        """The kernel's name, for logs.

        One of ``'exact-triton'``, ``'exact-torch'``, ``'triton-fused'``,
        ``'triton-blocks'`` or ``'torch'``.
        """
        if self.exact:
            return f"exact-{self.exact}"
        return f"triton-{_tiles.CUDA_METHOD}" if self.triton else "torch"

    def confirmation(self, n_entries: int) -> dict | None:
        """Return the exact scheme's confirmation counts, or None.

        The counts are over ``n_entries`` compared entries, as
        :meth:`connscale.fc._exact.Confirmation.as_dict` gives them.
        """
        if self.stats is None:
            return None
        return _exact.Confirmation.from_stats(self.stats, n_entries).as_dict()


def degree_kernel(
    u: torch.Tensor, n_maps: int, planner: MemoryPlanner, *, precision: str
) -> DegreeKernel:
    """Choose the degree kernel of a call and size its row blocks.

    Counted into ``planner`` (which holds U already): the ``n_maps`` count and
    sum accumulators, U's TF32 parts on the exact scheme's torch path, and
    the row blocks. Triton runs on CUDA in float32 when the budget is at
    least twice what stays resident.

    Parameters
    ----------
    u : torch.Tensor of shape (N, T)
        The normalised series.
    n_maps : int
        Thresholds (or sparsities) computed in one pass.
    planner : MemoryPlanner
        The call's planner.
    precision : {'exact', 'fp32', 'tf32'}

    Returns
    -------
    DegreeKernel

    Raises
    ------
    MemoryLimitError
        When not even one row of a block fits.
    """
    n, t = u.shape
    item = u.element_size()
    exact = _exact.exact_method(u, precision)
    planner.reserve_device(n_maps * n * 16)
    if exact == "torch":
        planner.reserve_device(2 * n * t * item)  # U's TF32 parts
    resident, budget = planner.device_bytes, planner.device_budget
    triton = u.is_cuda and use_triton(u, float32=True) and budget >= 2 * resident
    plan_rows = _tiles.plan_block_rows_stored if triton else _tiles.plan_block_rows
    plan = plan_rows(n, resident, budget, item=item, device=u.device)
    planner.reserve_device(plan.device_bytes - resident)
    stats = _exact.new_stats(u.device) if exact else None
    return DegreeKernel(exact, triton, plan.block_rows, stats)


def degree_counts(
    u: torch.Tensor,
    cut: list[float],
    kernel: DegreeKernel,
    *,
    absolute: bool,
    weighted: bool,
    progress: tqdm | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-series counts (and sums) of the pairs with r > θ for each θ of ``cut``.

    Parameters
    ----------
    u : torch.Tensor of shape (N, T)
        The normalised series.
    cut : list of float
        The thresholds θ (|r| > θ with ``absolute``).
    kernel : DegreeKernel
        Of :func:`degree_kernel`.
    absolute, weighted : bool
        Threshold |r|; sum the kept values too.
    progress : tqdm or None
        Advanced by the rows of the pass.

    Returns
    -------
    counts : torch.Tensor of shape (len(cut), N), int64
    sums : torch.Tensor of shape (len(cut), N), float64, or None
        None unless ``weighted``.
    """
    cut_t = torch.tensor(cut, dtype=u.dtype)
    n = u.shape[0]
    options = {"absolute": absolute, "weighted": weighted}
    if kernel.exact:
        found = _exact.degree_exact(
            u,
            cut_t,
            block_rows=kernel.block_rows,
            stats=kernel.stats,
            method=kernel.exact,
            **options,
        )
        _advance(progress, n)  # one kernel (or its own blocks): counted at once
        return found
    if kernel.triton and _tiles.CUDA_METHOD == "fused":
        found = _tiles.degree_triton(u, cut_t, **options)
        _advance(progress, n)  # one kernel: no blocks to count
        return found
    if kernel.triton:
        return _tiles.degree_blocks_triton(
            u, cut_t, block_rows=kernel.block_rows, progress=progress, **options
        )
    return _tiles.degree_torch(
        u, cut_t.to(u.device), block_rows=kernel.block_rows, progress=progress, **options
    )


def top_threshold(
    u: torch.Tensor,
    n_kept: list[int],
    kernel: DegreeKernel,
    *,
    absolute: bool,
    progress: tqdm | None = None,
) -> tuple[list[float], int]:
    """Return the k-th largest upper-triangle r for each k of ``n_kept``, exactly.

    For each k of ``n_kept``, the k-th largest upper-triangle r (|r| with
    ``absolute``), exactly, by the kernel's histogram and collect passes.

    Returns the thresholds and the passes over the triangle that the exact
    scheme ran (0 otherwise; for its confirmation counts).
    """
    if kernel.exact:
        found, passes = _exact.top_threshold_exact(
            u,
            n_kept,
            absolute=absolute,
            block_rows=kernel.block_rows,
            stats=kernel.stats,
            method=kernel.exact,
            use_triton_histogram=kernel.triton,
        )
        _advance(progress, u.shape[0])  # the search as one step of the bar
        return found, passes
    found = _tiles.top_threshold(
        u,
        n_kept,
        absolute=absolute,
        block_rows=kernel.block_rows,
        use_triton=kernel.triton,
        progress=progress,
    )
    return found, 0


def _advance(progress: tqdm | None, rows: int) -> None:
    if progress is not None:
        progress.update(rows)
