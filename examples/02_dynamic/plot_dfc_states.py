"""
Recurring dynamic-connectivity states
=====================================

Allen et al. (2014) cluster the sliding-window correlations of every subject
of a cohort into a few recurring states, then describe each subject by how
it visits them: fraction of time, dwell time, transitions.
:class:`connscale.DFCStates` runs their two-stage k-means (exemplar windows
first, then all windows) on the device. Here the cohort is simulated, so the
true states are known.
"""

# %%
# A cohort that switches between three states
# -------------------------------------------
# :func:`connscale.datasets.simulate_states` plants, for each state, a
# partition of the regions into correlated networks; every subject moves
# between the states in segments of 40-80 time points.
import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, confusion_matrix

import connscale
from connscale.datasets import simulate_states

cohort = simulate_states(8, 12, 400, n_states=3, random_state=0)
print(len(cohort.timeseries), "subjects,", cohort.timeseries[0].shape)

# %%
# Windowed FC, then states
# ------------------------
# One :func:`connscale.dynamic_correlation` result per subject (edge vectors
# of every window) goes into :meth:`connscale.DFCStates.fit`.
window, step = 30, 5
windows = [connscale.dynamic_correlation(ts, window, step) for ts in cohort.timeseries]
states = connscale.DFCStates(3, metric="l1", random_state=0).fit(windows)
print("states:", states.cluster_centers_.shape, "inertia", round(states.inertia_, 1))

# %%
# The k-means labels are found up to a permutation: compare them with each
# window's true state (the state at its centre) by the adjusted Rand index.
truth = np.concatenate(cohort.window_states(window, step))
found = np.concatenate(states.labels_)
ari = adjusted_rand_score(truth, found)
print(f"adjusted Rand index against the true states: {ari:.2f}")
assert ari > 0.5

# %%
# The states and one subject's sequence
# -------------------------------------
# Each found state is named after the true state it overlaps most (Hungarian
# assignment on the confusion matrix), to draw the two sequences together.
found_to_true = dict(zip(*linear_sum_assignment(-confusion_matrix(found, truth))))
n = cohort.timeseries[0].shape[1]
fig, axes = plt.subplots(1, 4, figsize=(12, 3), gridspec_kw={"width_ratios": [1, 1, 1, 2]})
for k, ax in enumerate(axes[:3]):
    ax.imshow(connscale.vec_to_matrix(states.state_means_[k], n), vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_title(
        f"state {k} (true {found_to_true[k]}): {states.fraction_time_[:, k].mean():.0%} of windows",
        fontsize=9,
    )
    ax.axis("off")
renamed = [found_to_true[label] for label in states.labels_[0]]
first = windows[0].window_starts
axes[3].step(first, renamed, where="post", label="found")
axes[3].step(first, cohort.window_states(window, step)[0], where="post", ls="--", label="true")
axes[3].set_xlabel("window onset")
axes[3].set_yticks(range(3))
axes[3].set_title("subject 0's state sequence")
axes[3].legend(fontsize=7)
fig.tight_layout()

# %%
# Per-subject features
# --------------------
# Fraction of time and mean dwell time per state (in windows), the number of
# transitions and the transition matrix: features for a classifier.
print("fraction of time:\n", np.round(states.fraction_time_, 2))
print("mean dwell time (windows):\n", np.round(states.mean_dwell_time_, 1))
print("transitions per subject:", states.n_transitions_)
