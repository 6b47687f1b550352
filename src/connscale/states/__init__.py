"""Recurring dynamic-FC states (Allen et al. 2014) and their per-subject features.

k-means of a cohort's windowed FC on the device, and the per-subject
features of the state sequences (fraction of time, dwell time, transitions).
"""

from connscale.states._features import (
    StateFeatures,
    fraction_time,
    mean_dwell_time,
    n_transitions,
    state_features,
    transition_matrix,
)
from connscale.states.estimator import DFCStates, elbow, exemplar_windows

__all__ = [
    "DFCStates",
    "StateFeatures",
    "elbow",
    "exemplar_windows",
    "fraction_time",
    "mean_dwell_time",
    "n_transitions",
    "state_features",
    "transition_matrix",
]
