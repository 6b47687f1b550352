"""
Static functional connectivity and nilearn's edge order
=======================================================

All-pairs Pearson correlation of nitime's 31 resting-state region series,
checked against numpy and nilearn, in its three output kinds, and the
conversion of connscale's edge vectors to nilearn's order.
"""

# %%
# Load the region series
# ----------------------
# nitime ships 250 time points of 31 regions (TR 1.89 s). Series are
# (n_timepoints, n_series), as nilearn's maskers return them.
import matplotlib.pyplot as plt
import numpy as np

import connscale
from connscale.datasets import load_nitime_roi

timeseries, labels = load_nitime_roi()
print(timeseries.shape, labels[:5])

# %%
# The correlation matrix
# ----------------------
# ``kind="dense"`` gives the (N, N) matrix. It is plain Pearson correlation:
# the same as :func:`numpy.corrcoef` and as nilearn's ``ConnectivityMeasure``
# with the empirical covariance (nilearn's default shrinks it).
from nilearn.connectome import ConnectivityMeasure
from sklearn.covariance import EmpiricalCovariance

r = connscale.correlation(timeseries, device="auto")
np.testing.assert_allclose(r, np.corrcoef(timeseries.T), atol=1e-5)
measure = ConnectivityMeasure(kind="correlation", cov_estimator=EmpiricalCovariance())
np.testing.assert_allclose(r, measure.fit_transform([timeseries])[0], atol=1e-5)

fig, ax = plt.subplots(figsize=(6, 5))
image = ax.imshow(r, vmin=-1, vmax=1, cmap="RdBu_r")
ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
ax.set_yticks(range(len(labels)), labels, fontsize=6)
fig.colorbar(image, label="Pearson r")
ax.set_title("nitime's 31 regions")

# %%
# Edge vectors and their order
# ----------------------------
# ``kind="triu"`` keeps the N(N-1)/2 pairs above the diagonal in row-major
# order: (0, 1), (0, 2), ..., (0, N-1), (1, 2), ... as
# ``np.triu_indices(N, 1)``. :func:`connscale.triu_pairs` and
# :func:`connscale.triu_index` go between an edge and its pair.
edges = connscale.correlation(timeseries, kind="triu")
n = timeseries.shape[1]
print(f"{edges.size} edges = {connscale.n_pairs(n)}")
i, j = connscale.triu_pairs(100, n=n)
print(f"edge 100 is ({labels[i]}, {labels[j]}): r = {edges[100]:.3f} = {r[i, j]:.3f}")
assert connscale.triu_index(i, j, n) == 100
np.testing.assert_allclose(connscale.vec_to_matrix(edges, n)[np.triu_indices(n, 1)], edges)

# %%
# nilearn's ``sym_matrix_to_vec(discard_diagonal=True)`` stores the lower
# triangle row by row: another order. Convert with
# :func:`connscale.to_nilearn_vec` and :func:`connscale.from_nilearn_vec`.
from nilearn.connectome import sym_matrix_to_vec

nilearn_edges = sym_matrix_to_vec(r, discard_diagonal=True)
print("same order as nilearn:", np.allclose(edges, nilearn_edges))
np.testing.assert_allclose(connscale.to_nilearn_vec(edges, n), nilearn_edges, atol=1e-6)
np.testing.assert_allclose(connscale.from_nilearn_vec(nilearn_edges, n), edges, atol=1e-6)

# %%
# A thresholded graph
# -------------------
# ``kind="sparse"`` keeps the pairs with r >= threshold (|r| with
# ``absolute=True``) as a ``scipy.sparse.csr_array`` of the upper triangle.
graph = connscale.correlation(timeseries, kind="sparse", threshold=0.5, absolute=True)
print(f"{graph.nnz} of {edges.size} edges have |r| >= 0.5")
assert graph.nnz == np.count_nonzero(np.abs(edges) >= 0.5)

coo = graph.tocoo()
degree = np.bincount(coo.row, minlength=n) + np.bincount(coo.col, minlength=n)
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(range(n), degree)
ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
ax.set_ylabel("edges with |r| >= 0.5")
fig.tight_layout()
