"""A DFC result in the peers' containers: teneto's ``TemporalNetwork`` and an
xarray ``DataArray``. Both packages are optional and imported only here."""

from __future__ import annotations

import numpy as np

__all__ = ["to_teneto_network", "to_xarray"]


def _require(module: str, purpose: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs the '{module}' package, which is not installed "
            f"(pip install {module})."
        ) from exc


def to_xarray(result, *, t_r: float | None = None, labels=None):
    """The windows as an ``xarray.DataArray`` with dims (window, node_i, node_j)
    (xarray needs distinct names for the two node axes).

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


def to_teneto_network(result, *, t_r: float | None = None):
    """The windows as a teneto ``TemporalNetwork`` (nodes × nodes × windows).

    Parameters
    ----------
    result : DynamicConnectivity
    t_r : float or None
        Repetition time; the network's time unit becomes seconds between
        window starts (``step × t_r``).

    Returns
    -------
    teneto.TemporalNetwork
    """
    teneto = _require("teneto", "to_teneto_network")
    array = np.nan_to_num(result.to_teneto())
    for i in range(array.shape[2]):
        np.fill_diagonal(array[:, :, i], 0.0)
    kwargs = {}
    if t_r is not None:
        kwargs = {"timeunit": "s", "timetype": "discrete"}
    return teneto.TemporalNetwork(from_array=array, nettype="wu", **kwargs)
