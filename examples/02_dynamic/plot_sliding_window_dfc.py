"""
Sliding-window dynamic connectivity: sparse and low-rank storage
================================================================

Dynamic functional connectivity (DFC) correlates the series within each
window of ``window_length`` time points, moved by ``step``: k = (T - w) // s + 1
matrices of N x N. Storing them all is what limits DFC at voxel scale, so
connscale keeps each window in a compressed form: the edges above a threshold
(``kind="sparse"``), a low-rank approximation (``kind="lowrank"``, GPU-DFC's
randomized range finder) or an exact factor (``kind="factor"``).
"""

# %%
# Sparse windows of region series
# -------------------------------
# nitime's 31 region series, windows of 40 time points every 5: each window
# keeps the pairs with |r| >= 0.5 as a CSR matrix.
import matplotlib.pyplot as plt
import numpy as np

import connscale
from connscale.datasets import compute_brain_mask, load_nitime_fmri, load_nitime_roi

roi, labels = load_nitime_roi()
dfc = connscale.dynamic_correlation(
    roi, window_length=40, step=5, kind="sparse", threshold=0.5, absolute=True
)
print(f"{len(dfc)} windows starting at {dfc.window_starts[:4]}...")
print("window 3:", repr(dfc[3]))

start = dfc.window_starts[3]
exact = np.corrcoef(roi[start : start + 40].T)
upper = np.triu(exact, 1)  # the stored upper triangle, as numpy computes it
np.testing.assert_allclose(dfc[3].toarray(), np.where(np.abs(upper) >= 0.5, upper, 0), atol=1e-5)

fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(dfc.window_starts, [dfc[k].nnz for k in range(len(dfc))], marker="o")
ax.set_xlabel("window onset (volume)")
ax.set_ylabel("pairs with |r| >= 0.5")
fig.tight_layout()

# %%
# Low-rank windows of voxel series
# --------------------------------
# At voxel level a window of w time points has rank at most w - 1, far below
# the number of voxels N: a rank-l approximation stores N x l values twice
# instead of N(N-1)/2. nitime's ``fmri1`` scan has 40 volumes; its in-brain
# voxels are read with nilearn's masker.
from connscale.io.nifti import load_masked

img = load_nitime_fmri(1)
voxels, masker = load_masked(img, mask=compute_brain_mask(img))
print(f"{voxels.shape[1]} voxels x {voxels.shape[0]} volumes")

ranks = [2, 5, 10, 19]  # a window of 20 volumes has rank 19 at most: exact
errors = {}
for rank in ranks:
    lowrank = connscale.dynamic_correlation(
        voxels, 20, step=2, kind="lowrank", rank=rank, random_state=0, compute_error=True
    )
    errors[rank] = lowrank.mae
    print(
        f"rank {rank:2d}: {lowrank.compression_ratio:6.1f} x smaller, "
        f"mean absolute error {lowrank.mae.mean():.3f}"
    )

fig, ax = plt.subplots(figsize=(7, 3))
for rank, mae in errors.items():
    ax.plot(lowrank.window_starts, mae, marker="o", label=f"rank {rank}")
ax.set_xlabel("window onset (volume)")
ax.set_ylabel("mean |r - r_lowrank|")
ax.legend()
fig.tight_layout()

# %%
# Exact factors
# -------------
# A window's correlation matrix is U Uᵀ with U the window's N x w normalised
# series, so ``kind="factor"`` without a rank stores each window exactly in
# N x w values; :meth:`~connscale.DynamicConnectivity.to_dense` rebuilds it.
factor = connscale.dynamic_correlation(voxels, 20, step=2, kind="factor")
start = factor.window_starts[5]
window = voxels[start : start + 20]
np.testing.assert_allclose(factor.to_dense(5), np.corrcoef(window.T), atol=1e-4)
print(f"factor: {factor.nbytes / 1e6:.1f} MB for {len(factor)} exact windows")
