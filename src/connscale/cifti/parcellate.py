"""Parcel mean series of grayordinates, as ``wb_command -cifti-parcellate`` (mean method).

Every label of the label table but the unlabeled one is a parcel, in
ascending order of its key, kept when no grayordinate carries it (its series
is then NaN). A parcel's series is the mean of its usable grayordinates'
series; its coverage is the fraction of its grayordinates that are usable
(XCP-D's coverage: the fraction of the parcel's vertices and voxels with
data). Where every grayordinate is usable the series equal
``wb_command -cifti-parcellate DTSERIES DLABEL COLUMN OUT -method MEAN``;
otherwise they equal it with the usable grayordinates as ``-cifti-weights``,
as XCP-D runs it.

The reduction runs on torch (CPU or CUDA) in one pass over blocks of
grayordinates (each with all its time points): a series read from a
``.dtseries.nii`` is stored one grayordinate after another, so such a block
is one contiguous read. nibabel is imported where CIFTI files are read or
built.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from connscale._compute import planner_for, resolve_device
from connscale._docs import fill_doc
from connscale._validation import Interval, StrOptions, validate_params
from connscale.io.cifti import CiftiLabels, CiftiSeries

if TYPE_CHECKING:
    from nibabel.cifti2 import BrainModelAxis, ParcelsAxis, SeriesAxis

#: What to do when the parcellation does not fit (for messages).
MEMORY_HINT = "Raise memory_limit (--memory-limit)."

#: Device bytes per value of a block of grayordinates: its copy in the input's
#: dtype (at most 8; none on the CPU) and its float64 cast.
_BLOCK_BYTES_PER_VALUE = 16

#: Device bytes per grayordinate of a block: its minimum and maximum
#: (float64), usability and the parcel index it is summed into.
_BLOCK_BYTES_PER_GRAYORDINATE = 16 + 1 + 8

#: Most values in a block of grayordinates (blocks of about 64 MB in float64
#: stream through the caches as fast as larger ones, and allocate less).
_BLOCK_VALUES = 1 << 23

#: Device bytes per grayordinate kept through the pass: its parcel index,
#: usability and mask.
_GRAYORDINATE_BYTES = 8 + 1 + 1


@dataclass(frozen=True)
class Parcellation:
    """Parcel mean series and their coverage (:func:`parcellate`).

    Attributes
    ----------
    series : ndarray of shape (n_timepoints, n_parcels), float64
        Each parcel's mean series over its usable grayordinates; NaN for a
        parcel with none, or with a coverage below ``min_coverage``.
    coverage : ndarray of shape (n_parcels,), float64
        The fraction of each parcel's grayordinates that are usable (0 for
        an empty parcel).
    keys : ndarray of shape (n_parcels,), int64
        The label key of each parcel, ascending.
    sizes : ndarray of shape (n_parcels,), int64
        The number of grayordinates of each parcel.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.cifti import parcellate
    >>> x = np.random.default_rng(0).standard_normal((5, 4))
    >>> x[:, 1] = 0.0  # a constant grayordinate is not usable
    >>> p = parcellate(x, [1, 1, 2, 0], keys=[1, 2, 3], device="cpu")
    >>> p.sizes.tolist(), p.coverage.tolist(), bool(np.isnan(p.series[0, 2]))
    ([2, 1, 0], [0.5, 1.0, 0.0], True)
    """

    series: np.ndarray
    coverage: np.ndarray
    keys: np.ndarray
    sizes: np.ndarray


@fill_doc
@validate_params(
    {
        "series": ["array-like"],
        "labels": ["array-like"],
        "keys": ["array-like", None],
        "method": [StrOptions({"mean"})],
        "min_coverage": [Interval(Real, 0, 1, closed="both"), None],
        "mask": ["array-like", None],
        "device": ["device"],
        "memory_limit": ["memory", None],
    }
)
def parcellate(
    series,
    labels,
    *,
    keys=None,
    method: str = "mean",
    min_coverage: float | None = None,
    mask=None,
    device: str = "auto",
    memory_limit=None,
) -> Parcellation:
    """Compute the parcel mean series of grayordinate series.

    A grayordinate is usable when its series is finite at every time point,
    is not constant (equal values throughout; judged from two time points on)
    and, when ``mask`` is given, is in ``mask``. A parcel's series is the
    mean of its usable grayordinates' series (``wb_command -cifti-parcellate
    ... COLUMN -method MEAN`` when all are usable; with the usable ones as
    ``-cifti-weights`` otherwise, as XCP-D runs it).

    Parameters
    ----------
    series : array-like of shape (n_timepoints, n_grayordinates)
        The series, one column per grayordinate (a memory map is read a
        block of time points at a time). NaN and inf are allowed: such a
        grayordinate is not usable.
    labels : array-like of shape (n_grayordinates,), int
        The label key of each grayordinate.
    keys : array-like of int or None, default=None
        The parcels' label keys (those of the label table but the unlabeled
        key; a key no grayordinate carries gives an empty parcel). Sorted
        ascending. None: the distinct nonzero ``labels``. Grayordinates
        whose label is not among them belong to no parcel.
    method : {'mean'}, default='mean'
        The reduction: the mean of the usable grayordinates.
    min_coverage : float in [0, 1] or None, default=None
        Parcels whose coverage is below it get NaN series, as XCP-D's
        ``--min-coverage``. None: only parcels without a usable grayordinate
        are NaN.
    mask : array-like of shape (n_grayordinates,), bool, or None
        Grayordinates that may be used (e.g. those with data in the whole
        run when ``series`` are part of it); None: all.
    %(device)s
    %(memory_limit)s

    Returns
    -------
    Parcellation
        ``series`` (n_timepoints, n_parcels), ``coverage``, ``keys`` and
        ``sizes``, in the order of ``keys``.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.cifti import parcellate
    >>> x = np.arange(12.0).reshape(3, 4) ** 2
    >>> p = parcellate(x, [1, 1, 2, 0], device="cpu")
    >>> p.keys.tolist(), p.series[:, 0].tolist()
    ([1, 2], [0.5, 20.5, 72.5])
    """
    x, index, keys, usable_mask = _check_inputs(series, labels, keys, mask)
    n_timepoints, n = x.shape
    planner = planner_for(resolve_device(device), memory_limit, hint=MEMORY_HINT)
    planner.reserve_result(
        n_timepoints * keys.size * 8, f"The parcel series ({n_timepoints} x {keys.size})"
    )
    with planner.transient(), torch.no_grad():
        planner.reserve_device(_GRAYORDINATE_BYTES * n + 8 * n_timepoints * (keys.size + 1))
        columns = planner.fit(
            _BLOCK_BYTES_PER_VALUE * n_timepoints + _BLOCK_BYTES_PER_GRAYORDINATE,
            f"Parcellating {n} grayordinates x {n_timepoints} time points",
            at_most=min(n, max(1, _BLOCK_VALUES // n_timepoints)),
        )
        index_t = torch.from_numpy(index).to(planner.device)
        mask_t = None if usable_mask is None else torch.from_numpy(usable_mask).to(planner.device)
        sums, usable = _parcel_sums(x, index_t, mask_t, keys.size, columns)
        counts = torch.bincount(index_t[usable & (index_t >= 0)], minlength=keys.size)
        sizes = torch.bincount(index_t[index_t >= 0], minlength=keys.size)
        means = sums / counts.to(torch.float64)
        means[:, counts == 0] = torch.nan
        result = means.cpu().numpy()
    sizes = sizes.cpu().numpy().astype(np.int64)
    counts = counts.cpu().numpy()
    coverage = np.divide(counts, sizes, out=np.zeros(keys.size), where=sizes > 0)
    if min_coverage is not None:
        result[:, coverage < min_coverage] = np.nan
    return Parcellation(series=result, coverage=coverage, keys=keys, sizes=sizes)


def _check_inputs(series, labels, keys, mask):
    """Return the validated series, each grayordinate's parcel index, the keys and the mask.

    The parcel index is -1 for a grayordinate in no parcel.
    """
    x = series if isinstance(series, np.ndarray) else np.asarray(series)
    if x.ndim != 2 or 0 in x.shape or not np.issubdtype(x.dtype, np.number):
        raise ValueError(
            "'series' must be a non-empty numeric array of shape (n_timepoints, "
            "n_grayordinates); "
            f"got {x.dtype} of shape {x.shape}."
        )
    if np.iscomplexobj(x):
        raise ValueError("'series' must be real; got complex values.")
    if min(x.strides) < 0:  # torch reads no reversed view
        x = np.ascontiguousarray(x)
    n = x.shape[1]
    labels = _integers(labels, "labels")
    if labels.shape != (n,):
        raise ValueError(
            f"'labels' must hold one key per grayordinate ({n}); got shape {labels.shape}."
        )
    if keys is None:
        keys = np.unique(labels[labels != 0])
    else:
        keys = _integers(keys, "keys")
        if keys.ndim != 1 or np.any(np.diff(keys) <= 0):
            raise ValueError("'keys' must be a 1-D array of distinct label keys, ascending.")
    if keys.size == 0:
        raise ValueError("No parcel: the labels hold no key other than 0 (unlabeled).")
    position = np.searchsorted(keys, labels).clip(0, keys.size - 1)
    index = np.where(keys[position] == labels, position, -1).astype(np.int64)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != (n,) or mask.dtype != bool:
            raise ValueError(
                f"'mask' must be a boolean array of one value per grayordinate ({n}); "
                f"got {mask.dtype} of shape {mask.shape}."
            )
    return x, index, keys, mask


def _integers(values, name: str) -> np.ndarray:
    """Return ``values`` as int64, refusing values that are not whole numbers."""
    array = np.asarray(values)
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"'{name}' must hold integer label keys; got {array.dtype}.")
    as_int = array.astype(np.int64)
    if not np.array_equal(as_int, array):
        raise ValueError(f"'{name}' must hold integer label keys; got non-integer values.")
    return as_int


def _block(x: np.ndarray, c0: int, c1: int, axis: int, device: torch.device) -> torch.Tensor:
    """Return grayordinates ``c0:c1`` of ``x`` (T, N) on ``device``, in its memory order.

    ``axis`` is that of the grayordinates: 0 gives a (c1 - c0, T) tensor (a
    series stored grayordinate by grayordinate, as in CIFTI files), 1 a
    (T, c1 - c0) one. On the CPU it is a view (never written).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        block = torch.from_numpy(x[:, c0:c1])
    return (block.T if axis == 0 else block).to(device)


def _usable(block: torch.Tensor, axis: int) -> torch.Tensor:
    """Return which grayordinates (along ``axis``) are finite throughout and not constant.

    From each one's minimum and maximum over time (NaN propagates through
    them); constant is judged from two time points on.
    """
    low, high = block.amin(1 - axis), block.amax(1 - axis)
    finite = torch.isfinite(low) & torch.isfinite(high)
    return finite & (high > low) if block.shape[1 - axis] > 1 else finite


def _parcel_sums(x, index: torch.Tensor, mask, n_parcels: int, columns: int):
    """Return the per-parcel sums (T, P) over the usable members, and the usable grayordinates.

    One pass over blocks of ``columns`` grayordinates, each in the memory
    order of ``x``: its usability, then its usable members added to their
    parcel's sum in float64 (the others to a discarded extra parcel).
    """
    n_timepoints, n = x.shape
    axis = 0 if x.strides[0] < x.strides[1] else 1  # the grayordinates' axis

    def shape(count: int) -> tuple[int, int]:
        return (count, n_timepoints) if axis == 0 else (n_timepoints, count)

    sums = torch.zeros(shape(n_parcels + 1), dtype=torch.float64, device=index.device)
    cast = torch.empty(shape(min(n, columns)), dtype=torch.float64, device=index.device)
    usable = torch.empty(n, dtype=torch.bool, device=index.device)
    for c0 in range(0, n, columns):
        c1 = min(n, c0 + columns)
        block = _block(x, c0, c1, axis, index.device)
        usable[c0:c1] = _usable(block, axis)
        if mask is not None:
            usable[c0:c1] &= mask[c0:c1]
        parcel = torch.where(usable[c0:c1] & (index[c0:c1] >= 0), index[c0:c1], n_parcels)
        sums.index_add_(axis, parcel, cast.narrow(axis, 0, c1 - c0).copy_(block))
    sums = sums.narrow(axis, 0, n_parcels)
    return (sums.T if axis == 0 else sums), usable


@dataclass(frozen=True)
class CiftiParcellation:
    """A dense series parcellated by a label map (:func:`parcellate_cifti`).

    Attributes
    ----------
    data : ndarray of shape (n_timepoints, n_parcels), float32
        The parcel mean series (NaN as in :class:`Parcellation`).
    coverage : ndarray of shape (n_parcels,), float64
        The fraction of each parcel's grayordinates that are usable.
    parcels : nibabel.cifti2.ParcelsAxis
        The parcels, as ``wb_command -cifti-parcellate`` builds them.
    series : nibabel.cifti2.SeriesAxis
        The time axis of the dense series (TR carried over).
    keys : ndarray of shape (n_parcels,), int64
        The label key of each parcel, ascending.

    Examples
    --------
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis, SeriesAxis
    >>> from connscale.cifti import parcellate_cifti
    >>> from connscale.io.cifti import CiftiLabels, CiftiSeries
    >>> model = BrainModelAxis.from_surface(np.arange(6), 6, "CortexLeft")
    >>> x = np.random.default_rng(0).standard_normal((20, 6))
    >>> dense = CiftiSeries(x, model, SeriesAxis(0.0, 2.0, 20), t_r=2.0)
    >>> atlas = CiftiLabels(np.array([1, 1, 1, 2, 2, 0]), {1: "A", 2: "B"}, {}, model, "atlas")
    >>> parcellated = parcellate_cifti(dense, atlas, device="cpu")
    >>> parcellated.data.shape, parcellated.names, parcellated.series.step
    ((20, 2), ['A', 'B'], 2.0)
    """

    data: np.ndarray
    coverage: np.ndarray
    parcels: ParcelsAxis
    series: SeriesAxis
    keys: np.ndarray

    @property
    def names(self) -> list[str]:
        """The parcel names, in order."""
        return [str(name) for name in self.parcels.name]


@validate_params(
    {
        "dtseries": ["path", CiftiSeries],
        "dlabel": ["path", CiftiLabels],
        "map_index": [Interval(Integral, 0, None, closed="left"), str],
        "min_coverage": [Interval(Real, 0, 1, closed="both"), None],
        "mask": ["array-like", None],
        "device": ["device"],
        "memory_limit": ["memory", None],
    }
)
def parcellate_cifti(
    dtseries,
    dlabel,
    *,
    map_index: int | str = 0,
    min_coverage: float | None = None,
    mask=None,
    device: str = "auto",
    memory_limit=None,
) -> CiftiParcellation:
    """Parcellate a dense series by one label map of a ``.dlabel.nii``.

    Equals ``wb_command -cifti-parcellate DTSERIES DLABEL COLUMN OUT -method
    MEAN`` (the parcels, their names and order, their vertices and voxels,
    and the series where every grayordinate is usable; see :func:`parcellate`
    for the rest), on a label map of any index.

    Parameters
    ----------
    dtseries : path or CiftiSeries
        The dense series (a SeriesAxis by a BrainModelAxis), as a file or as
        read by :func:`connscale.io.cifti.read_cifti_series` (its ``data``
        may be replaced, e.g. by denoised series).
    dlabel : path or CiftiLabels
        The label file, on the same brain model as ``dtseries``, or one of
        its maps read by :func:`connscale.io.cifti.read_cifti_labels`.
    map_index : int or str, default=0
        Which label map of a ``dlabel`` path: its index (0 is the first) or
        its name.
    min_coverage : float in [0, 1] or None, default=None
        See :func:`parcellate`.
    mask : array-like of shape (n_grayordinates,), bool, or None
        See :func:`parcellate`.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Where to compute.
    memory_limit : int, str or None, default=None
        Most memory the parcellation may use (the series are read a block of
        time points at a time).

    Returns
    -------
    CiftiParcellation

    Examples
    --------
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis, SeriesAxis
    >>> from connscale.cifti import parcellate_cifti
    >>> from connscale.io.cifti import CiftiLabels, CiftiSeries
    >>> model = BrainModelAxis.from_surface(np.arange(6), 6, "CortexLeft")
    >>> x = np.random.default_rng(0).standard_normal((20, 6))
    >>> dense = CiftiSeries(x, model, SeriesAxis(0.0, 2.0, 20), t_r=2.0)
    >>> atlas = CiftiLabels(np.array([1, 1, 1, 2, 2, 0]), {1: "A", 2: "B"}, {}, model, "atlas")
    >>> parcellated = parcellate_cifti(dense, atlas, device="cpu")
    >>> bool(np.allclose(parcellated.data[:, 1], x[:, 3:5].mean(axis=1)))
    True

    Raises
    ------
    ValueError
        One line, when the label file is on another brain model than the
        series (the message names both), or a file is not of its kind.
    """
    from connscale.io.cifti import check_same_brain_model, read_cifti_labels, read_cifti_series

    dense = read_cifti_series(dtseries) if isinstance(dtseries, (str, os.PathLike)) else dtseries
    if type(dense.brain_model).__name__ != "BrainModelAxis":
        raise ValueError(
            f"{dense.path} is parcellated already (a ParcelsAxis); give a .dtseries.nii."
        )
    labels = (
        read_cifti_labels(dlabel, map_index=map_index)
        if isinstance(dlabel, (str, os.PathLike))
        else dlabel
    )
    check_same_brain_model(dense, labels, what="The label file")
    keys = np.array(sorted(labels.names), dtype=np.int64)
    result = parcellate(
        dense.data,
        labels.labels,
        keys=keys,
        min_coverage=min_coverage,
        mask=mask,
        device=device,
        memory_limit=memory_limit,
    )
    return CiftiParcellation(
        data=result.series.astype(np.float32),
        coverage=result.coverage,
        parcels=parcels_axis(labels.labels, labels.names, labels.brain_model),
        series=dense.series,
        keys=keys,
    )


def parcels_axis(labels: np.ndarray, names: dict[int, str], brain_model: BrainModelAxis):
    """Return the ParcelsAxis of a label map, as ``wb_command -cifti-parcellate`` builds it.

    One parcel per key of ``names``, ascending, named after it (an empty one
    included); a parcel's vertices are ascending per surface structure, its
    voxels in the order of (k, j, i); every surface structure of
    ``brain_model`` is declared with its vertex count, and the volume grid
    when it has voxels.

    Parameters
    ----------
    labels : ndarray of shape (n_grayordinates,), int
        Each grayordinate's label key.
    names : dict of int to str
        The parcels' keys and names (the unlabeled key left out).
    brain_model : nibabel.cifti2.BrainModelAxis
        The grayordinates of ``labels``.

    Returns
    -------
    nibabel.cifti2.ParcelsAxis

    Examples
    --------
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.cifti import parcels_axis
    >>> model = BrainModelAxis.from_surface(np.arange(5), 5, "CortexLeft")
    >>> parcels = parcels_axis(np.array([2, 1, 1, 0, 2]), {1: "A", 2: "B"}, model)
    >>> parcels.name.tolist(), parcels.vertices[1]["CIFTI_STRUCTURE_CORTEX_LEFT"].tolist()
    (['A', 'B'], [0, 4])
    """
    from nibabel.cifti2 import ParcelsAxis

    keys = np.array(sorted(names), dtype=np.int64)
    labels = np.asarray(labels)
    position = np.searchsorted(keys, labels).clip(0, keys.size - 1)
    parcel = np.where(keys[position] == labels, position, -1)
    structures, first, structure = np.unique(
        brain_model.name, return_index=True, return_inverse=True
    )
    surface = np.isin(brain_model.name, list(brain_model.nvertices))
    # Structures in the order the brain model holds them (each is one run of it).
    rank = np.argsort(np.argsort(first))[structure]
    on_surface = np.flatnonzero(surface & (parcel >= 0))
    on_surface = on_surface[
        np.lexsort((brain_model.vertex[on_surface], rank[on_surface], parcel[on_surface]))
    ]
    in_volume = np.flatnonzero(~surface & (parcel >= 0))
    ijk = brain_model.voxel[in_volume]
    in_volume = in_volume[np.lexsort((ijk[:, 0], ijk[:, 1], ijk[:, 2], parcel[in_volume]))]
    surface_bounds = np.searchsorted(parcel[on_surface], np.arange(keys.size + 1))
    volume_bounds = np.searchsorted(parcel[in_volume], np.arange(keys.size + 1))
    vertices = []
    for members in np.split(on_surface, surface_bounds[1:-1]):
        runs = np.flatnonzero(np.diff(structure[members])) + 1
        vertices.append(
            {
                str(structures[structure[run[0]]]): brain_model.vertex[run]
                for run in np.split(members, runs)
                if run.size
            }
        )
    voxels = [
        brain_model.voxel[members].reshape(-1, 3)
        for members in np.split(in_volume, volume_bounds[1:-1])
    ]
    has_volume = bool((~surface).any())
    return ParcelsAxis(
        np.array([names[key] for key in keys]),
        voxels,
        vertices,
        affine=brain_model.affine if has_volume else None,
        volume_shape=brain_model.volume_shape if has_volume else None,
        nvertices=dict(brain_model.nvertices),
    )


def parcellated_names(stem: str) -> dict[str, str]:
    """Return the file names of a run's parcellated outputs, in XCP-D's spelling.

    Parameters
    ----------
    stem : str
        The entities (``sub-01_task-rest_space-fsLR_seg-Glasser``).

    Returns
    -------
    dict of str to str
        The file name of each output, by kind: the keys of :func:`write_parcellated`'s result.

    Examples
    --------
    >>> from connscale.cifti import parcellated_names
    >>> parcellated_names("sub-01_task-rest_space-fsLR_seg-Glasser")["pconn"]
    'sub-01_task-rest_space-fsLR_seg-Glasser_stat-pearsoncorrelation_boldmap.pconn.nii'
    """
    return {
        "ptseries": f"{stem}_stat-mean_timeseries.ptseries.nii",
        "timeseries": f"{stem}_stat-mean_timeseries.tsv",
        "pconn": f"{stem}_stat-pearsoncorrelation_boldmap.pconn.nii",
        "relmat": f"{stem}_stat-pearsoncorrelation_relmat.tsv",
        "relmat_sidecar": f"{stem}_stat-pearsoncorrelation_relmat.json",
        "coverage": f"{stem}_stat-coverage_boldmap.pscalar.nii",
    }


def write_parcellated(
    parcellation: CiftiParcellation,
    out,
    stem: str,
    *,
    source: str | os.PathLike | None = None,
    device: str = "auto",
    memory_limit=None,
) -> dict[str, Path]:
    """Write a run's parcellated outputs: series, connectome and coverage.

    The parcel series as ``.ptseries.nii`` and ``timeseries.tsv`` (one column
    per parcel, headed by its name), their Pearson correlation as
    ``.pconn.nii`` and its relmat TSV twin (with a JSON sidecar), and the
    coverage as ``.pscalar.nii`` (one map, ``coverage``); names from
    :func:`parcellated_names`. A parcel whose series is NaN (empty, or below
    the minimum coverage) has NaN rows and columns in the connectome. Each
    file is written atomically.

    Parameters
    ----------
    parcellation : CiftiParcellation
        From :func:`parcellate_cifti`.
    out : path or connscale.io.publish.OutputSet
        The folder, or the output set whose staging folder takes the files.
    stem : str
        The names' entities (``<source>_seg-<atlas>``).
    source : path or None
        The dense series, named in the sidecar.
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Where the correlation is computed.
    memory_limit : int, str or None, default=None
        Most memory the correlation may use.

    Returns
    -------
    dict of str to Path
        The files written, by kind (the keys of :func:`parcellated_names`).

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis, SeriesAxis
    >>> from connscale.cifti import parcellate_cifti
    >>> from connscale.io.cifti import CiftiLabels, CiftiSeries
    >>> model = BrainModelAxis.from_surface(np.arange(6), 6, "CortexLeft")
    >>> x = np.random.default_rng(0).standard_normal((20, 6))
    >>> dense = CiftiSeries(x, model, SeriesAxis(0.0, 2.0, 20), t_r=2.0)
    >>> atlas = CiftiLabels(np.array([1, 1, 1, 2, 2, 0]), {1: "A", 2: "B"}, {}, model, "atlas")
    >>> parcellated = parcellate_cifti(dense, atlas, device="cpu")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     paths = write_parcellated(parcellated, tmp, "sub-01_seg-toy", device="cpu")
    ...     print(sorted(paths))
    ['coverage', 'pconn', 'ptseries', 'relmat', 'relmat_sidecar', 'timeseries']
    """
    from connscale.io.cifti import write_pconn, write_pscalar, write_ptseries
    from connscale.io.relmat import sidecar, write_relmat_tsv, write_sidecar
    from connscale.io.timeseries import save_timeseries

    where = out.path if hasattr(out, "path") else (lambda name: Path(out) / name)
    paths = {kind: where(name) for kind, name in parcellated_names(stem).items()}
    data, names = parcellation.data, parcellation.names
    matrix = parcel_correlation(data, device=device, memory_limit=memory_limit)
    write_ptseries(paths["ptseries"], parcellation.parcels, parcellation.series, data)
    save_timeseries(paths["timeseries"], data, names)
    write_pconn(paths["pconn"], parcellation.parcels, matrix)
    write_relmat_tsv(paths["relmat"], matrix, names)
    metadata = sidecar("dense", len(names), source=source, nodes="parcels")
    write_sidecar(paths["relmat"], metadata)
    write_pscalar(
        paths["coverage"],
        parcellation.parcels,
        ["coverage"],
        parcellation.coverage[None, :].astype(np.float32),
    )
    return paths


def parcel_correlation(data: np.ndarray, *, device: str = "auto", memory_limit=None) -> np.ndarray:
    """Return the Pearson correlation (P, P) of parcel series, NaN at parcels with NaN series.

    The parcels with finite series are correlated with
    :func:`connscale.fc.correlation` (a constant one gives NaN, with its
    warning); the others' rows and columns are NaN.

    Parameters
    ----------
    data : ndarray of shape (n_timepoints, n_parcels)
        Parcel series, NaN for a parcel without one (:class:`Parcellation`).
    device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Where the correlation is computed.
    memory_limit : int, str or None, default=None
        Most memory the correlation may use.

    Returns
    -------
    ndarray of shape (n_parcels, n_parcels), float32

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.cifti import parcel_correlation
    >>> x = np.random.default_rng(0).standard_normal((30, 3))
    >>> x[:, 2] = np.nan  # an empty parcel
    >>> r = parcel_correlation(x, device="cpu")
    >>> r.shape, float(r[0, 0]), bool(np.isnan(r[2]).all())
    ((3, 3), 1.0, True)
    """
    from connscale.fc import correlation

    kept = np.flatnonzero(np.isfinite(data).all(axis=0))
    matrix = np.full((data.shape[1], data.shape[1]), np.nan, dtype=np.float32)
    if kept.size:
        r = correlation(data[:, kept], device=device, memory_limit=memory_limit)
        matrix[np.ix_(kept, kept)] = r
    return matrix
