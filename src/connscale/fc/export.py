"""A DFC result in the peers' containers: teneto's ``TemporalNetwork`` and xarray's ``DataArray``.

Both packages are optional and imported only here.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["to_teneto_network", "to_xarray"]


def _require(module: str, purpose: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name != module:  # installed, but something it imports is missing
            raise ImportError(
                f"{purpose} needs the '{module}' package, which is installed but failed "
                f"to import: {exc}"
            ) from exc
        raise ImportError(
            f"{purpose} needs the '{module}' package, which is not installed "
            f"(pip install {module})."
        ) from exc


def _import_teneto():
    """Import teneto, with ``nilearn.input_data`` standing for ``nilearn.maskers`` meanwhile.

    The alias exists during teneto's import only.

    teneto 0.5.3 (its last release) imports ``nilearn.input_data`` when it
    is imported, for a parcellation helper; nilearn moved the maskers to
    ``nilearn.maskers`` (0.9) and removed ``nilearn.input_data`` (0.14), so
    ``import teneto`` fails with current nilearn. The alias is put in
    ``sys.modules`` for that one import and taken out again; teneto's
    network classes, which the export uses, need nothing from it.
    """
    import importlib.util
    import sys

    alias = None
    if "teneto" not in sys.modules and importlib.util.find_spec("nilearn.input_data") is None:
        import nilearn.maskers

        alias = sys.modules["nilearn.input_data"] = nilearn.maskers
    try:
        return _require("teneto", "to_teneto_network")
    finally:
        if alias is not None and sys.modules.get("nilearn.input_data") is alias:
            del sys.modules["nilearn.input_data"]


def to_xarray(result, *, t_r: float | None = None, labels=None):
    """Return the windows as an ``xarray.DataArray`` with dims (window, node_i, node_j).

    xarray needs distinct names for the two node axes.

    Parameters
    ----------
    result : DynamicConnectivity
    t_r : float or None
        Repetition time: adds the coordinate ``onset_s`` (window start, s).
    labels : list of str or None
        Node names (default ``0``, ``1``, ...).

    Returns
    -------
    xarray.DataArray
        Coordinates ``window``, ``onset`` (first time point of each window),
        ``node_i``, ``node_j``; attributes ``window_length``, ``step``, ``kind``.
    """
    xr = _require("xarray", "to_xarray")
    stack = np.moveaxis(result.to_teneto(), 2, 0)  # (window, node, node)
    nodes = labels if labels is not None else [str(i) for i in range(result.n_series)]
    if len(nodes) != result.n_series:
        raise ValueError(f"Expected {result.n_series} node labels; got {len(nodes)}.")
    coords = {
        "window": np.arange(len(result)),
        "onset": ("window", result.window_starts),
        "node_i": list(nodes),
        "node_j": list(nodes),
    }
    if t_r is not None:
        coords["onset_s"] = ("window", result.window_starts * float(t_r))
    return xr.DataArray(
        stack,
        dims=("window", "node_i", "node_j"),
        coords=coords,
        attrs={
            "window_length": result.window_length,
            "step": result.step,
            "kind": result.kind,
            "measure": "Pearson correlation",
        },
    )


def to_teneto_network(result, *, t_r: float | None = None, labels=None):
    """Return the windows as a teneto ``TemporalNetwork`` (nodes × nodes × windows).

    A weighted undirected network (``nettype='wu'``) with one time point per
    window, built by teneto from the dense (N, N, n_windows) array: teneto
    keeps it as that array, or as its edge list when most entries are zero
    (a thresholded ``kind='sparse'`` result). Self-loops are left out, and
    undefined correlations (windows where a series is constant) are 0.

    Parameters
    ----------
    result : DynamicConnectivity
    t_r : float or None
        Repetition time: the network's ``timeunit`` becomes the step between
        window starts in seconds (``'<step × t_r> s'``) and its
        ``timelabels`` the window starts in seconds.
    labels : list of str or None
        Node names (teneto's ``nodelabels``).

    Returns
    -------
    teneto.TemporalNetwork
    """
    teneto = _import_teneto()
    if labels is not None and len(labels) != result.n_series:
        raise ValueError(f"Expected {result.n_series} node labels; got {len(labels)}.")
    array = np.nan_to_num(result.to_teneto())
    for i in range(array.shape[2]):
        np.fill_diagonal(array[:, :, i], 0.0)
    kwargs = {"timetype": "discrete"}
    if labels is not None:
        kwargs["nodelabels"] = list(labels)
    if t_r is not None:
        kwargs["timeunit"] = f"{result.step * float(t_r):g} s"
        kwargs["timelabels"] = (result.window_starts * float(t_r)).tolist()
    with warnings.catch_warnings():
        # teneto 0.5.3 calls pandas with arguments pandas 3 deprecates (inplace=):
        # nothing the caller can act on.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"teneto\.")
        return teneto.TemporalNetwork(from_array=array, nettype="wu", **kwargs)
