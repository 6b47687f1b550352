"""
From a cohort's files to a classifier
=====================================

:func:`connscale.run_cohort` runs one job per scan of a cohort (here the
region-pair DFC of each subject's series) on one of several engines (this
process, a process pool, Dask or Spark), writes one BIDS-named store per scan
and skips the scans already done when run again.
:func:`connscale.load_features` reads the stores back as a feature matrix,
and :func:`connscale.classify.align_labels` attaches each subject's group from
``participants.tsv``.
"""

# %%
# A cohort written as files
# -------------------------
# 30 simulated subjects, 10 regions, 200 time points, two edges stronger in
# patients; one ``sub-XX_timeseries.tsv`` per subject and ``participants.tsv``.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import connscale
from connscale.classify import align_labels
from connscale.datasets import simulate_cohort

root = Path(tempfile.mkdtemp())
cohort = simulate_cohort(30, 10, 200, effect_edges=2, effect_size=0.4, random_state=0)
written = cohort.write(root / "inputs")
print(len(written["timeseries"]), "series files, e.g.", written["timeseries"][0].name)

# %%
# One task per scan
# -----------------
# ``engine="serial"`` runs the tasks in this process; ``"local"`` (a process
# pool), ``"dask"`` and ``"spark"`` write the same files.
params = {"window_length": 32, "step": 2, "threshold": 0.3}
report = connscale.run_cohort(
    written["timeseries"], "pairs", root / "pairs", params=params, engine="serial", verbose=0
)
stores = sorted((root / "pairs").rglob("*_pairs.h5"))
print(len(stores), "stores, e.g.", stores[0].relative_to(root / "pairs"))

# %%
# A second run finds every scan done with the same parameters and skips it.
again = connscale.run_cohort(
    written["timeseries"], "pairs", root / "pairs", params=params, engine="serial", verbose=0
)
print(
    f"first run: {report.n_ok} computed; "
    f"second run: {again.n_ok} computed, {again.n_skipped} skipped"
)
assert (report.n_ok, again.n_ok, again.n_skipped) == (30, 0, 30)

# %%
# Features and labels
# -------------------
# Each pair's mean and standard deviation over windows (Fisher z), one row
# per subject, then the groups of ``participants.tsv`` (patients positive).
features = connscale.load_features(stores, fisher_z_transform=True)
features = align_labels(features, written["participants"], label="group")
print(features.X.shape, features.y_classes, "statistics:", sorted(set(features.statistic)))

result = connscale.cross_validate(features.X, features.y, folds=5, repeats=5, random_state=0)
acc = result["accuracy"]
print(f"accuracy {acc['mean']:.2f} [{acc['ci_low']:.2f}, {acc['ci_high']:.2f}]")

# %%
# The planted pairs have the largest weights among the pairs' means.
mean = np.array(features.statistic) == "mean"
importance = result["feature_weights"]["importance"][mean]
pairs = list(zip(features.pair_i[mean].tolist(), features.pair_j[mean].tolist()))
planted = [pairs.index(tuple(edge)) for edge in cohort.effect_edges.tolist()]
top = set(np.argsort(importance)[::-1][: len(planted)].tolist())
print("planted pairs:", cohort.effect_edges.tolist(), "in the top two:", top == set(planted))

fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(range(len(importance)), importance, color="gray")
ax.bar(planted, importance[planted], color="C3", label="planted pairs")
ax.set_xlabel("region pair (mean r over windows)")
ax.set_ylabel("mean |SVM weight|")
ax.legend()
fig.tight_layout()
