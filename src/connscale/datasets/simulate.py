"""Simulated time series with known correlation structure (planted blocks)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from connscale._validation import check_int, check_random_state


def simulate_timeseries(
    n_timepoints: int,
    n_series: int,
    *,
    n_blocks: int = 20,
    block_correlation: float = 0.6,
    fraction_in_blocks: float = 0.5,
    dtype: npt.DTypeLike = "float32",
    random_state: int | np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Series whose correlation matrix has planted blocks.

    Each of ``n_blocks`` networks has a shared signal; a series in a network
    is ``sqrt(c)·signal + sqrt(1-c)·noise`` with ``c = block_correlation``,
    so two series of the same network correlate by ``c`` in expectation and
    series of different networks (or outside every network) by 0. Blocks are
    contiguous in column order.

    Parameters
    ----------
    n_timepoints, n_series : int
    n_blocks : int, default=20
    block_correlation : float in [0, 1), default=0.6
    fraction_in_blocks : float in [0, 1], default=0.5
        Share of the series that belong to a network; the rest is noise.
    dtype : {'float32', 'float64'}, default='float32'
    random_state : int, Generator or None

    Returns
    -------
    timeseries : ndarray of shape (n_timepoints, n_series)
    block_labels : ndarray of shape (n_series,), int
        Network of each series, -1 for none.

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.datasets import simulate_timeseries
    >>> x, blocks = simulate_timeseries(2000, 6, n_blocks=1, fraction_in_blocks=0.5,
    ...                                 random_state=0)
    >>> blocks
    array([ 0,  0,  0, -1, -1, -1])
    >>> round(float(np.corrcoef(x[:, :2].T)[0, 1]), 1)
    0.6
    """
    n_timepoints = check_int(n_timepoints, "n_timepoints", minimum=3)
    n_series = check_int(n_series, "n_series", minimum=1)
    n_blocks = check_int(n_blocks, "n_blocks", minimum=1)
    if not 0 <= block_correlation < 1:
        raise ValueError(f"'block_correlation' must lie in [0, 1); got {block_correlation}.")
    if not 0 <= fraction_in_blocks <= 1:
        raise ValueError(f"'fraction_in_blocks' must lie in [0, 1]; got {fraction_in_blocks}.")
    rng = check_random_state(random_state)
    n_in = int(round(n_series * fraction_in_blocks))
    labels = np.full(n_series, -1, dtype=np.int64)
    labels[:n_in] = np.arange(n_in) * n_blocks // max(n_in, 1)
    dtype = np.dtype(dtype)
    signals = rng.standard_normal((n_timepoints, n_blocks), dtype=np.float32)
    data = rng.standard_normal((n_timepoints, n_series), dtype=np.float32)
    data *= np.float32(np.sqrt(1 - block_correlation))
    in_block = labels >= 0
    data[:, in_block] += np.float32(np.sqrt(block_correlation)) * signals[:, labels[in_block]]
    data[:, ~in_block] /= np.float32(np.sqrt(1 - block_correlation))
    return data.astype(dtype, copy=False), labels
