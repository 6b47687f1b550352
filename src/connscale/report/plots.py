"""Figures of connscale results, saved as PNG files.

Every function takes the data and an output path, writes the PNG atomically
and returns its path. matplotlib (with the non-interactive Agg backend when
pyplot is not yet loaded) and nilearn are imported inside the functions, so
this module imports without them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import scipy.sparse as sp
    from matplotlib.figure import Figure
    from nibabel.spatialimages import SpatialImage

    from connscale.fc.dynamic_result import DynamicConnectivity

__all__ = [
    "plot_confusion_matrix",
    "plot_connectome",
    "plot_correlation_matrix",
    "plot_dfc_windows",
    "plot_edge_timecourses",
    "plot_lambda_sweep",
    "plot_metric_comparison",
    "plot_network_maps",
    "plot_network_timecourses",
    "plot_networks",
    "plot_rmse_map",
    "plot_roc",
    "plot_state_matrices",
    "plot_state_sequence",
    "plot_transition_matrix",
    "plot_weight_histogram",
    "plot_window_similarity",
    "window_similarity",
]

_DPI = 100


def _pyplot() -> ModuleType:
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, out_path: str | os.PathLike) -> Path:
    from connscale.io.atomic import atomic_path

    plt = _pyplot()
    out_path = Path(out_path)
    if out_path.suffix.lower() != ".png":
        raise ValueError(f"Figures are saved as PNG; got the path {str(out_path)!r}.")
    try:
        with atomic_path(out_path) as tmp:
            fig.savefig(tmp, format="png", dpi=_DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return out_path


def _draw_carpet(ax, values: np.ndarray, times: np.ndarray, *, zscore: bool = True) -> None:
    """Draw series as a carpet plot on ``ax``: one grey row per series, from -2 to 2.

    ``values`` (n_times, n_series) are drawn at the volumes ``times``; with
    ``zscore``, each series is centred and scaled to unit standard deviation
    first (a constant one is left at 0).
    """
    if zscore:
        values = values - values.mean(axis=0)
        scale = values.std(axis=0)
        values /= np.where(scale > 0, scale, 1.0)
    ax.imshow(
        values.T,
        aspect="auto",
        cmap="gray",
        vmin=-2,
        vmax=2,
        interpolation="none",
        extent=(times[0] - 0.5, times[-1] + 0.5, values.shape[1], 0),
    )


def _as_square(matrix: npt.ArrayLike | sp.spmatrix | sp.sparray) -> np.ndarray:
    from connscale._triu import vec_to_matrix

    try:
        import scipy.sparse as sp

        if sp.issparse(matrix):
            matrix = matrix.toarray()
    except ImportError:  # pragma: no cover
        pass
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim == 1:
        return vec_to_matrix(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            "Expected a square matrix or a 1-D upper-triangle vector; got an array of "
            f"shape {matrix.shape}."
        )
    return matrix


def plot_correlation_matrix(
    matrix: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    vmin: float = -1.0,
    vmax: float = 1.0,
    cmap: str = "RdBu_r",
    reorder: bool = False,
) -> Path:
    """Correlation matrix with region labels (``nilearn.plotting.plot_matrix``).

    Parameters
    ----------
    matrix : array-like of shape (n, n) or (n(n-1)/2,)
        Dense matrix or the row-major upper-triangle vector.
    out_path : str or path
        PNG to write.
    labels : sequence of str or None
        Region names (shown when there are at most 100 regions).
    title : str or None
    vmin, vmax : float, default=-1, 1
    cmap : str, default="RdBu_r"
        A diverging map for correlations; pass a sequential one (e.g.
        ``"viridis"``) for non-negative values.
    reorder : bool, default=False
        Order the regions by hierarchical clustering (nilearn).

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> r = np.corrcoef(rng.standard_normal((4, 40)))
    >>> path = report.plot_correlation_matrix(r, Path(tmp.name) / "fc.png", labels=list("ABCD"))
    >>> path.stat().st_size > 0
    True
    >>> tmp.cleanup()
    """
    from nilearn import plotting

    matrix = _as_square(matrix)
    n = matrix.shape[0]
    if labels is not None and len(labels) != n:
        raise ValueError(f"Expected {n} labels for a {n}x{n} matrix; got {len(labels)}.")
    show_labels = list(labels) if labels is not None and n <= 100 else None
    plt = _pyplot()
    size = 6 if show_labels is None else min(4 + 0.18 * n, 20)
    fig = plt.figure(figsize=(size, size * 0.85))
    plot_matrix_kwargs = {
        "labels": show_labels,
        "vmin": vmin,
        "vmax": vmax,
        "figure": fig,
        "title": title,
        "cmap": cmap,
        "reorder": reorder and show_labels is not None,
    }
    display = np.where(np.isfinite(matrix), matrix, 0.0)
    plotting.plot_matrix(display, **plot_matrix_kwargs)
    return _save(fig, out_path)


def plot_connectome(
    matrix: npt.ArrayLike | sp.spmatrix | sp.sparray,
    coords: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    edge_threshold: str | float = "95%",
    title: str | None = None,
    node_size: float = 20,
) -> Path:
    """Edges on a glass brain (``nilearn.plotting.plot_connectome``).

    Parameters
    ----------
    matrix : array-like or scipy.sparse matrix of shape (n, n), or a triu vector
        Connectivity (sparse CSR output of connscale is accepted).
    coords : array-like of shape (n, 3)
        MNI coordinates of the regions.
    out_path : str or path
    edge_threshold : str or float, default="95%"
        Edges shown: a percentile of |weight| or an absolute value.
    title : str or None
    node_size : float, default=20

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> coords = rng.uniform(-60, 60, (5, 3))  # MNI mm
    >>> r = np.corrcoef(rng.standard_normal((5, 40)))
    >>> report.plot_connectome(r, coords, Path(tmp.name) / "connectome.png").suffix
    '.png'
    >>> tmp.cleanup()
    """
    from nilearn import plotting

    matrix = _as_square(matrix)
    coords = np.asarray(coords, dtype=np.float64)
    if coords.shape != (matrix.shape[0], 3):
        raise ValueError(
            f"'coords' must have shape ({matrix.shape[0]}, 3), one MNI coordinate per "
            f"region; got {coords.shape}."
        )
    matrix = np.where(np.isfinite(matrix), matrix, 0.0)
    np.fill_diagonal(matrix, 0.0)
    plt = _pyplot()
    fig = plt.figure(figsize=(9, 3.5))
    plotting.plot_connectome(
        matrix,
        coords,
        edge_threshold=edge_threshold,
        figure=fig,
        title=title,
        node_size=node_size,
        colorbar=True,
    )
    return _save(fig, out_path)


def plot_edge_timecourses(
    timecourses: npt.ArrayLike | DynamicConnectivity,
    out_path: str | os.PathLike,
    *,
    edge_labels: Sequence[str] | None = None,
    window_times: npt.ArrayLike | None = None,
    max_edges: int = 8,
    title: str | None = None,
    node_labels: Sequence[str] | None = None,
) -> Path:
    """Windowed-correlation time courses of a few edges (DFC).

    Parameters
    ----------
    timecourses : array-like of shape (n_edges, n_windows), or DynamicFCResult
        A result of :func:`connscale.fc.dynamic_correlation` gives the
        courses of its upper-triangle edges, drawn against the window
        centres (time points).
    out_path : str or path
    edge_labels : sequence of str or None
    window_times : array-like of shape (n_windows,) or None
        x axis (e.g. window centre in seconds); default the window index.
    node_labels : sequence of str or None
        With a DynamicFCResult: series names, edges named ``"a-b"``.
    max_edges : int, default=8
        The edges with the largest variance over time are drawn.
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> courses = np.tanh(rng.standard_normal((3, 20)))  # 3 edges, 20 windows
    >>> report.plot_edge_timecourses(courses, Path(tmp.name) / "edges.png").name
    'edges.png'
    >>> tmp.cleanup()
    """
    x_label = "window" if window_times is None else "time (s)"
    if hasattr(timecourses, "to_teneto"):  # a DynamicFCResult
        result = timecourses
        stack = result.to_teneto()  # (N, N, n_windows)
        rows, cols = np.triu_indices(stack.shape[0], 1)
        timecourses = stack[rows, cols, :]
        if edge_labels is None:
            edge_labels = [
                f"{node_labels[i]}-{node_labels[j]}" if node_labels else f"{i}-{j}"
                for i, j in zip(rows, cols)
            ]
        if window_times is None:
            window_times = result.window_starts + (result.window_length - 1) / 2
            x_label = "window centre (time point)"
    courses = np.atleast_2d(np.asarray(timecourses, dtype=np.float64))
    if courses.ndim != 2:
        raise ValueError(f"'timecourses' must be (n_edges, n_windows); got {courses.shape}.")
    n_edges, n_windows = courses.shape
    x = np.arange(n_windows) if window_times is None else np.asarray(window_times)
    if x.shape != (n_windows,):
        raise ValueError(f"'window_times' must have {n_windows} values; got {x.shape}.")
    if edge_labels is not None and len(edge_labels) != n_edges:
        raise ValueError(f"Expected {n_edges} edge labels; got {len(edge_labels)}.")
    order = np.argsort(-np.nan_to_num(np.nanvar(courses, axis=1)))[:max_edges]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for k in order:
        name = edge_labels[k] if edge_labels is not None else f"edge {k}"
        ax.plot(x, courses[k], lw=1.2, label=name)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xlabel(x_label)
    ax.set_ylabel("correlation")
    ax.set_title(title or f"Edge time courses ({len(order)} of {n_edges}, most variable)")
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    return _save(fig, out_path)


def plot_dfc_windows(
    result: DynamicConnectivity,
    out_path: str | os.PathLike,
    *,
    max_windows: int = 4,
    title: str | None = None,
) -> Path:
    """Correlation matrices of a few windows of a DFC run, evenly spread over it.

    Parameters
    ----------
    result : DynamicFCResult
        A result of :func:`connscale.fc.dynamic_correlation`.
    out_path : str or path
    max_windows : int, default=4
    title : str or None

    Returns
    -------
    Path
    """
    n_windows = len(result)
    if n_windows == 0:
        raise ValueError("The DFC result has no window to show.")
    chosen = sorted(
        set(np.linspace(0, n_windows - 1, min(max_windows, n_windows)).round().astype(int).tolist())
    )
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, len(chosen), figsize=(3.2 * len(chosen) + 1, 3.4), squeeze=False, layout="constrained"
    )
    image = None
    for ax, i in zip(axes[0], chosen):
        image = ax.imshow(
            result.to_dense(i), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
        )
        start = int(result.window_starts[i])
        ax.set_title(f"window {i} (t {start}-{start + result.window_length - 1})", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes[0].tolist(), label="Pearson r", shrink=0.8)
    fig.suptitle(title or f"Sliding-window correlation ({result.kind})")
    return _save(fig, out_path)


def window_similarity(windows: npt.ArrayLike) -> np.ndarray:
    """Pearson correlation between the edge vectors of every pair of windows.

    Parameters
    ----------
    windows : array-like of shape (n_windows, n_edges)

    Returns
    -------
    ndarray of shape (n_windows, n_windows)

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.report import window_similarity
    >>> windows = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.1], [3.0, 2.0, 1.0]])
    >>> window_similarity(windows).round(2)
    array([[ 1.,  1., -1.],
           [ 1.,  1., -1.],
           [-1., -1.,  1.]])
    """
    windows = np.asarray(windows, dtype=np.float64)
    if windows.ndim != 2 or windows.shape[0] < 2:
        raise ValueError(
            "'windows' must be (n_windows, n_edges) with at least 2 windows; got shape "
            f"{windows.shape}."
        )
    windows = np.nan_to_num(windows)
    centred = windows - windows.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centred, axis=1)
    norms[norms == 0] = np.nan
    unit = centred / norms[:, None]
    return unit @ unit.T


def plot_window_similarity(
    windows: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    precomputed: bool = False,
    title: str | None = None,
) -> Path:
    """Window-to-window similarity matrix of a DFC run.

    Parameters
    ----------
    windows : array-like
        (n_windows, n_edges) edge vectors, or with ``precomputed=True`` a
        (n_windows, n_windows) similarity matrix.
    out_path : str or path
    precomputed : bool, default=False
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> windows = rng.standard_normal((12, 45))  # 12 windows of 45 edges
    >>> report.plot_window_similarity(windows, Path(tmp.name) / "similarity.png").name
    'similarity.png'
    >>> tmp.cleanup()
    """
    similarity = (
        np.asarray(windows, dtype=np.float64) if precomputed else window_similarity(windows)
    )
    if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"Expected a square similarity matrix; got {similarity.shape}.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    image = ax.imshow(similarity, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    fig.colorbar(image, ax=ax, label="correlation of edge vectors")
    ax.set_xlabel("window")
    ax.set_ylabel("window")
    ax.set_title(title or "Window-to-window similarity")
    return _save(fig, out_path)


def _load_img(img: str | Path | SpatialImage) -> SpatialImage:
    import nibabel as nib

    if isinstance(img, (str, Path)):
        return nib.load(str(img))
    return img


def _is_img(obj: object) -> bool:
    if isinstance(obj, (str, Path)):
        return str(obj).lower().endswith((".nii", ".nii.gz"))
    return hasattr(obj, "get_fdata") and hasattr(obj, "affine")


def plot_network_maps(
    maps: str | Path | SpatialImage | npt.ArrayLike | sp.spmatrix | sp.sparray,
    out_path: str | os.PathLike,
    *,
    max_networks: int = 6,
    title: str | None = None,
    bg_img: str | Path | SpatialImage | None = None,
) -> Path:
    """Spatial maps of r1DL networks.

    Parameters
    ----------
    maps : NIfTI image or path (4-D, one volume per network), or array-like
        of shape (n_networks, n_voxels) (dense or scipy.sparse, as the sparse V).
        Images are drawn with ``nilearn.plotting.plot_prob_atlas`` (all maps
        overlaid on up to 6 axial slices; ``bg_img`` defaults to the MNI template, so pass the mean
        functional image for data in native space). Arrays give one strip
        plot per network of its non-zero loadings by voxel index.
    out_path : str or path
    max_networks : int, default=6
        Arrays: draw the first ``max_networks`` networks.
    title : str or None
    bg_img : NIfTI image, path or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> loadings = rng.standard_normal((2, 100)) * (rng.uniform(size=(2, 100)) < 0.1)
    >>> report.plot_network_maps(loadings, Path(tmp.name) / "maps.png").name
    'maps.png'
    >>> tmp.cleanup()
    """
    plt = _pyplot()
    if _is_img(maps):
        from nilearn import plotting

        img = _load_img(maps)
        if len(img.shape) != 4:
            raise ValueError(f"Network maps must be a 4-D image; got shape {img.shape}.")
        fig = plt.figure(figsize=(9, 3.5))
        kwargs = {"figure": fig, "title": title or f"{img.shape[3]} networks", "colorbar": False}
        if bg_img is not None:
            kwargs["bg_img"] = _load_img(bg_img)
        import warnings

        with warnings.catch_warnings():  # nilearn's masked-array conversion notices
            warnings.filterwarnings("ignore", message=".*converting a masked element")
            plotting.plot_prob_atlas(
                img,
                view_type="filled_contours",
                display_mode="z",
                cut_coords=min(6, img.shape[2]),
                **kwargs,
            )
        return _save(fig, out_path)
    try:
        import scipy.sparse as sp

        if sp.issparse(maps):
            maps = maps.toarray()
    except ImportError:  # pragma: no cover
        pass
    maps = np.atleast_2d(np.asarray(maps, dtype=np.float64))
    if maps.ndim != 2:
        raise ValueError(f"'maps' must be (n_networks, n_voxels); got {maps.shape}.")
    shown = maps[:max_networks]
    fig, axes = plt.subplots(
        shown.shape[0], 1, figsize=(8, 1.3 * shown.shape[0] + 0.6), sharex=True, squeeze=False
    )
    for k, ax in enumerate(axes[:, 0]):
        nonzero = np.flatnonzero(shown[k])
        ax.vlines(nonzero, 0, shown[k, nonzero], color="C0", lw=0.6)
        ax.axhline(0, color="0.6", lw=0.6)
        ax.set_ylabel(f"net {k}", fontsize=8)
        ax.text(
            1.0,
            1.0,
            f"{nonzero.size} voxels",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7,
        )
    axes[-1, 0].set_xlabel("voxel")
    axes[0, 0].set_title(title or f"Network maps ({shown.shape[0]} of {maps.shape[0]})")
    return _save(fig, out_path)


def plot_network_timecourses(
    timecourses: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    t_r: float | None = None,
    max_networks: int = 6,
    title: str | None = None,
) -> Path:
    """Time courses of r1DL networks (columns of U).

    Parameters
    ----------
    timecourses : array-like of shape (n_timepoints, n_networks)
    out_path : str or path
    t_r : float or None
        Repetition time in seconds, for a time axis in seconds.
    max_networks : int, default=6
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> U = rng.standard_normal((50, 3))
    >>> report.plot_network_timecourses(U, Path(tmp.name) / "courses.png", t_r=2.0).name
    'courses.png'
    >>> tmp.cleanup()
    """
    courses = np.asarray(timecourses, dtype=np.float64)
    if courses.ndim == 1:
        courses = courses[:, None]
    if courses.ndim != 2:
        raise ValueError(f"'timecourses' must be (n_timepoints, n_networks); got {courses.shape}.")
    shown = courses[:, :max_networks]
    x = np.arange(courses.shape[0]) * (t_r if t_r else 1.0)
    plt = _pyplot()
    fig, axes = plt.subplots(
        shown.shape[1], 1, figsize=(8, 1.2 * shown.shape[1] + 0.6), sharex=True, squeeze=False
    )
    for k, ax in enumerate(axes[:, 0]):
        ax.plot(x, shown[:, k], lw=1.0, color=f"C{k % 10}")
        ax.set_ylabel(f"net {k}", fontsize=8)
    axes[-1, 0].set_xlabel("time (s)" if t_r else "volume")
    axes[0, 0].set_title(title or "Network time courses")
    return _save(fig, out_path)


def plot_networks(
    timecourses: npt.ArrayLike,
    maps: str | Path | SpatialImage | npt.ArrayLike | sp.spmatrix | sp.sparray,
    out_path: str | os.PathLike,
    *,
    max_networks: int = 4,
    bg_img: str | Path | SpatialImage | None = None,
    title: str | None = None,
) -> Path:
    """Time course and spatial map of the first r1DL networks, one row each.

    Parameters
    ----------
    timecourses : array-like of shape (n_timepoints, n_networks)
        The dictionary U.
    maps : NIfTI image or path (4-D, one volume per network), or array-like
        of shape (n_networks, n_voxels) (dense or scipy.sparse). Images are
        drawn as axial stat maps over ``bg_img``, arrays as the non-zero
        loadings by voxel index.
    out_path : str or path
    max_networks : int, default=4
    bg_img : NIfTI image, path or None
    title : str or None

    Returns
    -------
    Path
    """
    import scipy.sparse as sp

    courses = np.asarray(timecourses, dtype=np.float64)
    if courses.ndim != 2:
        raise ValueError(f"'timecourses' must be (n_timepoints, n_networks); got {courses.shape}.")
    image = _load_img(maps) if _is_img(maps) else None
    if image is None:
        maps = sp.csr_matrix(maps)
    n = min(max_networks, courses.shape[1])
    plt = _pyplot()
    fig, axes = plt.subplots(
        n, 2, figsize=(11, 2.4 * n), squeeze=False, gridspec_kw={"width_ratios": [1.4, 1]}
    )
    for k in range(n):
        ax_t, ax_m = axes[k]
        ax_t.plot(courses[:, k], lw=1)
        ax_t.set_ylabel(f"network {k}")
        ax_t.set_xlabel("time point" if k == n - 1 else "")
        if image is not None:
            from nilearn import image as nimage
            from nilearn import plotting

            plotting.plot_stat_map(
                nimage.index_img(image, k),
                bg_img=_load_img(bg_img) if bg_img is not None else None,
                axes=ax_m,
                display_mode="z",
                cut_coords=3,
                colorbar=False,
                annotate=False,
                draw_cross=False,
            )
        else:
            row = maps[k]
            ax_m.vlines(row.indices, 0, row.data, lw=0.6)
            ax_m.set_xlim(0, maps.shape[1])
            ax_m.set_xlabel("voxel" if k == n - 1 else "")
    axes[0][0].set_title(title or "time course")
    axes[0][1].set_title("spatial map")
    fig.subplots_adjust(left=0.07, right=0.98, top=0.93, bottom=0.08, hspace=0.35, wspace=0.12)
    return _save(fig, out_path)


def plot_rmse_map(
    rmse: str | Path | SpatialImage | npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    n_slices: int = 8,
    title: str | None = None,
) -> Path:
    """Axial slices of a voxel-wise RMSE map (LiFE).

    Parameters
    ----------
    rmse : NIfTI image, path or array-like of shape (x, y, z)
        NaN or 0 outside the voxels the model covers.
    out_path : str or path
    n_slices : int, default=8
        Evenly spaced axial slices through the covered voxels.
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> rmse = rng.uniform(0, 10, (8, 8, 8))
    >>> report.plot_rmse_map(rmse, Path(tmp.name) / "rmse.png", n_slices=4).name
    'rmse.png'
    >>> tmp.cleanup()
    """
    data = _load_img(rmse).get_fdata() if _is_img(rmse) else np.asarray(rmse, float)
    if data.ndim != 3:
        raise ValueError(f"'rmse' must be a 3-D map; got shape {data.shape}.")
    covered = np.isfinite(data) & (data != 0)
    if not covered.any():
        raise ValueError("The RMSE map has no finite non-zero voxel to show.")
    zs = np.flatnonzero(covered.any(axis=(0, 1)))
    picks = np.unique(np.linspace(zs.min(), zs.max(), min(n_slices, zs.size)).round().astype(int))
    vmax = float(np.nanpercentile(data[covered], 99))
    plt = _pyplot()
    cols = min(4, picks.size)
    rows = int(np.ceil(picks.size / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols + 1, 2.4 * rows + 0.5), squeeze=False)
    masked = np.ma.masked_where(~covered, data)
    image = None
    for ax, z in zip(axes.ravel(), picks):
        image = ax.imshow(masked[:, :, z].T, origin="lower", cmap="magma", vmin=0, vmax=vmax)
        ax.set_title(f"z = {z}", fontsize=8)
    for ax in axes.ravel():
        ax.axis("off")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="RMSE", shrink=0.8)
    fig.suptitle(title or "Model RMSE")
    return _save(fig, out_path)


def plot_weight_histogram(
    weights: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    bins: int = 50,
    log: bool = True,
    title: str | None = None,
) -> Path:
    """Histogram of fiber weights (LiFE), zeros counted apart.

    Parameters
    ----------
    weights : array-like of shape (n_fibers,)
    out_path : str or path
    bins : int, default=50
    log : bool, default=True
        Logarithmic count axis.
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> weights = np.where(rng.uniform(size=200) < 0.5, 0.0, rng.exponential(size=200))
    >>> report.plot_weight_histogram(weights, Path(tmp.name) / "weights.png").name
    'weights.png'
    >>> tmp.cleanup()
    """
    weights = np.ravel(np.asarray(weights, dtype=np.float64))
    if weights.size == 0:
        raise ValueError("'weights' is empty.")
    positive = weights[np.isfinite(weights) & (weights > 0)]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if positive.size:
        ax.hist(positive, bins=bins, color="C0", log=log)
    ax.set_xlabel("weight")
    ax.set_ylabel("fibers")
    n_zero = int(np.sum(weights == 0))
    ax.set_title(
        title
        or f"Fiber weights: {positive.size} > 0, {n_zero} pruned "
        f"({100.0 * n_zero / weights.size:.1f}%)"
    )
    return _save(fig, out_path)


def plot_lambda_sweep(
    rows: Sequence[Mapping], out_path: str | os.PathLike, *, title: str | None = None
) -> Path:
    """Plot weight sum, non-zero weights and cross-validated median RMSE against λ.

    The rows are those of a ReAl-LiFE λ sweep.

    Parameters
    ----------
    rows : sequence of dict
        :attr:`connscale.life.LiFEFit.lambda_sweep`: ``lam``, ``weight_sum``,
        ``n_nonzero`` and ``cv_rmse_median`` per λ.
    out_path : str or path
    title : str or None

    Returns
    -------
    Path
    """
    if not rows:
        raise ValueError("'rows' is empty: no λ to show.")
    lam = np.array([row["lam"] for row in rows], dtype=np.float64)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, key, label in zip(
        axes,
        ["weight_sum", "n_nonzero", "cv_rmse_median"],
        ["Σ weights", "non-zero weights", "cross-validated median RMSE"],
    ):
        ax.plot(lam, [row[key] for row in rows], "o-")
        if np.all(lam > 0):
            ax.set_xscale("log")
        ax.set_xlabel("λ")
        ax.set_title(label)
    if title:
        fig.suptitle(title)
    return _save(fig, out_path)


def plot_confusion_matrix(
    matrix: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    class_names: Sequence[str] = ("negative", "positive"),
    normalize: bool = False,
    title: str | None = None,
) -> Path:
    """Confusion matrix ``[[TN, FP], [FN, TP]]`` (rows: truth, columns: prediction).

    Parameters
    ----------
    matrix : array-like of shape (n_classes, n_classes)
    out_path : str or path
    class_names : sequence of str
    normalize : bool, default=False
        Show row proportions instead of counts.
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> report.plot_confusion_matrix([[8, 2], [1, 9]], Path(tmp.name) / "confusion.png").name
    'confusion.png'
    >>> tmp.cleanup()
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Expected a square confusion matrix; got shape {matrix.shape}.")
    if len(class_names) != matrix.shape[0]:
        raise ValueError(f"Expected {matrix.shape[0]} class names; got {len(class_names)}.")
    shown = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1) if normalize else matrix
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.6))
    image = ax.imshow(shown, cmap="Blues", vmin=0)
    fig.colorbar(image, ax=ax)
    for (r, c), value in np.ndenumerate(shown):
        text = f"{value:.2f}" if normalize else f"{value:g}"
        ax.text(
            c,
            r,
            text,
            ha="center",
            va="center",
            color="white" if value > shown.max() / 2 else "black",
        )
    ax.set_xticks(range(len(class_names)), [str(c) for c in class_names])
    ax.set_yticks(range(len(class_names)), [str(c) for c in class_names])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title or "Confusion matrix")
    return _save(fig, out_path)


def plot_roc(
    y_true: npt.ArrayLike,
    scores: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """ROC curves of out-of-fold scores, one per cross-validation repeat.

    Parameters
    ----------
    y_true : array-like of shape (n_subjects,)
        0/1 labels (1 positive).
    scores : array-like of shape (n_subjects,) or (n_repeats, n_subjects)
        Decision values or positive-class probabilities.
    out_path : str or path
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([0, 1], 10)
    >>> scores = y + rng.standard_normal(20)
    >>> report.plot_roc(y, scores, Path(tmp.name) / "roc.png").name
    'roc.png'
    >>> tmp.cleanup()
    """
    from sklearn.metrics import roc_auc_score, roc_curve

    y_true = np.asarray(y_true)
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    if scores.shape[1] != y_true.shape[0]:
        raise ValueError(
            f"'scores' must have {y_true.shape[0]} columns (one per subject); "
            f"got shape {scores.shape}."
        )
    if np.unique(y_true).size != 2:
        raise ValueError("'y_true' must contain both classes for a ROC curve.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    aucs = []
    for row in scores:
        fpr, tpr, _ = roc_curve(y_true, row)
        aucs.append(roc_auc_score(y_true, row))
        ax.plot(fpr, tpr, color="C0", alpha=max(0.15, 1.0 / scores.shape[0]), lw=1.2)
    ax.plot([0, 1], [0, 1], ls="--", color="0.6", lw=0.8)
    ax.set_xlabel("false positive rate (1 - specificity)")
    ax.set_ylabel("true positive rate (sensitivity)")
    ax.set_title(
        title
        or f"ROC, AUC = {np.mean(aucs):.3f}"
        + (f" ± {np.std(aucs):.3f} ({scores.shape[0]} repeats)" if scores.shape[0] > 1 else "")
    )
    ax.set_aspect("equal")
    return _save(fig, out_path)


def plot_metric_comparison(
    results: dict,
    out_path: str | os.PathLike,
    *,
    metrics: Sequence[str] = ("accuracy", "sensitivity", "specificity"),
    chance: float | None = 0.5,
    title: str | None = None,
) -> Path:
    """Plot grouped bars of cross-validated metrics with their 95% intervals.

    Parameters
    ----------
    results : dict of str -> dict
        Name -> :func:`connscale.classify.cross_validate` result (or any dict
        holding ``{metric: {"mean", "ci_low", "ci_high"}}``), e.g. the output
        of :func:`connscale.classify.compare_features`.
    out_path : str or path
    metrics : sequence of str, default=('accuracy', 'sensitivity', 'specificity')
    chance : float or None, default=0.5
        Dashed line at chance level; None for none.
    title : str or None

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from connscale import report
    >>> tmp = tempfile.TemporaryDirectory()
    >>> rng = np.random.default_rng(0)
    >>> results = {"static": {"accuracy": {"mean": 0.8, "ci_low": 0.7, "ci_high": 0.9}},
    ...            "dynamic": {"accuracy": {"mean": 0.7, "ci_low": 0.55, "ci_high": 0.82}}}
    >>> path = report.plot_metric_comparison(results, Path(tmp.name) / "metrics.png",
    ...                                      metrics=["accuracy"])
    >>> path.name
    'metrics.png'
    >>> tmp.cleanup()
    """
    if not results:
        raise ValueError("'results' is empty.")
    for name, result in results.items():
        for metric in metrics:
            entry = result.get(metric) if isinstance(result, dict) else None
            if not isinstance(entry, dict) or not {"mean", "ci_low", "ci_high"} <= set(entry):
                raise ValueError(f"results[{name!r}] has no {metric!r} with mean, ci_low, ci_high.")
    plt = _pyplot()
    names = list(results)
    width = 0.8 / len(names)
    x = np.arange(len(metrics))
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(metrics), 3.8))
    for k, name in enumerate(names):
        means = np.array([results[name][m]["mean"] for m in metrics])
        low = means - np.array([results[name][m]["ci_low"] for m in metrics])
        high = np.array([results[name][m]["ci_high"] for m in metrics]) - means
        ax.bar(
            x + (k - (len(names) - 1) / 2) * width,
            means,
            width,
            yerr=[low, high],
            capsize=3,
            label=name,
            color=f"C{k % 10}",
        )
    if chance is not None:
        ax.axhline(chance, ls="--", color="0.5", lw=0.8)
    ax.set_xticks(x, list(metrics))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("proportion (95% Clopper-Pearson interval)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title or "Cross-validated classification")
    return _save(fig, out_path)


def plot_state_matrices(
    states: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    fractions: npt.ArrayLike | None = None,
    title: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
) -> Path:
    """Plot the connectivity states side by side (DFC states).

    Parameters
    ----------
    states : array-like of shape (n_states, n, n) or (n_states, n(n-1)/2)
        Matrices or row-major upper-triangle vectors.
    out_path : str or path
    fractions : array-like of shape (n_states,) or None
        Share of the windows in each state, shown in the titles.
    title : str or None
    vmin, vmax : float or None
        Colour range (default symmetric around 0, from the data).

    Returns
    -------
    Path
    """
    matrices = [_as_square(s) for s in states]
    k = len(matrices)
    if fractions is not None and len(fractions) != k:
        raise ValueError(f"Expected {k} fractions, one per state; got {len(fractions)}.")
    finite = np.concatenate([m[np.isfinite(m)] for m in matrices])
    bound = float(np.abs(finite).max()) if finite.size else 1.0
    vmin = -bound if vmin is None else vmin
    vmax = bound if vmax is None else vmax
    plt = _pyplot()
    fig, axes = plt.subplots(1, k, figsize=(2.8 * k + 1, 3.2), squeeze=False)
    image = None
    for j, (ax, matrix) in enumerate(zip(axes[0], matrices)):
        image = ax.imshow(
            np.where(np.isfinite(matrix), matrix, 0.0),
            cmap="RdBu_r",
            vmin=vmin,
            vmax=vmax,
            interpolation="nearest",
        )
        name = f"state {j + 1}"
        if fractions is not None:
            name += f" ({100 * float(fractions[j]):.0f}%)"
        ax.set_title(name, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    fig.suptitle(title or "Connectivity states")
    return _save(fig, out_path)


def plot_state_sequence(
    labels: npt.ArrayLike,
    out_path: str | os.PathLike,
    *,
    n_states: int | None = None,
    window_times: npt.ArrayLike | None = None,
    title: str | None = None,
) -> Path:
    """One subject's state at every window.

    Parameters
    ----------
    labels : array-like of int, shape (n_windows,)
        States numbered from 0 (shown from 1).
    out_path : str or path
    n_states : int or None
        Number of states (default: the largest label + 1).
    window_times : array-like of shape (n_windows,) or None
        x axis (e.g. window centres in seconds); default the window index.
    title : str or None

    Returns
    -------
    Path
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"'labels' must be 1-D; got shape {labels.shape}.")
    n_states = int(labels.max()) + 1 if n_states is None else int(n_states)
    x = np.arange(labels.size) if window_times is None else np.asarray(window_times)
    if x.shape != labels.shape:
        raise ValueError(f"'window_times' must have {labels.size} values; got {x.shape}.")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.step(x, labels + 1, where="mid", color="#1f3a5f", lw=1.4)
    ax.set_yticks(np.arange(1, n_states + 1))
    ax.set_ylim(0.5, n_states + 0.5)
    ax.set_xlabel("window" if window_times is None else "time (s)")
    ax.set_ylabel("state")
    ax.set_title(title or "State sequence")
    return _save(fig, out_path)


def plot_transition_matrix(
    matrix: npt.ArrayLike, out_path: str | os.PathLike, *, title: str | None = None
) -> Path:
    """Transition probabilities between states (rows: from, columns: to).

    Parameters
    ----------
    matrix : array-like of shape (n_states, n_states)
    out_path : str or path
    title : str or None

    Returns
    -------
    Path
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Expected a square transition matrix; got shape {matrix.shape}.")
    k = matrix.shape[0]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.1 * k + 2.5, 1.0 * k + 1.8))
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=max(1e-12, float(matrix.max())))
    for i in range(k):
        for j in range(k):
            ax.text(
                j,
                i,
                f"{matrix[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if matrix[i, j] < 0.5 * matrix.max() else "black",
            )
    ticks = np.arange(k)
    ax.set_xticks(ticks, [str(t + 1) for t in ticks])
    ax.set_yticks(ticks, [str(t + 1) for t in ticks])
    ax.set_xlabel("to state")
    ax.set_ylabel("from state")
    fig.colorbar(image, ax=ax, label="probability")
    ax.set_title(title or "State transitions")
    return _save(fig, out_path)
