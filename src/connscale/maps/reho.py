"""Regional homogeneity (ReHo): Kendall's W of each series with its neighbours.

As AFNI's ``3dReHo`` (``src/ptaylor/3dReHo.c``; ``CalcRanksForReHo``,
``FindVoxHood`` and ``ReHoIt`` in ``src/ptaylor/rsfc.c``), which XCP-D runs on
the denoised BOLD with ``-nneigh 27`` (``xcp_d/interfaces/restingstate.py``,
``ReHoNamePatch``). For a neighbourhood of M series over T time points, the
values of each series replaced by their ranks over time (ties given their
average rank), R_t the sum of the M ranks at time t and t_g the lengths of the
groups of tied values of each member:

    W = 12 Σ_t (R_t - M(T + 1)/2)² / (M² (T³ - T) - M Σ_members Σ_g (t_g³ - t_g))

the tie-corrected Kendall's W (Kendall & Babington Smith 1939), AFNI's formula.

Differences from AFNI, on purpose:

- AFNI detects ties on the values truncated to integers (``int *sorted`` in
  ``CalcRanksForReHo``), so that values such as 0.2 and 0.7 tie there; here
  values tie when they are equal. They agree on integer-valued data and on
  data whose integer parts all differ; on denoised BOLD of small amplitude
  AFNI's W is biased by those spurious ties.
- AFNI's tie loop never closes a group of ties that ends at the largest
  value, whose members keep distinct ranks; here every group is averaged.
- A neighbourhood whose members are all constant has no W (0/0): NaN here.

XCP-D's surface ReHo (``compute_2d_reho`` in ``xcp_d/utils/restingstate.py``)
uses the same ranks without the tie correction: the two are equal when no
series has ties.

The computation: every series is ranked once on the device (one sort over
time per series, in column blocks planned by the call's
:class:`~connscale._compute.MemoryPlanner`), then the rank sums R_t of a block
of neighbourhoods are one sparse-dense product (the block's 0/1 membership
matrix times the ranks). Ranks are multiples of 1/2, so R_t - M(T + 1)/2 is
exact in float32 while 2 K T < 2²⁴ (K the largest neighbourhood; float64 ranks
beyond) and its squares are summed in float64: W is exact to float64 rounding
whatever the input's precision. Only the series with ties go through the tie
bookkeeping.
"""

from __future__ import annotations

import os
import warnings
from numbers import Integral

import numpy as np
import torch

from connscale._compute import MemoryPlanner, planner_for, resolve_device
from connscale._docs import fill_doc
from connscale._validation import Options, validate_params
from connscale.maps.neighbours import check_neighbourhood, voxel_neighbours
from connscale.maps.prepare import _checked

#: Device bytes per value of a block of series being ranked: the block in
#: float64, its sorted copy, the sort's int64 order, the run starts and ends
#: (int64, with cummax/cummin's values and indices), the tie flags and ranks.
_RANK_BYTES_PER_VALUE = 96

#: Device bytes per time point of a neighbourhood of the W pass: the rank sums
#: (float64 at most) and room for the norm's float64 cast.
_W_BYTES_PER_TIMEPOINT = 24

_HINT = "Raise memory_limit, or use fewer series (a coarser mask)."

_CONSTRAINTS = {
    "neighbourhood": [Options(Integral, {7, 19, 27})],
    "device": ["device"],
    "memory_limit": ["memory", None],
}


@fill_doc
@validate_params({k: v for k, v in _CONSTRAINTS.items() if k != "neighbourhood"})
def reho_series(timeseries, neighbours, *, device: str = "auto", memory_limit=None) -> np.ndarray:
    """Return Kendall's W of each series with its neighbourhood (ReHo).

    Parameters
    ----------
    %(timeseries)s
        A torch tensor is ranked on its own device (``device`` is then unused).
    neighbours : array-like of int, shape (n_series, K)
        Row ``i``: the series of ``i``'s neighbourhood, ``i`` itself among
        them, padded with -1 (as :func:`voxel_neighbours` and
        :func:`grayordinate_neighbours` return).
    %(device)s
    %(memory_limit)s

    Returns
    -------
    ndarray of shape (n_series,), float64
        W in [0, 1]; NaN where every member of the neighbourhood is constant.

    See Also
    --------
    reho : ReHo of a 4-D image inside a mask.

    Notes
    -----
    The formula, AFNI's tie rule and where connscale departs from AFNI are in
    the module's documentation (:mod:`connscale.maps.reho`).

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.maps import reho_series
    >>> x = np.random.default_rng(0).standard_normal((50, 3))
    >>> reho_series(np.c_[x[:, :1], x[:, :1]], [[0, 1], [1, 0]], device="cpu")
    array([1., 1.])
    """
    x = _checked(timeseries)  # a tensor stays where it lies
    dev = x.device if isinstance(x, torch.Tensor) else resolve_device(device)
    planner = planner_for(dev, memory_limit, hint=_HINT)
    with planner.transient(), torch.no_grad():
        w = _reho(x, _checked_neighbours(neighbours, x.shape[1], planner), planner)
    return w.cpu().numpy()


@validate_params(_CONSTRAINTS)
def reho(img, mask_img, *, neighbourhood: int = 27, device: str = "auto", memory_limit=None):
    """Return the ReHo map of a 4-D image inside a mask (AFNI ``3dReHo``).

    Kendall's W of each voxel's series with those of its neighbours inside
    the mask, as ``3dReHo -mask MASK -nneigh 27`` (XCP-D's ReHo).

    Parameters
    ----------
    img : str, path or nibabel image
        4-D image (the denoised BOLD), time last.
    mask_img : str, path or nibabel image
        3-D mask on ``img``'s grid; its non-zero voxels are used.
    neighbourhood : {7, 19, 27}, default=27
        The voxel, its face (7), face and edge (19) or face, edge and corner
        (27) neighbours (``3dReHo -nneigh``); neighbours outside the mask are
        left out, so boundary voxels have smaller neighbourhoods.
    device, memory_limit
        As :func:`reho_series`.

    Returns
    -------
    nibabel.Nifti1Image
        3-D float32 map on ``img``'s grid: W inside the mask, 0 outside, NaN
        where every series of the neighbourhood is constant.

    Examples
    --------
    >>> import nibabel as nib
    >>> import numpy as np
    >>> import connscale
    >>> data = np.random.default_rng(0).standard_normal((4, 4, 4, 30)).astype("float32")
    >>> img = nib.Nifti1Image(data, np.eye(4))
    >>> mask = nib.Nifti1Image(np.ones((4, 4, 4), dtype="uint8"), np.eye(4))
    >>> w = connscale.reho(img, mask, neighbourhood=7, device="cpu").get_fdata()
    >>> w.shape, bool(np.all((w > 0) & (w < 1)))
    ((4, 4, 4), True)
    """
    import nibabel

    image, mask = _load(img, "img"), _load(mask_img, "mask_img")
    if image.ndim != 4 or mask.ndim != 3:
        raise ValueError(
            f"reho needs a 4-D img and a 3-D mask_img; got shapes {image.shape} and {mask.shape}."
        )
    if image.shape[:3] != mask.shape or not np.allclose(image.affine, mask.affine, atol=1e-4):
        raise ValueError(
            f"mask_img's grid (shape {mask.shape}) differs from img's (shape {image.shape[:3]}) "
            "or their affines differ: resample the mask onto the image first."
        )
    inside = np.asanyarray(mask.dataobj) != 0
    if not inside.any():
        raise ValueError("mask_img selects no voxel.")
    dtype = np.float64 if image.get_data_dtype() == np.float64 else np.float32
    series = image.get_fdata(dtype=dtype)[inside]  # (n_voxels, T)
    w = reho_series(
        series.T,
        voxel_neighbours(inside, check_neighbourhood(neighbourhood)),
        device=device,
        memory_limit=memory_limit,
    )
    out = np.zeros(mask.shape, dtype=np.float32)
    out[inside] = w
    return nibabel.Nifti1Image(out, image.affine)


def _load(img, name: str):
    """Return ``img`` as a nibabel image (a path is loaded)."""
    import nibabel

    if isinstance(img, (str, os.PathLike)):
        return nibabel.load(img)
    if not hasattr(img, "dataobj") or not hasattr(img, "affine"):
        raise ValueError(f"'{name}' must be a path or a nibabel image; got {type(img).__name__}.")
    return img


def _checked_neighbours(neighbours, n_series: int, planner: MemoryPlanner) -> torch.Tensor:
    """Return ``neighbours`` as int64 (n_series, K) on the device, checked there.

    Each row must hold its own index, once, and no index twice.
    """
    nb = torch.as_tensor(neighbours)
    if (
        nb.ndim != 2
        or nb.shape[0] != n_series
        or nb.dtype == torch.bool
        or nb.is_floating_point()
        or nb.is_complex()
    ):
        raise ValueError(
            f"'neighbours' must be an integer array of shape (n_series={n_series}, K); got "
            f"dtype {nb.dtype}, shape {tuple(nb.shape)}."
        )
    planner.reserve_device(8 * nb.numel())
    planner.require(17 * nb.numel(), f"Checking the neighbour lists ({tuple(nb.shape)})")
    nb = nb.to(device=planner.device, dtype=torch.int64)
    low, high = (int(v) for v in torch.aminmax(nb)) if nb.numel() else (0, 0)
    if low < -1 or high >= n_series:
        raise ValueError(
            f"'neighbours' must hold series indices 0..{n_series - 1} or -1 (none); got values "
            f"{low}..{high}."
        )
    rows = torch.sort(nb, dim=1).values
    repeated = ((rows[:, 1:] == rows[:, :-1]) & (rows[:, 1:] >= 0)).any(dim=1)
    del rows
    own = torch.arange(n_series, device=nb.device)[:, None]
    for bad, what in (
        (~(nb == own).any(dim=1), "does not hold its own index"),
        (repeated, "repeats a"),
    ):
        count = int(bad.sum())
        if count:
            first = int(torch.nonzero(bad)[0, 0])
            raise ValueError(
                f"Row {first} of 'neighbours' {what} series ({count} rows): each row "
                "lists the series of one neighbourhood, itself included, once each."
            )
    return nb


def _reho(x, neighbours: torch.Tensor, planner: MemoryPlanner) -> torch.Tensor:
    """Return Kendall's W of every neighbourhood, float64 on the device.

    Ranks are float32 while every rank sum (a multiple of 1/2 below K·T) is
    exact in it, float64 beyond.
    """
    exact_in_float32 = 2 * neighbours.shape[1] * x.shape[0] < 2**24
    ranks, ties = rank_series(x, planner, torch.float32 if exact_in_float32 else torch.float64)
    return kendall_w(ranks, ties, neighbours, planner)


def rank_series(
    x, planner: MemoryPlanner, rank_dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank each series of ``x`` (T, N) over time on the planner's device.

    Returns
    -------
    ranks : torch.Tensor of shape (N + 1, T), ``rank_dtype``
        Ranks 1..T, ties given their average; a last row of zeros (the -1 of
        the neighbour lists).
    ties : torch.Tensor of shape (N + 1,), float64
        Σ_g (t_g³ - t_g) over each series' groups of ties; 0 in the last row.
    """
    n_timepoints, n = x.shape
    itemsize = torch.empty((), dtype=rank_dtype).element_size()
    planner.reserve_device((n + 1) * (n_timepoints * itemsize + 8))
    columns = planner.fit(
        _RANK_BYTES_PER_VALUE * n_timepoints,
        f"The ranks of {n} series x {n_timepoints} time points",
        at_most=n,
    )
    ranks = torch.zeros((n + 1, n_timepoints), dtype=rank_dtype, device=planner.device)
    ties = torch.zeros(n + 1, dtype=torch.float64, device=planner.device)
    for c0 in range(0, n, columns):
        c1 = min(n, c0 + columns)
        block = _column_block(x, c0, c1, planner.device)
        ranks[c0:c1], ties[c0:c1] = _average_ranks(block, rank_dtype)
        del block
    return ranks, ties


def _column_block(x, c0: int, c1: int, device) -> torch.Tensor:
    """Return series ``c0:c1`` of ``x`` (T, N) as a contiguous (c1 - c0, T) tensor."""
    if isinstance(x, torch.Tensor):
        return x[:, c0:c1].T.contiguous().to(device)
    return torch.from_numpy(np.ascontiguousarray(x[:, c0:c1].T)).to(device)


def _average_ranks(block: torch.Tensor, rank_dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the ranks of each row of ``block`` (ties averaged) and Σ (t³ - t) of its ties.

    Ranks 1..T are scattered to every row, then the few rows with ties (any
    two equal values) are ranked again with their groups averaged.
    """
    n_rows, n_timepoints = block.shape
    values, order = torch.sort(block, dim=1, stable=True)
    tied = values[:, 1:] == values[:, :-1]  # equal to the value before
    del values
    steps = torch.arange(1, n_timepoints + 1, dtype=rank_dtype, device=block.device)
    ranks = torch.empty(block.shape, dtype=rank_dtype, device=block.device)
    ranks.scatter_(1, order, steps.expand(n_rows, n_timepoints))
    ties = torch.zeros(n_rows, dtype=torch.float64, device=block.device)
    rows = torch.nonzero(tied.any(dim=1)).flatten()
    if len(rows):
        ranks[rows], ties[rows] = _tied_ranks(tied[rows], order[rows], rank_dtype)
    return ranks, ties


def _tied_ranks(tied: torch.Tensor, order: torch.Tensor, rank_dtype):
    """Return the average ranks and Σ (t³ - t) of rows with ties from their order and tie flags."""
    n_timepoints = order.shape[1]
    position = torch.arange(n_timepoints, device=order.device).expand_as(order)
    new = torch.ones_like(order, dtype=torch.bool)
    new[:, 1:] = ~tied  # a group of equal values starts
    start = torch.where(new, position, 0).cummax(dim=1).values
    last = torch.ones_like(new)
    last[:, :-1] = new[:, 1:]  # a group ends
    end = torch.where(last, position, n_timepoints).flip(1).cummin(dim=1).values.flip(1)
    length = (end - start + 1).to(torch.float64)
    ties = (length * length - 1).sum(dim=1)  # each of t tied values adds t² - 1
    ranks = torch.empty(order.shape, dtype=rank_dtype, device=order.device)
    ranks.scatter_(1, order, ((start + end).to(rank_dtype) + 2) / 2)
    return ranks, ties


def kendall_w(
    ranks: torch.Tensor, ties: torch.Tensor, neighbours: torch.Tensor, planner: MemoryPlanner
) -> torch.Tensor:
    """Return Kendall's W of each neighbourhood from :func:`rank_series`'s ranks.

    The rank sums of a block of neighbourhoods are one sparse-dense product:
    the block's 0/1 membership matrix (CSR) times the ranks. Blocks fit what
    is left of the planner's device budget. Returns float64 (n_series,), NaN
    where the denominator is 0 (every member constant).
    """
    n, k = neighbours.shape
    n_timepoints = ranks.shape[1]
    planner.reserve_device(8 * n)  # the map
    if ranks.device.type == "cuda":  # cuSPARSE may take a column-major copy of the ranks
        planner.reserve_device(ranks.numel() * ranks.element_size())
    rows = planner.fit(
        _W_BYTES_PER_TIMEPOINT * n_timepoints + 32 * k,
        f"Kendall's W of {n} neighbourhoods x {n_timepoints} time points",
        at_most=n,
    )
    w = torch.empty(n, dtype=torch.float64, device=ranks.device)
    for r0 in range(0, n, rows):
        block = neighbours[r0 : r0 + rows]
        membership, members = _membership(block, ranks)
        sums = membership @ ranks  # (rows, T): R_t of each neighbourhood
        del membership
        sums -= (members.to(ranks.dtype) * (n_timepoints + 1) / 2)[:, None]  # exact
        spread = torch.linalg.vector_norm(sums, dim=1, dtype=torch.float64) ** 2
        del sums
        tied = ties[torch.where(block < 0, len(ties) - 1, block)].sum(dim=1)  # ties[-1] = 0
        members = members.to(torch.float64)
        denominator = members * members * (n_timepoints**3 - n_timepoints) - members * tied
        w[r0 : r0 + rows] = torch.where(denominator > 0, 12 * spread / denominator, torch.nan)
    return w


def _membership(block: torch.Tensor, ranks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the CSR 0/1 matrix (rows, N + 1) of a block of neighbour lists and its row sizes."""
    valid = block >= 0
    counts = valid.sum(dim=1)
    crow = torch.zeros(len(block) + 1, dtype=torch.int64, device=block.device)
    torch.cumsum(counts, dim=0, out=crow[1:])
    columns = block[valid]
    ones = torch.ones(len(columns), dtype=ranks.dtype, device=block.device)
    with warnings.catch_warnings():  # torch's notice that CSR support is in beta
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support", category=UserWarning)
        membership = torch.sparse_csr_tensor(
            crow, columns, ones, size=(len(block), ranks.shape[0]), check_invariants=False
        )
    return membership, counts
