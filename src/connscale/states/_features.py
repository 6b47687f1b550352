"""Features that summarise a subject's sequence of states (Allen et al. 2014).

The fraction of windows in each state, the mean dwell time (length of the
runs of consecutive windows in one state), the number of transitions and
the matrix of transitions between states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import numpy.typing as npt

from connscale._validation import Interval, validate_params

__all__ = [
    "StateFeatures",
    "fraction_time",
    "mean_dwell_time",
    "n_transitions",
    "state_features",
    "transition_matrix",
]


# n_states of every public function here (validated once, at the outer call).
_N_STATES = {"n_states": [Interval(Integral, 1, None, closed="left")]}


def _check_sequence(labels: npt.ArrayLike, n_states: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(
            f"A state sequence must be a non-empty 1-D array; got shape {labels.shape}."
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"State labels must be integers; got dtype {labels.dtype}.")
    if labels.min() < 0 or labels.max() >= n_states:
        raise ValueError(
            f"State labels must lie in [0, {n_states}); got values in "
            f"[{labels.min()}, {labels.max()}]."
        )
    return labels.astype(np.int64, copy=False)


def _runs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """State and length of each run of equal consecutive labels."""
    edges = np.flatnonzero(np.diff(labels)) + 1
    starts = np.concatenate([[0], edges])
    lengths = np.diff(np.concatenate([starts, [labels.size]]))
    return labels[starts], lengths


@validate_params(_N_STATES)
def fraction_time(labels: npt.ArrayLike, n_states: int) -> np.ndarray:
    """Fraction of the windows spent in each state.

    Parameters
    ----------
    labels : array-like of int, shape (n_windows,)
        One subject's state sequence.
    n_states : int

    Returns
    -------
    ndarray of shape (n_states,)
        Sums to 1.

    Examples
    --------
    >>> fraction_time([0, 0, 1, 1, 1, 0], 3)
    array([0.5, 0.5, 0. ])
    """
    labels = _check_sequence(labels, n_states)
    return np.bincount(labels, minlength=n_states) / labels.size


@validate_params(_N_STATES)
def mean_dwell_time(labels: npt.ArrayLike, n_states: int) -> np.ndarray:
    """Mean length, in windows, of the runs of consecutive windows in each state.

    Parameters
    ----------
    labels : array-like of int, shape (n_windows,)
    n_states : int

    Returns
    -------
    ndarray of shape (n_states,)
        0 for a state the subject never enters (as GIFT's dFNC toolbox).
        Multiply by the step (in seconds) for a time.

    Examples
    --------
    >>> mean_dwell_time([0, 0, 1, 1, 1, 0], 3)
    array([1.5, 3. , 0. ])
    """
    labels = _check_sequence(labels, n_states)
    states, lengths = _runs(labels)
    total = np.bincount(states, weights=lengths, minlength=n_states)
    count = np.bincount(states, minlength=n_states)
    return np.divide(total, count, out=np.zeros(n_states), where=count > 0)


def n_transitions(labels: npt.ArrayLike) -> int:
    """Count the changes of state between consecutive windows.

    Parameters
    ----------
    labels : array-like of int, shape (n_windows,)
        One subject's state sequence.

    Returns
    -------
    int

    Examples
    --------
    >>> n_transitions([0, 0, 1, 1, 1, 0])
    2
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"A state sequence must be 1-D; got shape {labels.shape}.")
    return int(np.count_nonzero(np.diff(labels)))


@validate_params(_N_STATES)
def transition_matrix(
    labels: npt.ArrayLike, n_states: int, *, normalize: bool = True
) -> np.ndarray:
    """Transitions between consecutive windows, from state (row) to state (column).

    Parameters
    ----------
    labels : array-like of int, shape (n_windows,)
    n_states : int
    normalize : bool, default=True
        Each row divided by its sum: the probability of the next window's
        state given this window's (rows of states never left are 0).
        False gives counts, staying in a state included.

    Returns
    -------
    ndarray of shape (n_states, n_states)

    Examples
    --------
    >>> transition_matrix([0, 0, 1, 1, 1, 0], 2, normalize=False)
    array([[1., 1.],
           [1., 2.]])
    """
    labels = _check_sequence(labels, n_states)
    counts = np.zeros((n_states, n_states))
    np.add.at(counts, (labels[:-1], labels[1:]), 1.0)
    if not normalize:
        return counts
    total = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)


@dataclass
class StateFeatures:
    """State features of a cohort: one row per subject.

    Attributes
    ----------
    X : ndarray of shape (n_subjects, n_features)
        ``fraction_time`` (one per state), ``mean_dwell_time`` (one per
        state), ``n_transitions`` and the transition probabilities (one per
        ordered pair of states), in that order; pass it to
        :func:`connscale.cross_validate`.
    feature_names : list of str
        ``fraction_time_state-1``, ``mean_dwell_time_state-1``, ...,
        ``n_transitions``, ``transition_state-1_to_state-2``, ... (states
        numbered from 1 in names).
    subjects : list of str

    Examples
    --------
    >>> from connscale.states import state_features
    >>> features = state_features([[0, 0, 1, 1], [1, 1, 1, 0]], 2, subjects=["01", "02"])
    >>> features.X.shape, features.feature_names[4]
    ((2, 9), 'n_transitions')
    """

    X: np.ndarray
    feature_names: list
    subjects: list

    def rows(self) -> list[dict]:
        """Return one dict per subject (``subject`` then every feature), for a TSV.

        Returns
        -------
        list of dict
            One per subject, in order.

        Examples
        --------
        >>> from connscale.states import state_features
        >>> row = state_features([[0, 0, 1, 1]], 2, subjects=["01"]).rows()[0]
        >>> row["subject"], row["fraction_time_state-1"], row["n_transitions"]
        ('01', 0.5, 1.0)
        """
        return [
            {"subject": s, **dict(zip(self.feature_names, row.tolist()))}
            for s, row in zip(self.subjects, self.X)
        ]


@validate_params(_N_STATES)
def state_features(
    sequences: Sequence[npt.ArrayLike], n_states: int, *, subjects: Sequence[str] | None = None
) -> StateFeatures:
    """Every state feature of every subject, as one table.

    Parameters
    ----------
    sequences : list of array-like of int
        One state sequence per subject.
    n_states : int
    subjects : list of str or None
        Row names (default ``'0'``, ``'1'``, ...).

    Returns
    -------
    StateFeatures

    Examples
    --------
    >>> from connscale.states import state_features
    >>> features = state_features([[0, 0, 1, 1], [1, 1, 1, 0]], 2)
    >>> features.subjects, features.X[:, :2].tolist()
    (['0', '1'], [[0.5, 0.5], [0.25, 0.75]])
    """
    sequences = list(sequences)
    subjects = [str(i) for i in range(len(sequences))] if subjects is None else list(subjects)
    if len(subjects) != len(sequences):
        raise ValueError(
            f"Expected one subject name per sequence ({len(sequences)}); got {len(subjects)}."
        )
    states = [f"state-{j + 1}" for j in range(n_states)]
    names = (
        [f"fraction_time_{s}" for s in states]
        + [f"mean_dwell_time_{s}" for s in states]
        + ["n_transitions"]
        + [f"transition_{a}_to_{b}" for a in states for b in states]
    )
    rows = [
        np.concatenate(
            [
                fraction_time(seq, n_states),
                mean_dwell_time(seq, n_states),
                [n_transitions(seq)],
                transition_matrix(seq, n_states).ravel(),
            ]
        )
        for seq in sequences
    ]
    X = np.vstack(rows) if rows else np.empty((0, len(names)))
    return StateFeatures(X=X, feature_names=names, subjects=subjects)
