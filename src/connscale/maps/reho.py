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
of neighbourhoods are gathered, one neighbour column at a time. Ranks are
multiples of 1/2, so R_t - M(T + 1)/2 is exact in float32 (for T < 2²³) and its
squares are summed in float64: W is exact to float64 rounding whatever the
input's precision.
"""

from __future__ import annotations

import os
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
#: and one gathered neighbour row (float32), their centred float64 copy and its
#: squares.
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
    neighbours = _checked_neighbours(neighbours, x.shape[1])
    dev = x.device if isinstance(x, torch.Tensor) else resolve_device(device)
    planner = planner_for(dev, memory_limit, hint=_HINT)
    with planner.transient(), torch.no_grad():
        w = _reho(x, neighbours, planner)
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


def _checked_neighbours(neighbours, n_series: int) -> np.ndarray:
    """Return ``neighbours`` as int64 (n_series, K), each row holding its own index once."""
    nb = np.asarray(neighbours)
    if nb.ndim != 2 or nb.shape[0] != n_series or not np.issubdtype(nb.dtype, np.integer):
        raise ValueError(
            f"'neighbours' must be an integer array of shape (n_series={n_series}, K); got "
            f"dtype {nb.dtype}, shape {nb.shape}."
        )
    nb = nb.astype(np.int64, copy=False)
    if nb.size and (nb.min() < -1 or nb.max() >= n_series):
        raise ValueError(
            f"'neighbours' must hold series indices 0..{n_series - 1} or -1 (none); got values "
            f"{nb.min()}..{nb.max()}."
        )
    rows = np.sort(nb, axis=1)
    repeated = ((rows[:, 1:] == rows[:, :-1]) & (rows[:, 1:] >= 0)).any(axis=1)
    missing_self = ~(nb == np.arange(n_series)[:, None]).any(axis=1)
    for bad, what in ((missing_self, "does not hold its own index"), (repeated, "repeats a")):
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"Row {first} of 'neighbours' {what} series ({int(bad.sum())} rows): each row "
                "lists the series of one neighbourhood, itself included, once each."
            )
    return nb


def _reho(x: np.ndarray, neighbours: np.ndarray, planner: MemoryPlanner) -> torch.Tensor:
    """Kendall's W of every neighbourhood, float64 on the device."""
    ranks, ties = rank_series(x, planner)
    return kendall_w(ranks, ties, neighbours, planner)


def rank_series(x, planner: MemoryPlanner) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank each series of ``x`` (T, N) over time on the planner's device.

    Returns
    -------
    ranks : torch.Tensor of shape (N + 1, T)
        Ranks 1..T, ties given their average; a last row of zeros (the -1 of
        the neighbour lists). float32 while T < 2**23, float64 beyond.
    ties : torch.Tensor of shape (N + 1,), float64
        Σ_g (t_g³ - t_g) over each series' groups of ties; 0 in the last row.
    """
    n_timepoints, n = x.shape
    rank_dtype = torch.float32 if n_timepoints < 2**23 else torch.float64
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
    """Ranks of each row of ``block`` (ties averaged) and Σ (t³ - t) of its ties."""
    n_timepoints = block.shape[1]
    values, order = torch.sort(block, dim=1, stable=True)
    position = torch.arange(n_timepoints, device=block.device).expand_as(order)
    new = torch.ones_like(values, dtype=torch.bool)
    new[:, 1:] = values[:, 1:] != values[:, :-1]  # a group of equal values starts
    del values
    start = torch.where(new, position, 0).cummax(dim=1).values
    last = torch.ones_like(new)
    last[:, :-1] = new[:, 1:]  # a group ends
    end = torch.where(last, position, n_timepoints).flip(1).cummin(dim=1).values.flip(1)
    del new, last
    length = (end - start + 1).to(torch.float64)
    ties = (length * length - 1).sum(dim=1)  # each of t tied values adds t² - 1
    ranks = torch.empty(block.shape, dtype=rank_dtype, device=block.device)
    ranks.scatter_(1, order, ((start + end).to(rank_dtype) + 2) / 2)
    return ranks, ties


def kendall_w(
    ranks: torch.Tensor, ties: torch.Tensor, neighbours: np.ndarray, planner: MemoryPlanner
) -> torch.Tensor:
    """Kendall's W of each neighbourhood, from :func:`rank_series`'s ranks.

    Neighbourhoods are taken in blocks that fit what is left of the
    planner's device budget. Returns float64 (n_series,), NaN where the
    denominator is 0 (every member constant).
    """
    n, k = neighbours.shape
    n_timepoints = ranks.shape[1]
    planner.reserve_device(8 * n)  # the map
    rows = planner.fit(
        _W_BYTES_PER_TIMEPOINT * n_timepoints + 16 * k,
        f"Kendall's W of {n} neighbourhoods x {n_timepoints} time points",
        at_most=n,
    )
    w = torch.empty(n, dtype=torch.float64, device=ranks.device)
    pad = ranks.shape[0] - 1  # the row of zeros
    for r0 in range(0, n, rows):
        block = torch.from_numpy(neighbours[r0 : r0 + rows]).to(ranks.device)
        block = torch.where(block < 0, pad, block)
        sums = ranks.index_select(0, block[:, 0])
        for j in range(1, k):
            sums += ranks.index_select(0, block[:, j])
        members = (block != pad).sum(dim=1).to(torch.float64)
        centred = sums.to(torch.float64) - (members * (n_timepoints + 1) / 2)[:, None]
        del sums
        spread = torch.einsum("bt,bt->b", centred, centred)
        del centred
        tied = ties.index_select(0, block.reshape(-1)).view(block.shape).sum(dim=1)
        denominator = members * members * (n_timepoints**3 - n_timepoints) - members * tied
        w[r0 : r0 + rows] = torch.where(denominator > 0, 12 * spread / denominator, torch.nan)
    return w
