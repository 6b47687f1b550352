"""Correlation of grayordinates or parcels: ``wb_command -cifti-correlation``, on a GPU or CPU.

A ``.dtseries.nii`` gives a dense connectome (``.dconn.nii``, grayordinates
x grayordinates), a ``.ptseries.nii`` a parcellated one (``.pconn.nii``). The
matrix is formed block by block (:func:`connscale.fc.matrix_stream.stream_matrix`)
and written straight into the uncompressed NIfTI-2 file
(:class:`connscale.io.cifti.DconnWriter`): it is never whole in memory, and
``memory_limit`` bounds the call. The file is published only once complete.

Workbench 1.5.0's semantics (``AlgorithmCiftiCorrelation.cxx``), matched
here, for rows x, y (T time points), weights w ≥ 0 (frames of weight 0
dropped; none given: w = 1), m = Σ w x / Σ w:

* correlation: r = Σ w (x - mₓ)(y - m_y) / sqrt(Σ w (x - mₓ)² Σ w (y - m_y)²),
  clamped to [-1, 1]; the diagonal is 1 (also for a constant row, whose
  other entries are NaN);
* ``demean=False`` (``-no-demean``): the same with m = 0 (weighted cosine;
  Workbench 1.5.0 miscomputes it when weights are given too, see
  :mod:`connscale.fc.row_products`);
* ``covariance=True`` (``-covariance``): Σ w (x - mₓ)(y - m_y) / Σ w (divided by
  T without weights), the diagonal computed too, nothing clamped;
* ``fisher_z=True`` (``-fisher-z``): artanh(r) with r clamped to ±0.999999
  (the diagonal is artanh(0.999999) = 7.2543...);
* ROI rows (``-roi-override``): rows are the selected grayordinates, the
  surface ones first then the volume ones, each in file order; columns are
  all grayordinates. The row axis of the output holds the selected ones.
  (Workbench 1.5.0 ignores ``-covariance`` with ROIs; fixed in Workbench in
  2023, and computed here.)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from connscale._choices import CORRELATION_KINDS
from connscale._compute import MemoryPlan, planner_for, resolve_device, resolve_dtype
from connscale._compute.device import numpy_dtype
from connscale._docs import fill_doc
from connscale._validation import Interval, StrOptions, check_output_path, validate_params
from connscale.fc.matrix_stream import stream_matrix
from connscale.fc.row_products import RowMeasure

logger = logging.getLogger(__name__)

#: The surface structures a ROI may select (Workbench's -left-roi, -right-roi, -cerebellum-roi).
ROI_SURFACES = ("CORTEX_LEFT", "CORTEX_RIGHT", "CEREBELLUM")
#: Root attribute of a triu/sparse HDF5 store that holds the CIFTI-2 XML of its brain model.
CIFTI_XML_ATTR = "cifti_xml"

_CONSTRAINTS = {
    "in_file": ["path"],
    "out_file": ["path"],
    "fisher_z": ["boolean"],
    "demean": ["boolean"],
    "covariance": ["boolean"],
    "weights": ["array-like", "path", None],
    "roi_structures": [str, list, tuple, None],
    "roi_cifti": ["path", None],
    "kind": [StrOptions(set(CORRELATION_KINDS))],
    "threshold": [Interval(Real, -1, 1, closed="both"), None],
    "absolute": ["boolean"],
    "memory_limit": ["memory", None],
    "device": ["device", None],
    "dtype": ["dtype"],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
}


@dataclass(frozen=True)
class CiftiCorrelation:
    """What :func:`cifti_correlation` wrote, for logs and reports.

    Attributes
    ----------
    path : pathlib.Path
        The published file.
    plan : MemoryPlan
        The memory plan followed.
    n_rows, n_columns : int
        The matrix's shape.
    n_timepoints : int
        Time points of the input (before weights drop any).
    n_constant : int
        Series whose correlations are undefined.
    nodes : str
        ``'grayordinates'`` or ``'parcels'``.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.io.cifti import write_dtseries
    >>> model = BrainModelAxis.from_surface(np.arange(6), 6, "CortexLeft")
    >>> x = np.random.default_rng(0).standard_normal((20, 6))
    >>> tmp = tempfile.TemporaryDirectory()
    >>> dtseries = write_dtseries(Path(tmp.name) / "run.dtseries.nii", model, 2.0, x)
    >>> from connscale.cifti import cifti_correlation
    >>> done = cifti_correlation(dtseries, Path(tmp.name) / "run.dconn.nii", device="cpu")
    >>> done.n_rows, done.n_columns, done.n_timepoints, done.nodes
    (6, 6, 20, 'grayordinates')
    >>> tmp.cleanup()
    """

    path: Path
    plan: MemoryPlan
    n_rows: int
    n_columns: int
    n_timepoints: int
    n_constant: int
    nodes: str


@fill_doc
@validate_params(_CONSTRAINTS)
def cifti_correlation(  # noqa: PLR0913 - public keywords: wb_command -cifti-correlation's options
    in_file,
    out_file,
    *,
    fisher_z: bool = False,
    demean: bool = True,
    covariance: bool = False,
    weights=None,
    roi_structures=None,
    roi_cifti=None,
    kind: str = "dense",
    threshold: float | None = None,
    absolute: bool = False,
    memory_limit=None,
    device: str = "auto",
    dtype: str = "float32",
    verbose: int = 0,
) -> CiftiCorrelation:
    """Correlate every grayordinate (or parcel) of a CIFTI-2 series with all others.

    The equivalent of ``wb_command -cifti-correlation`` (module docstring:
    its formulas, matched within float32 rounding).

    Parameters
    ----------
    in_file : str or path
        A ``.dtseries.nii`` (dense) or ``.ptseries.nii`` (parcels).
    out_file : str or path
        ``.dconn.nii`` (dense input) or ``.pconn.nii`` (parcels) for
        ``kind='dense'``; ``.h5`` for ``'triu'`` and ``'sparse'`` (the CIFTI
        XML of the brain model stored in its root attribute ``cifti_xml``,
        read back by :func:`read_relmat_brain_model`).
    fisher_z : bool, default=False
        Write artanh(r), r clamped to ±0.999999 (``-fisher-z``).
    demean : bool, default=True
        Subtract each row's mean (False: ``-no-demean``).
    covariance : bool, default=False
        Covariance instead of correlation (``-covariance``).
    weights : array-like of shape (n_timepoints,), str, path or None
        One non-negative weight per time point (or a text file of them, as
        ``-weights``); 0 drops a frame (censoring).
    roi_structures : list of str, str or None
        Rows of these structures only (e.g. ``['CORTEX_LEFT']`` or
        ``'CORTEX_LEFT,THALAMUS_LEFT'``), against all columns
        (``-roi-override`` with whole-structure ROIs).
    roi_cifti : str, path or None
        Rows where the first map of this ``.dscalar.nii`` is > 0
        (``-roi-override -cifti-roi``).
    kind : {'dense', 'triu', 'sparse'}, default='dense'
        ``'dense'``: the CIFTI-2 matrix. ``'triu'``/``'sparse'``: an HDF5
        relmat as :func:`connscale.correlation` writes (plain Pearson, weights
        of 0 and 1 only).
    threshold : float in [-1, 1] or None
        Keep r >= threshold (``kind='sparse'``).
    absolute : bool, default=False
        With ``kind='sparse'``, keep |r| >= threshold.
    %(memory_limit)s
    %(device)s
    %(dtype)s
    %(verbose)s

    Returns
    -------
    CiftiCorrelation
        The published file (``.path``) and what was done.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.io.cifti import write_dtseries
    >>> model = BrainModelAxis.from_surface(np.arange(6), 6, "CortexLeft")
    >>> x = np.random.default_rng(0).standard_normal((20, 6))
    >>> tmp = tempfile.TemporaryDirectory()
    >>> dtseries = write_dtseries(Path(tmp.name) / "run.dtseries.nii", model, 2.0, x)
    >>> import nibabel as nib
    >>> from connscale.cifti import cifti_correlation
    >>> done = cifti_correlation(dtseries, Path(tmp.name) / "run.dconn.nii", device="cpu")
    >>> dconn = nib.load(done.path).get_fdata()
    >>> bool(np.allclose(dconn, np.corrcoef(x.T), atol=1e-6))
    True
    >>> tmp.cleanup()
    """
    from connscale.io.cifti import read_cifti_series

    out_file = check_output_path(out_file, "out_file")
    measure = RowMeasure(
        demean=demean,
        covariance=covariance,
        fisher_z=fisher_z,
        weights=read_weights(weights) if isinstance(weights, (str, os.PathLike)) else weights,
    )
    series = read_cifti_series(in_file)
    measure.check_length(series.data.shape[0])
    rows = None
    if roi_structures is not None or roi_cifti is not None:
        rows = roi_rows(series.brain_model, structures=roi_structures, roi_cifti=roi_cifti)
    if kind != "dense":
        _check_relmat_options(kind, measure, rows, out_file)
    planner = planner_for(resolve_device(device), memory_limit)
    if kind == "dense":
        plan, n_constant = _write_dconn(series, out_file, measure, rows, planner,
                                        resolve_dtype(dtype), verbose)  # fmt: skip
    else:
        thresholding = (threshold, absolute)
        plan, n_constant = _write_relmat(series, out_file, kind, measure.kept, thresholding,
                                         planner, dtype, verbose)  # fmt: skip
    n_timepoints, n = series.data.shape
    return CiftiCorrelation(
        path=out_file,
        plan=plan,
        n_rows=n if rows is None else len(rows),
        n_columns=n,
        n_timepoints=n_timepoints,
        n_constant=n_constant,
        nodes="grayordinates" if _is_dense(series) else "parcels",
    )


def _is_dense(series) -> bool:
    return type(series.brain_model).__name__ == "BrainModelAxis"


def read_weights(path: str | os.PathLike) -> np.ndarray:
    """Read Workbench's ``-weights`` text file: numbers separated by white space.

    Raises
    ------
    ValueError
        One line, for a file that is missing or holds anything but numbers.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"The weights file {path} does not exist.")
    words = path.read_text().split()
    try:
        return np.array([float(word) for word in words], dtype=np.float64)
    except ValueError as error:
        raise ValueError(f"The weights file {path} must hold numbers only: {error}.") from None


def roi_rows(brain_model, *, structures=None, roi_cifti=None) -> np.ndarray:
    """Return the grayordinates a ROI selects, in Workbench's row order.

    Parameters
    ----------
    brain_model : nibabel.cifti2.BrainModelAxis
        The input's grayordinates.
    structures : list of str, str or None
        Whole structures (CIFTI names, with or without ``CIFTI_STRUCTURE_``;
        a string may list several, separated by commas).
    roi_cifti : str, path or None
        A ``.dscalar.nii`` whose first map is > 0 on the selected
        grayordinates (surfaces matched by structure and vertex, the volume by
        voxel, as ``-cifti-roi``).

    Returns
    -------
    ndarray of int
        Indices into ``brain_model``: the selected surface grayordinates, then
        the volume ones, each in file order.
    """
    if type(brain_model).__name__ != "BrainModelAxis":
        raise ValueError("ROI rows need a dense input (.dtseries.nii); this one has parcels.")
    if structures is not None and roi_cifti is not None:
        raise ValueError("Give ROI rows as structures or as a ROI CIFTI file, not both.")
    if structures is not None:
        selected = _structure_mask(brain_model, structures)
    else:
        selected = _roi_cifti_mask(brain_model, roi_cifti)
    surface = brain_model.surface_mask
    order = np.concatenate(
        [np.flatnonzero(selected & surface), np.flatnonzero(selected & ~surface)]
    )
    if order.size == 0:
        raise ValueError("The ROI selects no grayordinate of the input.")
    return order


def _structure_mask(brain_model, structures) -> np.ndarray:
    from nibabel.cifti2 import BrainModelAxis

    if isinstance(structures, str):
        structures = [s for s in structures.split(",") if s.strip()]
    present = {str(name) for name in brain_model.name}
    selected = np.zeros(len(brain_model), dtype=bool)
    for structure in structures:
        try:
            name = BrainModelAxis.to_cifti_brain_structure_name(structure.strip())
        except ValueError:
            name = None
        if name not in present:
            known = ", ".join(sorted(n.removeprefix("CIFTI_STRUCTURE_") for n in present))
            raise ValueError(f"No structure {structure!r} in the input; it has: {known}.")
        selected |= brain_model.name == name
    return selected


def _roi_cifti_mask(brain_model, roi_cifti) -> np.ndarray:
    """Select as ``-cifti-roi``: surfaces by structure and vertex, the volume by voxel."""
    from connscale.io.cifti import read_cifti_scalars

    maps, _, roi_model = read_cifti_scalars(roi_cifti)
    if type(roi_model).__name__ != "BrainModelAxis":
        raise ValueError(f"The ROI {roi_cifti} must be a dense file (.dscalar.nii).")
    values = np.asarray(maps[0])
    selected = np.zeros(len(brain_model), dtype=bool)
    for name, place, model in roi_model.iter_structures():
        if not model.surface_mask.any():
            continue
        short = str(name).removeprefix("CIFTI_STRUCTURE_")
        if short not in ROI_SURFACES:
            raise ValueError(f"The ROI {roi_cifti} has surface {short}; ROIs hold {ROI_SURFACES}.")
        ours = brain_model.name == name
        if ours.any() and brain_model.nvertices[name] != roi_model.nvertices[name]:
            raise ValueError(
                f"The ROI {roi_cifti} has {roi_model.nvertices[name]} vertices for {short}; "
                f"the input has {brain_model.nvertices[name]}."
            )
        chosen = model.vertex[values[place] > 0]
        selected |= ours & np.isin(brain_model.vertex, chosen)
    if roi_model.volume_mask.any():
        _select_voxels(brain_model, roi_model, values, roi_cifti, selected)
    return selected


def _select_voxels(brain_model, roi_model, values, roi_cifti, selected) -> None:
    """Add the input's voxels where the ROI's volume is > 0 (any structure)."""
    volume = brain_model.volume_mask
    if not volume.any():
        return
    same_grid = roi_model.volume_shape == brain_model.volume_shape and np.allclose(
        roi_model.affine, brain_model.affine
    )
    if not same_grid:
        raise ValueError(f"The ROI {roi_cifti}'s volume grid differs from the input's.")
    grid = np.zeros(brain_model.volume_shape, dtype=bool)
    roi_voxels = roi_model.voxel[roi_model.volume_mask & (values > 0)]
    grid[tuple(roi_voxels.T)] = True
    ijk = brain_model.voxel[volume]
    selected[np.flatnonzero(volume)[grid[tuple(ijk.T)]]] = True


def _write_dconn(series, out_file, measure, rows, planner, work_dtype, verbose):
    """Stream the matrix into the ``.dconn.nii`` / ``.pconn.nii``; return plan and constants."""
    from connscale.io.cifti import DconnWriter

    dense = _is_dense(series)
    suffix = ".dconn.nii" if dense else ".pconn.nii"
    if not out_file.name.endswith(suffix):
        what = "dense" if dense else "parcellated"
        raise ValueError(f"The {what} matrix of {series.path} is a {suffix}; got {out_file}.")
    row_axis = series.brain_model if rows is None else series.brain_model[rows]
    # The blocks sent are contiguous: the writer needs no staging buffer for them.
    dtype = numpy_dtype(work_dtype)
    with DconnWriter(out_file, row_axis, series.brain_model, dtype=dtype) as writer:
        return stream_matrix(
            series.data,
            writer,
            measure=measure,
            planner=planner,
            rows=rows,
            dtype=work_dtype,
            verbose=verbose,
        )


def _check_relmat_options(kind, measure, rows, out_file) -> None:
    """Refuse what an HDF5 relmat (plain Pearson of all pairs) cannot hold."""
    options = {
        "fisher_z": measure.fisher_z,
        "covariance": measure.covariance,
        "demean=False": not measure.demean,
        "weights other than 0 and 1": measure.kept_weights is not None,
        "ROI rows": rows is not None,
    }
    given = [name for name, on in options.items() if on]
    if given:
        raise ValueError(
            f"kind={kind!r} writes plain Pearson correlations of all pairs; "
            f"{', '.join(given)} need kind='dense' (a .dconn.nii / .pconn.nii)."
        )
    if out_file.suffix not in (".h5", ".hdf5"):
        raise ValueError(f"kind={kind!r} writes an HDF5 relmat (.h5); got {out_file}.")


def _write_relmat(series, out_file, kind, kept, thresholding, planner, dtype, verbose):
    """Write the triangle or sparse relmat with the brain model's XML beside it."""
    import nibabel as nib

    from connscale.fc.static import compute_correlation

    threshold, absolute = thresholding
    data = series.data
    if kept is not None:
        data = data[kept]
    axis = series.brain_model
    xml = nib.cifti2.Cifti2Header.from_axes((axis, axis)).to_xml()
    _, (plan, n_constant, _) = compute_correlation(
        data,
        kind=kind,
        threshold=threshold,
        absolute=absolute,
        device=planner.device,
        dtype=dtype,
        memory_limit=planner,
        out=out_file,
        verbose=verbose,
        attrs={"source": str(series.path), CIFTI_XML_ATTR: xml.decode()},
    )
    return plan, n_constant


def read_relmat_brain_model(path: str | os.PathLike):
    """Return the brain model (or parcels) axis stored in a triu/sparse relmat.

    Parameters
    ----------
    path : str or path
        An HDF5 relmat written by :func:`cifti_correlation`.

    Returns
    -------
    nibabel.cifti2.BrainModelAxis or nibabel.cifti2.ParcelsAxis

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from nibabel.cifti2 import BrainModelAxis
    >>> from connscale.io.cifti import write_dtseries
    >>> model = BrainModelAxis.from_surface(np.arange(6), 6, "CortexLeft")
    >>> x = np.random.default_rng(0).standard_normal((20, 6))
    >>> tmp = tempfile.TemporaryDirectory()
    >>> dtseries = write_dtseries(Path(tmp.name) / "run.dtseries.nii", model, 2.0, x)
    >>> from connscale.cifti import cifti_correlation, read_relmat_brain_model
    >>> done = cifti_correlation(dtseries, Path(tmp.name) / "r.h5", kind="triu", device="cpu")
    >>> read_relmat_brain_model(done.path) == model
    True
    >>> tmp.cleanup()
    """
    import h5py
    from nibabel.cifti2.parse_cifti2 import Cifti2Extension

    with h5py.File(path, "r") as h5:
        xml = h5.attrs.get(CIFTI_XML_ATTR)
    if xml is None:
        raise ValueError(f"{path} holds no CIFTI brain model (no {CIFTI_XML_ATTR!r} attribute).")
    xml = xml.encode() if isinstance(xml, str) else bytes(xml)
    return Cifti2Extension(code=32, content=xml).get_content().get_axis(0)
