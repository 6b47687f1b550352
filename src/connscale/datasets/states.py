"""Subjects whose connectivity switches between a few known states.

Each state is a correlation matrix with planted networks: the regions are
split at random (one split per state) into ``n_networks`` groups whose
members correlate by ``correlation``, and the rest by 0. A subject's scan is
a sequence of segments, each drawn in one state for a dwell time uniform in
``[min_dwell, max_dwell]`` time points, the next state always another one;
within a segment the time points are independent draws from the state's
correlation. Sliding windows that lie inside one segment therefore sample
one state, and the window-level truth (the state at each window's centre)
is known, so recovered states, dwell times and transitions can be checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from connscale._validation import check_int, check_random_state, check_window

__all__ = ["StateCohort", "simulate_states"]


@dataclass
class StateCohort:
    """Output of :func:`simulate_states`.

    Attributes
    ----------
    timeseries : list of ndarray of shape (n_timepoints, n_regions)
    states : list of ndarray of shape (n_timepoints,), int
        The state of every time point of every subject.
    state_correlations : ndarray of shape (n_states, n_regions, n_regions)
    subjects : list of str
    region_labels : list of str

    Examples
    --------
    >>> from connscale.datasets import simulate_states
    >>> cohort = simulate_states(2, 4, 100, random_state=0)
    >>> cohort.n_states, cohort.states[0].shape, cohort.subjects
    (3, (100,), ['01', '02'])
    """

    timeseries: list
    states: list
    state_correlations: np.ndarray
    subjects: list
    region_labels: list

    @property
    def n_states(self) -> int:
        """The number of states."""
        return int(self.state_correlations.shape[0])

    def window_states(self, window_length: int, step: int = 1) -> list:
        """Return the true state of every sliding window (the state at its centre).

        Parameters
        ----------
        window_length : int
            Window length in time points.
        step : int, default=1
            Window step.

        Returns
        -------
        list of ndarray of shape (n_windows,), int

        Examples
        --------
        >>> from connscale.datasets import simulate_states
        >>> cohort = simulate_states(1, 4, 100, random_state=0)
        >>> truth = cohort.window_states(20, 10)
        >>> truth[0].shape
        (9,)
        """
        out = []
        for states in self.states:
            window_length, step = check_window(window_length, step, states.size, minimum=2)
            starts = np.arange(0, states.size - window_length + 1, step)
            out.append(states[starts + window_length // 2])
        return out

    def pure_windows(self, window_length: int, step: int = 1) -> list:
        """Return which sliding windows lie inside one segment (one state throughout).

        Parameters
        ----------
        window_length : int
            Window length in time points.
        step : int, default=1
            Window step.

        Returns
        -------
        list of ndarray of shape (n_windows,), bool

        Examples
        --------
        >>> from connscale.datasets import simulate_states
        >>> cohort = simulate_states(1, 4, 100, random_state=0)
        >>> pure = cohort.pure_windows(20, 10)[0]
        >>> pure.shape, pure.dtype
        ((9,), dtype('bool'))
        """
        out = []
        for states in self.states:
            window_length, step = check_window(window_length, step, states.size, minimum=2)
            starts = np.arange(0, states.size - window_length + 1, step)
            change = np.concatenate([[0], np.cumsum(np.diff(states) != 0)])
            out.append(change[starts] == change[starts + window_length - 1])
        return out


def _state_correlation(
    n_regions: int, n_networks: int, correlation: float, rng: np.random.Generator
) -> np.ndarray:
    network = rng.permutation(np.arange(n_regions) * n_networks // n_regions)
    same = network[:, None] == network[None, :]
    matrix = np.where(same, correlation, 0.0)
    np.fill_diagonal(matrix, 1.0)
    return matrix


def simulate_states(
    n_subjects: int,
    n_regions: int,
    n_timepoints: int,
    *,
    n_states: int = 3,
    n_networks: int = 3,
    correlation: float = 0.6,
    min_dwell: int = 40,
    max_dwell: int = 80,
    dtype: npt.DTypeLike = "float32",
    random_state: int | np.random.Generator | None = None,
) -> StateCohort:
    """Simulate subjects switching between ``n_states`` known correlation states.

    Parameters
    ----------
    n_subjects : int
    n_regions : int
        At least 2.
    n_timepoints : int
        At least ``min_dwell``.
    n_states : int, default=3
        At least 2.
    n_networks : int, default=3
        Planted networks per state (each state splits the regions anew).
    correlation : float, default=0.6
        Correlation within a network, in [0, 1).
    min_dwell, max_dwell : int, default=40, 80
        Bounds of a segment's length in time points.
    dtype : {'float32', 'float64'}, default='float32'
    random_state : int, numpy.random.Generator or None, default=None

    Returns
    -------
    StateCohort

    Examples
    --------
    >>> cohort = simulate_states(2, 10, 200, random_state=0)
    >>> cohort.timeseries[0].shape, cohort.state_correlations.shape
    ((200, 10), (3, 10, 10))
    """
    n_subjects = check_int(n_subjects, "n_subjects", minimum=1)
    n_regions = check_int(n_regions, "n_regions", minimum=2)
    n_states = check_int(n_states, "n_states", minimum=2)
    n_networks = check_int(n_networks, "n_networks", minimum=1, maximum=n_regions)
    min_dwell = check_int(min_dwell, "min_dwell", minimum=1)
    max_dwell = check_int(max_dwell, "max_dwell", minimum=min_dwell)
    n_timepoints = check_int(n_timepoints, "n_timepoints", minimum=min_dwell)
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"'correlation' must lie in [0, 1); got {correlation}.")
    rng = check_random_state(random_state)
    matrices = np.stack(
        [_state_correlation(n_regions, n_networks, correlation, rng) for _ in range(n_states)]
    )
    factors = np.linalg.cholesky(matrices)  # block equicorrelation: positive definite
    timeseries, sequences = [], []
    for _ in range(n_subjects):
        states = np.empty(n_timepoints, dtype=np.int64)
        t, state = 0, int(rng.integers(n_states))
        while t < n_timepoints:
            length = int(rng.integers(min_dwell, max_dwell + 1))
            states[t : t + length] = state
            t += length
            state = int((state + rng.integers(1, n_states)) % n_states)
        noise = rng.standard_normal((n_timepoints, n_regions))
        series = np.einsum("tij,tj->ti", factors[states], noise)
        timeseries.append(series.astype(dtype, copy=False))
        sequences.append(states)
    width = len(str(n_subjects))
    return StateCohort(
        timeseries=timeseries,
        states=sequences,
        state_correlations=matrices,
        subjects=[f"{i + 1:0{max(2, width)}d}" for i in range(n_subjects)],
        region_labels=[f"region_{i}" for i in range(n_regions)],
    )
