"""The host part of denoising: confounds, the cleaning operator and what it leaves.

What :mod:`connscale.denoise` computes before the device: the confounds and
sample mask of a run (nilearn's fMRIPrep interface), the (T', T) matrix of
:func:`nilearn.signal.clean` (:func:`cleaning_operator`), its residual degrees
of freedom (:func:`residual_dof`) and the constant series
(:func:`constant_series`). numpy, pandas and nilearn only, no torch: the BIDS
reader processes build a run's operator without loading torch. Public through
:mod:`connscale.denoise`.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from connscale._choices import NUISANCE_SETS, OUTPUT_TYPES, STRATEGIES
from connscale._compute.memory import MemoryPlanner, host_budget, limit_error
from connscale._xcpd_clean import xcpd_clean_matrix
from connscale.nuisance import is_nuisance_file, load_nuisance

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CONSTANT_RTOL",
    "CleaningOperator",
    "check_confounds_file",
    "cleaning_operator",
    "constant_series",
    "load_confounds",
    "residual_dof",
    "xcpd_operator",
]

_EPS64 = np.finfo(np.float64).eps
#: Relative tolerance of "constant" per working precision: a series whose
#: standard deviation is at most this fraction of its mean magnitude (before
#: cleaning), or of its standard deviation before cleaning (after), is constant.
#: About a hundred roundings of the precision: far below any real BOLD
#: fluctuation (1e-4 to 1e-2 of the mean), far above what rounding leaves.
CONSTANT_RTOL = {"float32": 1e-5, "float64": 1e-12}
#: Singular values of the (centred) operator below this gain are rounding, not
#: a degree of freedom (the gains of a kept component are of order 1).
_GAIN_TOL = 1e-6
#: Copies of the T x T float64 identity that nilearn's ``clean`` holds while
#: the operator is built (measured: about 4.5 at T = 300 and 600, with 24
#: confounds and a band-pass).
_OPERATOR_COPIES = 6
#: What to do when cleaning does not fit (for messages).
_MEMORY_HINT = "Raise memory_limit, or clean fewer series at a time."


def check_confounds_file(path: str | os.PathLike) -> None:
    r"""Check that a confounds TSV is a UTF-8 table of numbers, as pandas reads it.

    Parameters
    ----------
    path : path
        fMRIPrep's ``*_desc-confounds_timeseries.tsv``.

    Raises
    ------
    ValueError
        One line naming the file (and the line, column and value): not
        UTF-8, empty, not a table, no row, text in a column (``n/a`` is
        fMRIPrep's missing value).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.denoise import check_confounds_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "sub-01_desc-confounds_timeseries.tsv"
    ...     _ = path.write_text("trans_x\tcsf\n0.1\tn/a\n0.2\thigh\n")
    ...     check_confounds_file(path)
    Traceback (most recent call last):
    ...
    ValueError: sub-01_desc-confounds_timeseries.tsv: column 'csf' holds 'high' at line 3 ...
    """
    import pandas as pd

    path = Path(path)
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{path.name} is not UTF-8 text: byte {raw[exc.start]:#04x} at line {line}."
        ) from None
    try:
        table = pd.read_csv(path, sep="\t", encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path.name} is empty: no header, no row.") from None
    except pd.errors.ParserError as exc:
        message = " ".join(str(exc).split())
        raise ValueError(f"{path.name} is not a tab-separated table: {message}") from None
    if table.shape[0] == 0:
        raise ValueError(f"{path.name} has a header and no row.")
    for column in table.columns:
        values = table[column]
        if pd.api.types.is_numeric_dtype(values):
            continue
        text = pd.to_numeric(values, errors="coerce").isna() & values.notna()
        if text.any():
            row = int(text.to_numpy().argmax())
            raise ValueError(
                f"{path.name}: column {column!r} holds {values.iloc[row]!r} at line {row + 2} "
                f"(volume {row}), not a number."
            )


def _check_finite(confounds: pd.DataFrame, source: str) -> None:
    """Name the first regressor with a missing or infinite value.

    Only the first volume is filled by nilearn, where fMRIPrep leaves
    derivatives and differences n/a.
    """
    values = confounds.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        column = int(bad.any(axis=0).argmax())
        row = int(bad[:, column].argmax())
        raise ValueError(
            f"{source}: regressor {str(confounds.columns[column])!r} is "
            f"{'n/a' if np.isnan(values[row, column]) else values[row, column]} at line "
            f"{row + 2} (volume {row}); only its first volume may be n/a."
        )


def load_confounds(
    bold: str | os.PathLike,
    strategy: str,
    *,
    confounds_file: str | os.PathLike | None = None,
    **kwargs,
) -> tuple[pd.DataFrame | None, np.ndarray | None]:
    """Confounds and sample mask of one fMRIPrep run for a denoising strategy.

    Parameters
    ----------
    bold : path
        The run's preprocessed BOLD (``*_desc-preproc_bold.nii.gz``, or
        ``*_desc-smoothAROMAnonaggr_bold.nii.gz`` for 'ica_aroma', 'aroma'
        and 'aroma_gsr'); its confounds TSV and JSON sit beside it, as
        fMRIPrep writes them.
    strategy : str or path
        A preset of :func:`nilearn.interfaces.fmriprep.load_confounds_strategy`
        ('simple', 'scrubbing', 'compcor', 'ica_aroma'), 'none' (no
        confound, no censoring), one of XCP-D's nuisance sets ('24P', '27P',
        '36P', 'acompcor', 'acompcor_gsr', 'aroma', 'aroma_gsr', 'gsr_only')
        or a custom nuisance file (.yml, .yaml, .json): see
        :mod:`connscale.nuisance`.
    confounds_file : path or None
        The confounds TSV nilearn reads for ``bold``: checked first
        (:func:`check_confounds_file`), and named in the errors.
    **kwargs
        Passed to ``load_confounds_strategy`` (e.g. ``fd_threshold``,
        ``global_signal``); the nuisance sets and files take none.

    Returns
    -------
    confounds : pandas.DataFrame or None
        (T, n_confounds), the regressors with their fMRIPrep names.
    sample_mask : ndarray of int or None
        Indices of the volumes kept (scrubbing, non-steady-state volumes), or
        None when every volume is kept.

    Raises
    ------
    ValueError
        One line naming the confounds file (or the BOLD): what nilearn
        cannot read, or a regressor with a missing value after the first
        volume (naming the regressor and the line). A nuisance set's
        column missing from the confounds file, or a nuisance file's
        pattern that matches no column: one line naming the BOLD and the
        column or pattern (:class:`connscale.nuisance.NuisanceError`).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.datasets.fmriprep import make_fmriprep_tree
    >>> from connscale.denoise import load_confounds
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     tree = make_fmriprep_tree(tmp, n_subjects=2)
    ...     bold = next(Path(tree.derivatives).glob("sub-01/func/*_desc-preproc_bold.nii.gz"))
    ...     confounds, sample_mask = load_confounds(bold, "24P")
    >>> confounds.shape, int(sample_mask[0])  # volume 0 is a non-steady-state volume
    ((30, 24), 1)
    """
    preset = strategy in STRATEGIES and strategy not in NUISANCE_SETS
    if not preset and not (strategy in NUISANCE_SETS or is_nuisance_file(strategy)):
        raise ValueError(
            f"strategy must be one of {', '.join(STRATEGIES)}, or a .yml, .yaml or .json "
            f"nuisance file; got {strategy!r}."
        )
    if (strategy == "none" or not preset) and kwargs:
        raise ValueError(f"strategy {str(strategy)!r} takes no parameter; got {sorted(kwargs)}.")
    if strategy == "none":
        return None, None
    import pandas as pd
    from nilearn.interfaces.fmriprep import load_confounds_strategy

    source = Path(bold).name if confounds_file is None else Path(confounds_file).name
    if confounds_file is not None:
        check_confounds_file(confounds_file)
    if not preset:
        confounds, sample_mask = load_nuisance(bold, strategy, confounds_file=confounds_file)
    else:
        try:
            confounds, sample_mask = load_confounds_strategy(
                str(bold), denoise_strategy=strategy, **kwargs
            )
        except (ValueError, TypeError, KeyError, pd.errors.ParserError) as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise ValueError(f"{source}: nilearn cannot load the confounds: {message}") from exc
    if confounds is not None and confounds.shape[1] == 0:
        confounds = None
    if confounds is not None:
        _check_finite(confounds, source)
    return confounds, sample_mask


@dataclass(frozen=True)
class CleaningOperator:
    """The linear part of :func:`nilearn.signal.clean` for one run.

    Attributes
    ----------
    matrix : ndarray of shape (n_kept, n_timepoints), float64
        ``clean(X, standardize=None) == matrix @ X`` for every (T, V) ``X``.
    offset : ndarray of shape (n_kept,), float64
        ``matrix @ ones(T)``: what a constant series becomes.
    volumes : ndarray of int, shape (n_kept,)
        The input volume behind each output row.
    interpolated : ndarray of bool, shape (n_kept,), or None
        Which output rows are censored volumes, interpolated (XCP-D's
        ``interpolated`` output); None: none is.

    Examples
    --------
    >>> from connscale.denoise import cleaning_operator
    >>> operator = cleaning_operator(40, sample_mask=list(range(2, 40)))
    >>> operator.matrix.shape, operator.n_timepoints, int(operator.volumes[0])
    ((38, 40), 40, 2)
    """

    matrix: np.ndarray
    offset: np.ndarray
    volumes: np.ndarray
    interpolated: np.ndarray | None = None

    @property
    def n_timepoints(self) -> int:
        """T, the number of input volumes."""
        return self.matrix.shape[1]

    def low_motion(self) -> CleaningOperator:
        """Return the operator of the kept (not interpolated) rows: what correlations use.

        Returns
        -------
        CleaningOperator
            Without the interpolated rows (``self`` when there are none).

        Examples
        --------
        >>> import numpy as np
        >>> from connscale.denoise import xcpd_operator
        >>> kept = np.ones(40, dtype=bool)
        >>> kept[[10, 11]] = False  # two censored volumes
        >>> operator = xcpd_operator(40, sample_mask=kept, t_r=2.0, output_type="interpolated")
        >>> operator.matrix.shape, operator.low_motion().matrix.shape
        ((40, 40), (38, 40))
        """
        if self.interpolated is None:
            return self
        rows = ~self.interpolated
        return CleaningOperator(self.matrix[rows], self.offset[rows], self.volumes[rows])


def _sample_indices(sample_mask: npt.ArrayLike | None, n_timepoints: int) -> np.ndarray | None:
    if sample_mask is None:
        return None
    mask = np.asarray(sample_mask)
    if mask.dtype == bool:
        if mask.shape != (n_timepoints,):
            raise ValueError(
                f"A boolean sample_mask must have {n_timepoints} values; got shape {mask.shape}."
            )
        return np.flatnonzero(mask)
    mask = mask.astype(np.int64).ravel()
    if mask.size and (mask.min() < 0 or mask.max() >= n_timepoints):
        raise ValueError(
            f"sample_mask indices must lie in [0, {n_timepoints}); got {mask.min()}..{mask.max()}."
        )
    if mask.size == 0:
        raise ValueError("sample_mask removes every volume.")
    return mask


def cleaning_operator(
    n_timepoints: int,
    *,
    confounds: npt.ArrayLike | pd.DataFrame | None = None,
    sample_mask: npt.ArrayLike | None = None,
    detrend: bool = True,
    standardize_confounds: bool = True,
    filter: str | bool = "butterworth",
    low_pass: float | None = None,
    high_pass: float | None = None,
    t_r: float | None = None,
    extrapolate: bool = False,
    memory_limit: int | str | MemoryPlanner | None = None,
) -> CleaningOperator:
    """Return the (T', T) matrix of :func:`nilearn.signal.clean` without standardisation.

    Parameters
    ----------
    n_timepoints : int
        T, the number of volumes of the run.
    confounds : array-like of shape (T, n_confounds), DataFrame or None
    sample_mask : array of int indices or of T booleans, or None
        Volumes to keep. Volumes removed before the first kept one (dummy
        scans, non-steady-state volumes) take no part in any step when
        ``extrapolate`` is False: nilearn drops them first.
    detrend, standardize_confounds, filter, low_pass, high_pass, t_r, extrapolate
        As in :func:`nilearn.signal.clean` (same defaults).
    memory_limit : int, str, MemoryPlanner or None, default=None
        Most host memory the operator's construction may use (nilearn's
        copies of the T x T identity), or the task's planner.

    Returns
    -------
    CleaningOperator

    Raises
    ------
    MemoryLimitError
        When the construction does not fit, before it starts.
    ValueError
        A Butterworth cutoff at or above the Nyquist frequency (nilearn
        would lower it with a warning).

    Notes
    -----
    Built by running ``nilearn.signal.clean`` on the T x T identity in
    float64 on the host, so every step and every default is nilearn's.

    Examples
    --------
    >>> import numpy as np
    >>> from nilearn.signal import clean
    >>> from connscale.denoise import cleaning_operator
    >>> rng = np.random.default_rng(0)
    >>> x, confounds = rng.standard_normal((60, 3)), rng.standard_normal((60, 2))
    >>> operator = cleaning_operator(60, confounds=confounds, high_pass=0.01, t_r=2.0)
    >>> expected = clean(x, confounds=confounds, high_pass=0.01, t_r=2.0, standardize=None)
    >>> bool(np.allclose(operator.matrix @ x, expected))
    True
    """
    from nilearn.signal import clean

    n_timepoints, confounds, indices = _prepare(n_timepoints, confounds, sample_mask, memory_limit)
    if filter == "butterworth":
        _check_band(low_pass, high_pass, t_r)
    # A T x T problem: BLAS threads would only spin beside the caller's other work
    # (OpenBLAS's idle threads busy-wait), so nilearn runs on one.
    with _one_blas_thread(), warnings.catch_warnings():
        # Identity input: nilearn's per-signal warnings (e.g. on 1-D input) do not apply.
        warnings.simplefilter("ignore", category=UserWarning)
        matrix = clean(
            np.eye(n_timepoints),
            detrend=detrend,
            standardize=None,
            sample_mask=None if indices is None else indices.copy(),
            confounds=confounds,
            standardize_confounds=standardize_confounds,
            filter=filter,
            low_pass=low_pass,
            high_pass=high_pass,
            t_r=t_r,
            extrapolate=extrapolate,
        )
    volumes = np.arange(n_timepoints) if indices is None else indices
    if matrix.shape[0] != volumes.size:
        raise RuntimeError(
            f"nilearn returned {matrix.shape[0]} volumes for {volumes.size} kept ones."
        )
    return CleaningOperator(matrix=matrix, offset=matrix.sum(axis=1), volumes=volumes)


def xcpd_operator(
    n_timepoints: int,
    *,
    confounds: npt.ArrayLike | pd.DataFrame | None = None,
    sample_mask: npt.ArrayLike | None = None,
    dummy_scans: int = 0,
    detrend: bool = True,
    low_pass: float | None = None,
    high_pass: float | None = None,
    t_r: float | None = None,
    filter_order: int = 2,
    output_type: str = "censored",
    memory_limit: int | str | MemoryPlanner | None = None,
) -> CleaningOperator:
    """Return the (T', T) matrix of XCP-D's denoising of a censored run.

    XCP-D's ``denoise_with_nilearn`` (:mod:`connscale._xcpd_clean`), on the
    volumes after the dummy scans: the censored volumes interpolated (cubic
    spline, the edges held at the nearest kept volume), detrended,
    band-passed (Butterworth padded with the edge values), the confounds
    fit on the kept volumes and removed from every volume.

    Parameters
    ----------
    n_timepoints : int
        T, the number of volumes of the run.
    confounds : array-like of shape (T, n_confounds), DataFrame or None
    sample_mask : array of int indices or of T booleans, or None
        The low-motion volumes; the others are censored (interpolated).
    dummy_scans : int, default=0
        Volumes dropped at the start before any step (XCP-D's
        ``--dummy-scans``): their columns are 0 and no row is theirs.
    detrend : bool, default=True
        Remove the mean and linear trend (XCP-D does with confounds).
    low_pass, high_pass : float or None
        The Butterworth band (Hz); None: no such cutoff.
    t_r : float or None
        The repetition time (s), needed to interpolate or filter.
    filter_order : int, default=2
        The Butterworth order (XCP-D's ``--bpf-order``).
    output_type : {'censored', 'interpolated'}, default='censored'
        The rows: the kept volumes, or every volume after the dummy scans
        (the censored ones interpolated, marked in
        :attr:`CleaningOperator.interpolated`; its
        :meth:`~CleaningOperator.low_motion` rows are the censored output).
    memory_limit : int, str, MemoryPlanner or None, default=None
        As :func:`cleaning_operator`.

    Returns
    -------
    CleaningOperator

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.denoise import xcpd_operator
    >>> kept = np.ones(50, dtype=bool)
    >>> kept[20:23] = False  # three high-motion volumes
    >>> operator = xcpd_operator(50, sample_mask=kept, dummy_scans=2, t_r=2.0,
    ...                          low_pass=0.08, high_pass=0.01)
    >>> operator.matrix.shape, int(operator.volumes[0])
    ((45, 50), 2)
    """
    if output_type not in OUTPUT_TYPES:
        raise ValueError(
            f"output_type must be one of {', '.join(OUTPUT_TYPES)}; got {output_type!r}."
        )
    n_timepoints, confounds, indices = _prepare(n_timepoints, confounds, sample_mask, memory_limit)
    dummy_scans = int(dummy_scans)
    if not 0 <= dummy_scans <= n_timepoints - 2:
        raise ValueError(
            f"dummy_scans must leave at least 2 of the {n_timepoints} volumes; got {dummy_scans}."
        )
    kept = np.ones(n_timepoints, dtype=bool)
    if indices is not None:
        kept[:] = False
        kept[indices] = True
    kept = kept[dummy_scans:]
    if not kept.any():
        raise ValueError("sample_mask removes every volume after the dummy scans.")
    if (not kept.all() or low_pass is not None or high_pass is not None) and t_r is None:
        raise ValueError("Interpolating censored volumes or filtering needs t_r.")
    _check_band(low_pass, high_pass, t_r)
    with _one_blas_thread():
        matrix = xcpd_clean_matrix(
            kept,
            confounds=None if confounds is None else confounds[dummy_scans:],
            detrend=detrend,
            low_pass=low_pass,
            high_pass=high_pass,
            t_r=t_r,
            order=int(filter_order),
        )
    rows = np.arange(kept.size) if output_type == "interpolated" else np.flatnonzero(kept)
    matrix = np.concatenate([np.zeros((rows.size, dummy_scans)), matrix[rows]], axis=1)
    interpolated = ~kept[rows] if output_type == "interpolated" and not kept.all() else None
    return CleaningOperator(
        matrix=matrix,
        offset=matrix.sum(axis=1),
        volumes=rows + dummy_scans,
        interpolated=interpolated,
    )


def _prepare(n_timepoints, confounds, sample_mask, memory_limit):
    """Check a run's length, confounds and sample mask; require the operator's memory."""
    n_timepoints = int(n_timepoints)
    if n_timepoints < 2:
        raise ValueError(f"A run needs at least 2 volumes to be cleaned; got {n_timepoints}.")
    _require_host(
        _OPERATOR_COPIES * n_timepoints**2 * 8,
        f"The cleaning operator of {n_timepoints} volumes",
        memory_limit,
    )
    confounds = _checked_confounds(confounds, n_timepoints)
    return n_timepoints, confounds, _sample_indices(sample_mask, n_timepoints)


def _checked_confounds(confounds, n_timepoints: int) -> np.ndarray | None:
    """Return the confounds as a finite (T, n) float64 array (or None)."""
    if confounds is None:
        return None
    confounds = np.asarray(confounds, dtype=np.float64)
    if confounds.ndim == 1:
        confounds = confounds[:, None]
    if confounds.shape[0] != n_timepoints:
        raise ValueError(
            f"The confounds have {confounds.shape[0]} rows but the run has {n_timepoints} volumes."
        )
    if not np.isfinite(confounds).all():
        raise ValueError("The confounds hold NaN or infinite values.")
    return confounds


def _check_band(low_pass: float | None, high_pass: float | None, t_r: float | None) -> None:
    """Refuse a Butterworth cutoff at or above the Nyquist frequency of ``t_r``."""
    if t_r is None:
        return
    nyquist = 0.5 / t_r
    for name, value in (("high_pass", high_pass), ("low_pass", low_pass)):
        if value is not None and value >= nyquist:
            raise ValueError(
                f"{name} {value:g} Hz is at or above the Nyquist frequency of a TR of "
                f"{t_r:g} s ({nyquist:g} Hz)."
            )


@functools.cache
def _blas_controller():
    """Return this process's :class:`threadpoolctl.ThreadpoolController`, made once.

    Making one lists the loaded libraries (~5 ms): ``threadpool_limits`` does
    it at every call. scipy's BLAS (nilearn's ``clean`` runs on it) is
    loaded first, so that it is listed.
    """
    import scipy.linalg  # noqa: F401 - loads scipy's BLAS
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _one_blas_thread():
    """Return a context in which BLAS runs on one thread."""
    return _blas_controller().limit(limits=1, user_api="blas")


def residual_dof(
    operator: CleaningOperator,
    *,
    confounds: npt.ArrayLike | pd.DataFrame | None = None,
    detrend: bool = True,
) -> dict:
    """Residual degrees of freedom of a run's cleaned series, and their parts.

    The cleaned and z-scored series of a run are ``C M x``: ``M`` the run's
    operator, ``C`` the removal of the mean over the kept volumes. With ``s``
    the singular values of ``C M`` (the gains of what is left), the residual
    degrees of freedom are ``(sum s^2)^2 / sum s^4``: the rank of ``C M`` when
    it is a projection (no filter: kept volumes minus the mean, the trend and
    the independent confounds, exactly), and the effective degrees of freedom
    of a filtered series (Worsley & Friston 1995) when a band-pass filter
    attenuates part of the spectrum. Censoring, confounds, detrending, the
    mean and the filter are counted in this one number. A gain above 1
    counts as 1: detrending over interpolated volumes (nilearn and XCP-D
    both interpolate censored volumes before it) turns an oscillation at a
    gap's edges into a trend of the kept ones, amplified; the series keep
    that dimension, it is not worth more than one. The interpolated rows of
    an XCP-D operator are not counted (:meth:`CleaningOperator.low_motion`).

    Parameters
    ----------
    operator : CleaningOperator
        From :func:`cleaning_operator` or :func:`xcpd_operator` (its
        interpolated rows are not counted).
    confounds : array-like of shape (T, n_confounds), DataFrame or None
        The confounds the operator was built with (for the parts only).
    detrend : bool, default=True
        Whether the operator detrends (for the parts only).

    Returns
    -------
    dict
        ``volumes`` (T), ``volumes_kept``, ``confounds`` (columns),
        ``confound_rank`` (independent confounds over the kept volumes, once
        detrended), ``detrend`` (1 or 0, the linear trend), ``mean`` (1),
        ``filter`` (the filter's share, effective: what the other parts
        leave of ``volumes_kept - dof``), ``regressors`` (the sum of the
        parts) and ``dof``, rounded to 0.01.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.denoise import cleaning_operator, residual_dof
    >>> confounds = np.random.default_rng(0).standard_normal((40, 3))
    >>> operator = cleaning_operator(40, confounds=confounds, sample_mask=list(range(4, 40)))
    >>> parts = residual_dof(operator, confounds=confounds)
    >>> parts["volumes_kept"], parts["confound_rank"], parts["dof"]
    (36, 3, 31.0)
    """
    operator = operator.low_motion()  # the interpolated volumes are no data
    matrix = operator.matrix - operator.matrix.mean(axis=0)
    with _one_blas_thread():
        gains = np.linalg.eigvalsh(matrix @ matrix.T)  # s^2
    gains = np.minimum(gains[gains > _GAIN_TOL**2], 1.0)
    dof = float(gains.sum() ** 2 / (gains**2).sum()) if gains.size else 0.0
    kept = int(operator.volumes.size)
    rank = 0
    if confounds is not None:
        values = np.asarray(confounds, dtype=np.float64).reshape(operator.n_timepoints, -1)
        rank = _confound_rank(values[operator.volumes], detrend=detrend)
    fixed = 1 + int(bool(detrend)) + rank
    regressors = max(float(fixed), kept - dof)
    return {
        "volumes": int(operator.n_timepoints),
        "volumes_kept": kept,
        "confounds": 0 if confounds is None else int(np.shape(confounds)[1]),
        "confound_rank": rank,
        "detrend": int(bool(detrend)),
        "mean": 1,
        "filter": round(max(0.0, regressors - fixed), 2),
        "regressors": round(regressors, 2),
        "dof": round(dof, 2),
    }


def _confound_rank(confounds: np.ndarray, *, detrend: bool) -> int:
    """Return the number of independent confounds over the kept volumes.

    Counted once the mean (and trend) are removed: the numerical rank of the
    standardised residual confounds.
    """
    n = confounds.shape[0]
    basis = [np.ones(n)] + ([np.arange(n, dtype=np.float64)] if detrend else [])
    basis = np.stack(basis, axis=1)
    residual = confounds - basis @ np.linalg.lstsq(basis, confounds, rcond=None)[0]
    scale = residual.std(axis=0)
    residual = residual[:, scale > _EPS64 * np.abs(confounds).max(axis=0).clip(1)]
    if residual.shape[1] == 0:
        return 0
    return int(np.linalg.matrix_rank(residual / residual.std(axis=0)))


def constant_series(signals: npt.ArrayLike, *, dtype: str = "float32") -> np.ndarray:
    """Return which (T, V) series are constant over time.

    A series is constant when its range is at most ``CONSTANT_RTOL[dtype]`` of
    its magnitude (no exact-zero test).

    Parameters
    ----------
    signals : array-like of shape (n_timepoints, n_series)
        Raw series (e.g. region means or voxels), before cleaning.
    dtype : {'float32', 'float64'}, default='float32'
        The working precision the series are cleaned in.

    Returns
    -------
    ndarray of bool, shape (n_series,)

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.denoise import constant_series
    >>> x = np.c_[np.full(10, 1000.0), np.arange(10.0), np.zeros(10)]
    >>> constant_series(x)
    array([ True, False,  True])
    """
    x = np.asarray(signals)
    high, low = x.max(axis=0).astype(np.float64), x.min(axis=0).astype(np.float64)
    return (high - low) <= CONSTANT_RTOL[dtype] * np.maximum(np.abs(high), np.abs(low))


def _require_host(nbytes: int, what: str, memory_limit) -> None:
    """Raise :class:`~connscale.MemoryLimitError` unless ``nbytes`` fit in host memory.

    Counted by the task's planner when ``memory_limit`` is one (whatever its
    device), else against the host budget of the limit (that of a planner of
    the CPU, without torch).
    """
    if isinstance(memory_limit, MemoryPlanner):
        memory_limit.require(nbytes, what, on="host")
        return
    budget = host_budget(memory_limit)
    if nbytes > budget:
        raise limit_error(what, nbytes, budget, memory_limit, _MEMORY_HINT)
