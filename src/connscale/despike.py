"""Despiking of time series as AFNI's ``3dDespike -NEW -nomask`` (what XCP-D's ``--despike`` runs).

Sources: AFNI ``src/3dDespike.c`` (``DES_despike9``, ``DES_solve``, the main
loop's "smash" edit) and its help; XCP-D ``xcp_d/workflows/bold/postprocessing.py``
``init_despike_wf`` (``args='-nomask -NEW'``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from connscale._compute import planner_for, resolve_device, resolve_dtype
from connscale._docs import fill_doc
from connscale._validation import check_timeseries, validate_params

__all__ = ["CUT1", "CUT2", "despike", "despike_basis"]

#: The spike threshold ``c1`` of ``3dDespike`` (in sigmas).
CUT1 = 2.5
#: The upper bound ``c2`` of the squashed values (in sigmas).
CUT2 = 4.0
#: ``DES_despike9``'s threshold: this many times the median of the local MADs.
_LOCAL_THRESHOLD = 6.789
#: The local median's window (``mead9``).
_WINDOW = 9
#: Fewest time points ``3dDespike`` accepts.
MIN_TIMEPOINTS = 15
#: Values held per time point of a series in a block (the 9-wide windows and their copies).
_VALUES_PER_TIMEPOINT = 40


def despike_basis(n_timepoints: int) -> np.ndarray:
    """Return the smooth curve's regressors of ``3dDespike`` for a series of ``n_timepoints``.

    The columns are 1, u, u² with u = (t − (T − 1)/2)·2/T, then sin(2πkt/T)
    and cos(2πkt/T) for k = 1 … L, L = rint(T/30) (``-corder``'s default;
    ``-NEW`` does not cap it at 50).

    Parameters
    ----------
    n_timepoints : int
        T, the series' length.

    Returns
    -------
    ndarray of shape (n_timepoints, 2 * L + 3), float64

    Examples
    --------
    >>> from connscale.despike import despike_basis
    >>> basis = despike_basis(90)  # L = 3
    >>> basis.shape, basis[:2, :3].round(3).tolist()
    ((90, 9), [[1.0, -0.989, 0.978], [1.0, -0.967, 0.934]])
    """
    t = np.arange(n_timepoints, dtype=np.float64)
    u = (t - 0.5 * (n_timepoints - 1.0)) * (2.0 / n_timepoints)
    columns = [np.ones(n_timepoints), u, u**2]
    for k in range(1, int(np.rint(n_timepoints / 30.0)) + 1):
        phase = (2.0 * np.pi * k / n_timepoints) * t
        columns += [np.sin(phase), np.cos(phase)]
    return np.stack(columns, axis=1)


@fill_doc
@validate_params(
    {
        "signals": ["array-like"],
        "device": ["device"],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
    }
)
def despike(
    signals, *, device: str = "auto", dtype: str = "float32", memory_limit=None
) -> np.ndarray:
    """Squash the spikes of each series as ``3dDespike -NEW -nomask`` does.

    For each series v(t), t = 0 … T − 1:

    1. A robust copy z: m(t) and a(t) are the median and the median absolute
       deviation of the 9 values of v in the window starting at
       clip(t − 4, 0, T − 9); A = median over t of a(t). Where
       abs(v(t) − m(t)) > 6.789·A, z(t) = m(t), else z(t) = v(t) (z = v when
       A = 0).
    2. The curve f = X·pinv(X)·z: the least-squares fit of z on the regressors
       X of :func:`despike_basis` (constant, linear, quadratic, sines and
       cosines up to order rint(T/30)). This replaces the L1 fit of the
       ``-OLD`` method.
    3. r = v − f, σ = sqrt(π/2)·median(abs(r)) and s = r/σ.
    4. Where s > c1: v'(t) = f(t) + σ·(c1 + (c2 − c1)·tanh((s − c1)/(c2 − c1)));
       where s < −c1: v'(t) = f(t) + σ·(−c1 + (c2 − c1)·tanh((s + c1)/(c2 − c1)));
       c1 = 2.5, c2 = 4 (``-cut``'s defaults), tanh taken as ±1 beyond ±7 as
       AFNI's ``mytanh``. Values with abs(s) <= c1, and series with σ = 0, are
       left as they are.

    Medians of an even count are the mean of the two middle values (AFNI's
    ``qmed_float``).

    Parameters
    ----------
    signals : array-like of shape (n_timepoints, n_series)
        Time first (nilearn's convention); at least 15 time points.
    %(device)s
    %(dtype)s
    %(memory_limit)s

    Returns
    -------
    ndarray of shape (n_timepoints, n_series), of ``dtype``
        The despiked series.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.despike import despike
    >>> x = np.random.default_rng(0).standard_normal((100, 3))
    >>> x[50, 1] = 40.0
    >>> y = despike(x, device="cpu")
    >>> bool(abs(y[50, 1]) < 10), bool(y.shape == x.shape)
    (True, True)
    """
    x = check_timeseries(signals, name="signals", min_timepoints=MIN_TIMEPOINTS)
    n_timepoints, n_series = x.shape
    work = resolve_dtype(dtype)
    planner = planner_for(
        resolve_device(device), memory_limit, hint="Raise memory_limit, or despike fewer series."
    )
    itemsize = torch.empty((), dtype=work).element_size()
    out = np.empty((n_timepoints, n_series), dtype=torch.empty((), dtype=work).numpy().dtype)
    planner.reserve_result(out.nbytes, f"The despiked series ({n_timepoints} x {n_series})")
    basis = despike_basis(n_timepoints)
    with planner.transient(), torch.no_grad():
        planner.reserve_device(2 * basis.size * itemsize)
        columns = planner.fit(
            _VALUES_PER_TIMEPOINT * n_timepoints * itemsize,
            f"Despiking {n_series} series x {n_timepoints} time points",
            at_most=max(n_series, 1),
        )
        dev = planner.device
        x_basis = torch.as_tensor(basis, dtype=work, device=dev)
        projector = torch.as_tensor(np.linalg.pinv(basis), dtype=work, device=dev)
        windows = _window_indices(n_timepoints, dev)
        for c0 in range(0, n_series, columns):
            block = torch.as_tensor(x[:, c0 : c0 + columns].T, dtype=work, device=dev)
            out[:, c0 : c0 + columns] = (
                _despike_rows(block, x_basis, projector, windows).T.cpu().numpy()
            )
    return out


def _window_indices(n_timepoints: int, dev: torch.device) -> torch.Tensor:
    """Return, for each time point, the indices of its 9-wide window (``mead9``)."""
    starts = torch.clamp(torch.arange(n_timepoints) - _WINDOW // 2, 0, n_timepoints - _WINDOW)
    return (starts[:, None] + torch.arange(_WINDOW)).to(dev)


def _median(values: torch.Tensor) -> torch.Tensor:
    """Return the median along the last axis, the mean of the two middle values for even counts."""
    n = values.shape[-1]
    ordered = values.sort(dim=-1).values
    return 0.5 * (ordered[..., (n - 1) // 2] + ordered[..., n // 2])


def _despike_rows(
    v: torch.Tensor, x_basis: torch.Tensor, projector: torch.Tensor, windows: torch.Tensor
) -> torch.Tensor:
    """Despike the rows of ``v`` (series x time): steps 1-4 of :func:`despike`."""
    local = v[:, windows]  # (series, time, 9)
    med = local.median(dim=-1).values  # 9 values: the middle one
    mad = (local - med[..., None]).abs().median(dim=-1).values
    del local
    threshold = (_LOCAL_THRESHOLD * _median(mad))[:, None]
    robust = torch.where(((v - med).abs() > threshold) & (threshold > 0), med, v)
    fit = (robust @ projector.T) @ x_basis.T
    resid = v - fit
    sigma = (math.sqrt(0.5 * math.pi) * _median(resid.abs()))[:, None]
    s = resid / torch.where(sigma > 0, sigma, torch.ones_like(sigma))
    span = CUT2 - CUT1
    high = CUT1 + span * _clamped_tanh((s - CUT1) / span)
    low = -CUT1 + span * _clamped_tanh((s + CUT1) / span)
    squashed = torch.where(s > CUT1, high, torch.where(s < -CUT1, low, s))
    spikes = (s.abs() > CUT1) & (sigma > 0)
    return torch.where(spikes, fit + squashed * sigma, v)


def _clamped_tanh(x: torch.Tensor) -> torch.Tensor:
    """Return tanh(x), exactly ±1 beyond ±7 (AFNI's ``mytanh``)."""
    return torch.where(x > 7.0, 1.0, torch.where(x < -7.0, -1.0, torch.tanh(x)))
