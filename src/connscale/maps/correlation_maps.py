"""Matrix-free correlation maps: global correlation and seed correlation.

As AFNI's ``3dTcorrMap -Mean`` and ``3dTcorr1D``, and nilearn's seed-based maps.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch

from connscale._docs import fill_doc
from connscale._validation import Interval, check_timeseries, validate_params
from connscale.fc.normalize import normalize_series
from connscale.maps.prepare import NormalizedSeries, as_map, map_planner, normalized_series


@fill_doc
@validate_params(
    {
        "timeseries": ["array-like", NormalizedSeries],
        "device": ["device"],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
    }
)
def global_correlation(
    timeseries, *, device: str = "auto", dtype: str = "float32", memory_limit=None
) -> np.ndarray:
    """Each series' mean correlation with all other series, matrix-free.

    With U the normalised series and s = Σⱼ uⱼ, the map is
    (uᵢ·s − 1) / (N − 1): O(N·T), no N×N matrix.

    Parameters
    ----------
    %(timeseries)s
    %(device)s
    %(dtype)s
    %(memory_limit)s

    Returns
    -------
    ndarray of shape (n_series,), float64
        NaN for constant series, which are also left out of the others' means.

    Examples
    --------
    >>> import numpy as np, connscale
    >>> x = np.random.default_rng(0).standard_normal((100, 5))
    >>> g = connscale.global_correlation(x, device="cpu")
    >>> r = np.corrcoef(x.T)
    >>> bool(np.allclose(g, (r.sum(1) - 1) / 4, atol=1e-6))
    True
    """
    planner = map_planner(timeseries, device, memory_limit)
    with planner.transient(), torch.no_grad():
        u, constant = normalized_series(
            timeseries, device=planner.device, dtype=dtype, memory_limit=planner
        )
        n, t = u.shape
        m = n - int(constant.sum())
        if m < 2:
            raise ValueError(f"global_correlation needs at least 2 non-constant series; got {m}.")
        planner.reserve_device(8 * (t + n))  # the sum of the rows, the float64 map
        rows = planner.fit(
            8 * (t + 1),  # a row in float64, its product
            f"Global correlation of {n} series x {t} time points",
            at_most=max(1, _BLOCK_VALUES // max(t, 1)),
        )
        blocks = [(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]
        total = torch.zeros(u.shape[1], dtype=torch.float64, device=u.device)
        for r0, r1 in blocks:
            total += _float64_rows(u, constant, r0, r1).sum(0)
        g = torch.empty(u.shape[0], dtype=torch.float64, device=u.device)
        for r0, r1 in blocks:
            g[r0:r1] = (_float64_rows(u, constant, r0, r1) @ total - 1.0) / (m - 1)
    return as_map(g, constant)


#: Values per block of rows of the matrix-free maps' float64 temporaries (8 MB).
_BLOCK_VALUES = 1 << 20


def _float64_rows(u: torch.Tensor, constant: torch.Tensor, r0: int, r1: int) -> torch.Tensor:
    """Rows ``r0:r1`` of ``u`` in float64, those of constant series zero."""
    rows = u[r0:r1].to(torch.float64, copy=True)
    rows[constant[r0:r1]] = 0.0
    return rows


@fill_doc
@validate_params(
    {
        "timeseries": ["array-like"],
        "radius": [Interval(Real, 0, None, closed="neither"), None],
        "fisher_z": ["boolean"],
        "device": ["device"],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
    }
)
def seed_correlation(
    timeseries,
    seeds,
    *,
    img=None,
    radius: float | None = None,
    fisher_z: bool = False,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit=None,
) -> np.ndarray:
    """Correlation of every series with one or several seeds.

    Parameters
    ----------
    %(timeseries)s
    seeds : array-like, or coordinates / mask image when ``img`` is given
        Without ``img``: seed time series, of shape (n_timepoints,) or
        (n_timepoints, n_seeds). With ``img`` (the 4-D image the series came
        from): a list of (x, y, z) world coordinates in mm (a sphere of
        ``radius`` around each, through ``nilearn.maskers.NiftiSpheresMasker``)
        or a 3-D binary mask image (its mean series, through
        ``NiftiMasker``), extracted without cleaning as
        :func:`connscale.io.load_masked` does by default.
    img : NIfTI image, path or None
    radius : float or None
        Sphere radius in mm for coordinate seeds (None: the single voxel).
    fisher_z : bool, default=False
        Return Fisher's z = arctanh(r), of r clipped to [-1, 1] as
        ``numpy.corrcoef`` clips it: ±inf where r is ±1, rounding past ±1
        included (a seed voxel with itself), never NaN; where rounding leaves
        |r| just below 1, z is large and finite (about 8 in float32, 18 in
        float64), as numpy's float64 ``arctanh(corrcoef)`` is.
    %(device)s
    %(dtype)s
    %(memory_limit)s

    Returns
    -------
    ndarray of shape (n_seeds, n_series), float64
        NaN for constant series (and for every series if a seed is constant).

    Examples
    --------
    >>> import numpy as np, connscale
    >>> x = np.random.default_rng(0).standard_normal((100, 5))
    >>> connscale.seed_correlation(x, x[:, 0], device="cpu").shape
    (1, 5)
    """
    if img is not None:
        from connscale.maps.seeds import seed_timeseries

        seeds = seed_timeseries(img, seeds, radius=radius)
    seed_array = np.asarray(seeds)
    if seed_array.ndim == 1:
        seed_array = seed_array[:, None]
    seed_array = check_timeseries(seed_array, name="seeds")
    planner = map_planner(timeseries, device, memory_limit)
    with planner.transient(), torch.no_grad():
        u, constant = normalized_series(
            timeseries, device=planner.device, dtype=dtype, memory_limit=planner
        )
        if seed_array.shape[0] != u.shape[1]:
            raise ValueError(
                f"'seeds' must have one row per time point ({u.shape[1]}); "
                f"got {seed_array.shape[0]}."
            )
        n_seeds, n = seed_array.shape[1], u.shape[0]
        # The seeds' copy and float64 temporaries, the maps (float64 with fisher_z, twice).
        planner.require(
            seed_array.size * 48 + n_seeds * n * (u.element_size() + 16 * fisher_z),
            f"Seed correlation of {n_seeds} seeds with {n} series",
        )
        v, _ = normalize_series(
            torch.from_numpy(np.ascontiguousarray(seed_array)).to(u.device), dtype=u.dtype
        )
        r = v @ u.T
        if fisher_z:
            r = torch.arctanh(r.double().clamp(-1.0, 1.0))
    return as_map(r, constant)
