"""Amplitude of low-frequency fluctuations (ALFF) and its fraction (fALFF).

XCP-D's definitions (``xcp_d/utils/restingstate.py``, ``compute_alff``): the
amplitude spectrum of each series from the periodogram, or from the
Lomb-Scargle periodogram of the kept volumes when some are censored, averaged
over the band. Every series of a batch is transformed at once on the device:
``torch.fft.rfft`` without censoring, one matrix product with the Lomb-Scargle
basis of the kept times with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

import numpy as np
import torch

from connscale._compute import MemoryPlanner, resolve_dtype
from connscale._docs import fill_doc
from connscale._validation import Interval, validate_params
from connscale.maps.prepare import _checked, map_planner

#: Fewest kept volumes whose spectrum is computed (as every series' minimum length).
MIN_KEPT_VOLUMES = 3

#: Float64 arrays of (kept volumes x frequencies) alive at once while the basis is built.
_BASIS_TEMPORARIES = 8


@dataclass(frozen=True)
class _Spectrum:
    """The spectrum a call computes: its band and, with censoring, the Lomb-Scargle basis.

    Attributes
    ----------
    band : slice
        Indices of the band's frequencies in the amplitude spectrum.
    kept : torch.Tensor of int or None
        The kept volumes, on the device (None: every volume, the periodogram).
    basis : torch.Tensor of shape (n_kept, 2 * n_frequencies) or None
        The Lomb-Scargle cosines then sines at the kept times, in the working
        dtype on the device, each column scaled so that the squared products
        with the centred kept values, summed over the pair of a frequency,
        give its normalised power times the mean square of those values.
    """

    band: slice
    kept: torch.Tensor | None = None
    basis: torch.Tensor | None = None


def _kept_volumes(sample_mask, n_timepoints: int) -> np.ndarray | None:
    """Return the sorted indices of the kept volumes, or None when every volume is kept."""
    if sample_mask is None:
        return None
    mask = np.asarray(sample_mask)
    if mask.ndim != 1:
        raise ValueError(f"'sample_mask' must be 1-D; got an array of shape {mask.shape}.")
    if mask.dtype == bool:
        if mask.size != n_timepoints:
            raise ValueError(
                f"A boolean 'sample_mask' must have one value per volume ({n_timepoints}); "
                f"got {mask.size}."
            )
        kept = np.flatnonzero(mask)
    elif mask.size == 0 or np.issubdtype(mask.dtype, np.integer):
        kept = mask.astype(np.intp)
        outside = kept[(kept < 0) | (kept >= n_timepoints)]
        if outside.size:
            raise ValueError(
                f"'sample_mask' index {int(outside[0])} is out of range for {n_timepoints} "
                f"volumes (indices of kept volumes are 0 to {n_timepoints - 1})."
            )
        kept = np.unique(kept)
        if kept.size != mask.size:
            raise ValueError("'sample_mask' lists a volume more than once.")
    else:
        raise ValueError(
            "'sample_mask' must hold the indices of the kept volumes or one bool per volume; "
            f"got dtype {mask.dtype}."
        )
    if kept.size < MIN_KEPT_VOLUMES:
        raise ValueError(
            f"'sample_mask' keeps {kept.size} of {n_timepoints} volumes; ALFF needs at "
            f"least {MIN_KEPT_VOLUMES}."
        )
    return None if kept.size == n_timepoints else kept


def _band(frequencies: np.ndarray, low_pass: float, high_pass: float, t_r: float) -> slice:
    """Return XCP-D's band of ``frequencies``, as a slice.

    From the frequency nearest ``high_pass`` to the one nearest ``low_pass``,
    that one excluded.
    """
    start = int(np.argmin(np.abs(frequencies - high_pass)))
    stop = int(np.argmin(np.abs(frequencies - low_pass)))
    if stop <= start:
        raise ValueError(
            f"The band [{high_pass}, {low_pass}] Hz holds no frequency of the spectrum "
            f"(t_r={t_r} s, steps of {frequencies[1] - frequencies[0]:.4g} Hz); widen it."
        )
    return slice(start, stop)


def _check_band(t_r: float, low_pass: float, high_pass: float) -> None:
    """Refuse a band that is empty or reaches past the Nyquist frequency."""
    if low_pass <= high_pass:
        raise ValueError(f"'low_pass' ({low_pass} Hz) must be above 'high_pass' ({high_pass} Hz).")
    nyquist = 0.5 / t_r
    if low_pass > nyquist:
        raise ValueError(
            f"The band [{high_pass}, {low_pass}] Hz reaches above the Nyquist frequency "
            f"{nyquist:.6g} Hz of t_r={t_r} s: 'low_pass' must be at most {nyquist:.6g}."
        )


def _frequencies(n_timepoints: int, t_r: float, *, censored: bool) -> np.ndarray:
    """Return the frequencies (Hz) of the amplitude spectrum, as XCP-D draws them.

    Without censoring, the periodogram's (``scipy.signal.periodogram``):
    k / (T t_r) for k = 0 ... T // 2. With it, the Lomb-Scargle grid XCP-D
    passes to ``scipy.signal.lombscargle``: ``linspace(0, fs / 2, T // 2 + 1)``
    without 0, T the number of volumes before censoring.
    """
    fs = 1.0 / t_r
    if not censored:
        return np.fft.rfftfreq(n_timepoints, 1.0 / fs)
    return np.linspace(0.0, 0.5 * fs, n_timepoints // 2 + 1)[1:]


def _spectrum(
    planner: MemoryPlanner,
    kept: np.ndarray | None,
    frequencies: np.ndarray,
    band: slice,
    t_r: float,
    work_dtype: torch.dtype,
) -> _Spectrum:
    """Return the call's :class:`_Spectrum`, its Lomb-Scargle basis counted on the device.

    The basis is built on the host in float64 (its temporaries counted too).
    """
    if kept is None:
        return _Spectrum(band)
    n_values = kept.size * frequencies.size
    work_size = torch.empty((), dtype=work_dtype).element_size()
    planner.require(
        8 * _BASIS_TEMPORARIES * n_values,
        f"The Lomb-Scargle basis of {kept.size} kept volumes x {frequencies.size} frequencies",
        on="host",
    )
    planner.reserve_device(2 * n_values * work_size)
    times = kept * t_r
    basis = _lombscargle_basis(times, 2.0 * np.pi * frequencies)
    device = planner.device
    return _Spectrum(
        band, torch.from_numpy(kept).to(device), torch.from_numpy(basis).to(device, work_dtype)
    )


def _lombscargle_basis(times: np.ndarray, angular: np.ndarray) -> np.ndarray:
    """Return the Lomb-Scargle basis of ``times`` at the angular frequencies, in float64.

    As ``scipy.signal.lombscargle`` (uniform weights, no floating mean): the
    phase tau that makes the shifted cosines and sines orthogonal, their mean
    squares C and S = 1 - C (clipped at float64's ``epsneg``), and the columns
    cos(w(t - tau)) / (K sqrt(C)) and sin(w(t - tau)) / (K sqrt(S)).
    """
    n_kept = times.size
    phase = times[:, None] * angular[None, :]
    cos, sin = np.cos(phase), np.sin(phase)
    cc = (cos * cos).mean(0)
    cs = (cos * sin).mean(0)
    tau = 0.5 * np.arctan2(2.0 * cs, cc - (1.0 - cc))
    shifted = phase - tau
    cos, sin = np.cos(shifted), np.sin(shifted)
    cc = (cos * cos).mean(0)
    epsneg = np.finfo(np.float64).epsneg
    ss = np.maximum(1.0 - cc, epsneg)
    cc = np.maximum(cc, epsneg)
    return np.concatenate([cos / (n_kept * np.sqrt(cc)), sin / (n_kept * np.sqrt(ss))], axis=1)


def _centred(series: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Centre float64 rows in two passes; return them and which rows are constant.

    The constant-series rule of :func:`connscale.fc.normalize.normalize_windows`:
    all values equal.
    """
    low, high = torch.aminmax(series, dim=1)
    centred = series - series.mean(dim=1, keepdim=True)
    centred -= centred.mean(dim=1, keepdim=True)  # what rounding left of the mean
    return centred, low == high


def _periodogram_amplitude(centred: torch.Tensor, work_dtype: torch.dtype) -> torch.Tensor:
    """Return sqrt of the one-sided power spectrum ('spectrum' scaling), DC set to 0, float64."""
    n_timepoints = centred.shape[1]
    spectrum = torch.fft.rfft(centred.to(work_dtype), dim=1).abs().to(torch.float64)
    spectrum *= np.sqrt(2.0) / n_timepoints
    spectrum[:, 0] = 0.0
    if n_timepoints % 2 == 0:  # the Nyquist bin is not doubled
        spectrum[:, -1] /= np.sqrt(2.0)
    return spectrum


def _lombscargle_amplitude(centred: torch.Tensor, spectrum: _Spectrum) -> torch.Tensor:
    """Return sqrt of the normalised Lomb-Scargle power of the kept volumes times the series' SD."""
    scale = centred.square().mean(dim=1, keepdim=True).sqrt()  # SD over every volume
    kept, constant = _centred(centred[:, spectrum.kept])
    mean_square = kept.square().mean(dim=1, keepdim=True)
    products = (kept.to(spectrum.basis.dtype) @ spectrum.basis).to(torch.float64).square()
    n_frequencies = products.shape[1] // 2
    power = (products[:, :n_frequencies] + products[:, n_frequencies:]) / mean_square
    amplitude = power.sqrt() * scale
    amplitude[constant] = 0.0
    return amplitude


def _batch_maps(series: torch.Tensor, spectrum: _Spectrum, work_dtype: torch.dtype):
    """Return ALFF, fALFF (float64) and which series are constant, of a (B, T) float64 batch."""
    centred, constant = _centred(series)
    if spectrum.basis is None:
        amplitude = _periodogram_amplitude(centred, work_dtype)
    else:
        amplitude = _lombscargle_amplitude(centred, spectrum)
    amplitude[constant] = 0.0
    in_band = amplitude[:, spectrum.band].sum(dim=1)
    total = amplitude.sum(dim=1)
    alff = 2.0 * in_band / (spectrum.band.stop - spectrum.band.start)
    falff = torch.where(total > 0, in_band / torch.where(total > 0, total, 1.0), 0.0)
    return alff, falff, constant


def _device_batch(x, start: int, stop: int, device: torch.device) -> torch.Tensor:
    """Return columns ``start:stop`` of the (T, N) series, (B, T) float64 on ``device``."""
    if isinstance(x, torch.Tensor):
        block = x[:, start:stop].T.to(device)
    else:
        block = torch.from_numpy(np.ascontiguousarray(x[:, start:stop].T)).to(device)
    return block.to(torch.float64).contiguous()


def _series_per_batch(planner: MemoryPlanner, x, work_dtype: torch.dtype) -> int:
    """Return how many series fit a batch in what is left of the device budget."""
    n_timepoints, n_series = x.shape
    work_size = torch.empty((), dtype=work_dtype).element_size()
    item_size = x.element_size() if isinstance(x, torch.Tensor) else x.itemsize
    # The batch as read (host copy, device copy); in float64 its copy, the
    # centred values, the kept ones twice, the power and the amplitudes; in
    # the working dtype the cast and the transform.
    per_series = n_timepoints * (2 * item_size + 48 + 4 * work_size) + 64
    return planner.fit(
        per_series,
        f"ALFF of {n_series} series x {n_timepoints} time points",
        at_most=n_series,
    )


def _normalized(values: np.ndarray, constant: np.ndarray, name: str) -> np.ndarray:
    """Return ``values`` divided by their mean over the non-constant series."""
    varying = values[~constant]
    mean = float(varying.mean()) if varying.size else 0.0
    if not mean > 0:
        raise ValueError(
            f"normalize=True divides {name} by its mean over the non-constant series; "
            f"that mean is {mean} ({varying.size} non-constant series)."
        )
    return values / mean


@fill_doc
@validate_params(
    {
        "timeseries": ["array-like"],
        "t_r": [Interval(Real, 0, None, closed="neither")],
        "low_pass": [Interval(Real, 0, None, closed="neither")],
        "high_pass": [Interval(Real, 0, None, closed="left")],
        "sample_mask": ["array-like", None],
        "normalize": ["boolean"],
        "device": ["device"],
        "dtype": ["dtype"],
        "memory_limit": ["memory", None],
    }
)
def alff(
    timeseries,
    t_r: float,
    *,
    low_pass: float = 0.08,
    high_pass: float = 0.01,
    sample_mask=None,
    normalize: bool = False,
    device: str = "auto",
    dtype: str = "float32",
    memory_limit=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Compute the amplitude of low-frequency fluctuations (ALFF) and fALFF of every series.

    XCP-D's ALFF (``xcp_d/utils/restingstate.py``, ``compute_alff``), on the
    device, a batch of series at a time. Each series x of T volumes is
    centred and the square root of its power spectrum taken:

    - every volume kept: the periodogram (``scipy.signal.periodogram(x, fs,
      scaling='spectrum')``, fs = 1 / t_r) at f_k = k fs / T, k = 0 ... T // 2:
      A_k = sqrt(P_k) = c_k |X_k| / T, X = rfft(x), c_k = sqrt(2) except at
      the Nyquist bin of an even T (c = 1); the DC bin is 0 (x is centred);
    - volumes censored (``sample_mask``): the normalised Lomb-Scargle
      periodogram (``scipy.signal.lombscargle(t, y, 2 pi f,
      normalize=True)``) of the kept volumes y, centred, at their times
      t = i t_r, on XCP-D's grid f = ``linspace(0, fs / 2, T // 2 + 1)[1:]``
      (T counts every volume): A_f = sqrt(P_f) sd(x), where sd(x) is the
      standard deviation of the series over every volume, kept or not (XCP-D
      rescales the spectrum of the standardised kept values so).

    With the band B = the frequencies from the one nearest ``high_pass`` up
    to, *but excluding*, the one nearest ``low_pass`` (XCP-D's slice):

        ALFF = 2 mean_{f in B} A_f,    fALFF = sum_{f in B} A_f / sum_{f > 0} A_f.

    The factor 2 is XCP-D's. fALFF is Zou et al.'s ratio of the band's
    amplitude to that of the whole spectrum, with the same amplitudes and
    band (its scale cancels).

    Parameters
    ----------
    %(timeseries)s
        Every volume of the run: with ``sample_mask``, the censored volumes
        (interpolated, as XCP-D's denoised BOLD holds them) enter only sd(x).
    t_r : float
        Repetition time, in seconds.
    low_pass : float, default=0.08
        Upper edge of the band, in Hz (at most the Nyquist frequency 1 / (2 t_r)).
    high_pass : float, default=0.01
        Lower edge of the band, in Hz (0: from the lowest frequency).
    sample_mask : array-like of int or bool, or None, default=None
        The kept volumes: their indices (nilearn's ``sample_mask``) or one
        bool per volume (True: kept). None, or every volume kept, uses the
        periodogram; otherwise the Lomb-Scargle periodogram of the kept
        volumes. (XCP-D runs Lomb-Scargle whenever censoring is on, even
        with nothing censored; for an even T it equals the periodogram.)
    normalize : bool, default=False
        Divide each map by its mean over the non-constant series (the mask):
        the mean-normalised mALFF and mfALFF of Zang et al. and Yu et al.
        XCP-D writes the maps unnormalised (its ``smoothed_alff`` is a
        spatial smoothing of them, done on the image, not here).
    %(device)s
    %(dtype)s
        The transform (FFT or Lomb-Scargle product) runs in ``dtype``; centring,
        the standard deviation and the band sums in float64.
    %(memory_limit)s

    Returns
    -------
    alff : ndarray of shape (n_series,), float64
    falff : ndarray of shape (n_series,), float64
        A constant series has ALFF 0 (XCP-D's rule) and fALFF 0 (its 0/0),
        as has a series constant over its kept volumes.

    Raises
    ------
    ValueError
        A band above the Nyquist frequency, ``low_pass <= high_pass``, a band
        that holds no frequency, fewer than 3 kept volumes, a
        ``sample_mask`` index out of range, NaN or infinite values.

    References
    ----------
    XCP-D, ``xcp_d/utils/restingstate.py`` (``compute_alff``),
    https://github.com/PennLINC/xcp_d.

    Zang Y.-F. et al. (2007). Altered baseline brain activity in children
    with ADHD revealed by resting-state functional MRI. Brain and
    Development 29(2), 83-91.

    Zou Q.-H. et al. (2008). An improved approach to detection of amplitude
    of low-frequency fluctuation (ALFF) for resting-state fMRI: fractional
    ALFF. Journal of Neuroscience Methods 172(1), 137-141.

    Yu R. et al. (2014). Frequency-specific alternations in the amplitude of
    low-frequency fluctuations in schizophrenia. Human Brain Mapping 35(2),
    627-637.

    Examples
    --------
    >>> import numpy as np, connscale
    >>> x = np.random.default_rng(0).standard_normal((200, 4))
    >>> alff, falff = connscale.alff(x, 2.0, device="cpu")
    >>> alff.shape, bool(np.all((falff > 0) & (falff < 1)))
    ((4,), True)
    """
    x = _checked(timeseries)
    n_timepoints, n_series = x.shape
    _check_band(float(t_r), float(low_pass), float(high_pass))
    kept = _kept_volumes(sample_mask, n_timepoints)
    frequencies = _frequencies(n_timepoints, float(t_r), censored=kept is not None)
    band = _band(frequencies, float(low_pass), float(high_pass), float(t_r))
    work_dtype = resolve_dtype(dtype)
    planner = map_planner(x, device, memory_limit)
    planner.reserve_result(16 * n_series, f"The ALFF and fALFF maps of {n_series} series")
    maps = np.empty((2, n_series))
    constant = np.empty(n_series, dtype=bool)
    with planner.transient(), torch.no_grad():
        spectrum = _spectrum(planner, kept, frequencies, band, float(t_r), work_dtype)
        columns = _series_per_batch(planner, x, work_dtype)
        for start in range(0, n_series, columns):
            stop = min(n_series, start + columns)
            batch = _device_batch(x, start, stop, planner.device)
            batch_alff, batch_falff, batch_constant = _batch_maps(batch, spectrum, work_dtype)
            maps[0, start:stop] = batch_alff.cpu().numpy()
            maps[1, start:stop] = batch_falff.cpu().numpy()
            constant[start:stop] = batch_constant.cpu().numpy()
    if normalize:
        return _normalized(maps[0], constant, "ALFF"), _normalized(maps[1], constant, "fALFF")
    return maps[0], maps[1]
