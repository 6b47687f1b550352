"""
LiFE and ReAl-LiFE: pruning a tractogram with a λ sweep
=======================================================

LiFE (Pestilli et al. 2014) gives every streamline of a tractogram a
non-negative weight so that the streamlines together predict the diffusion
signal; streamlines of weight 0 are not supported by the data. ReAl-LiFE
adds an L1 penalty λ on the weights, which prunes more as λ grows. Here on
dipy's small scan and tractogram (``small_25``, shipped with dipy):
the λ sweep, with each λ's cross-validated error (the gradient directions
split in two), and the fit it selects. (For streamlines whose truth is
known, :func:`connscale.datasets.simulate_life_phantom` simulates a scan, its
repeat and a tractogram of true and false streamlines.)
"""

# %%
# The sweep
# ---------
# :func:`connscale.life.fit` with ``lambdas`` fits each λ, warm-started from
# the previous one, and returns the fit of lowest cross-validated median
# RMSE, the sweep's table in ``lambda_sweep``.
import matplotlib.pyplot as plt
import numpy as np
from dipy.data import get_fnames

from connscale import life

dwi, bvals, bvecs = get_fnames(name="small_25")
tractogram = get_fnames(name="small_25_streamlines")
lambdas = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
fit = life.fit(dwi, bvals, bvecs, tractogram, lambdas=lambdas, random_state=0)

print(f"{'lambda':>7} {'weight sum':>10} {'non-zero':>8} {'CV RMSE':>8}")
for row in fit.lambda_sweep:
    print(
        f"{row['lam']:7.2f} {row['weight_sum']:10.2f} {row['n_nonzero']:8d} "
        f"{row['cv_rmse_median']:8.2f}"
    )
print(f"selected: lambda = {fit.lam}, {np.count_nonzero(fit.weights)} of {fit.weights.size} kept")

# %%
# Above λ_max every weight is 0: :func:`connscale.life.lambda_max` gives it
# from the model, so a sweep can be set as fractions of it.
lam_max = life.lambda_max(fit.model)
print(f"lambda_max = {lam_max:.3f}")
assert np.all(fit.weights >= 0)
above = [row["n_nonzero"] for row in fit.lambda_sweep if row["lam"] >= lam_max]
assert above and not any(above)

fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
lams = np.array([row["lam"] for row in fit.lambda_sweep])
x = np.where(lams > 0, lams, lams[lams > 0].min() / 3)  # λ = 0 drawn left of the others
axes[0].semilogx(x, [row["n_nonzero"] for row in fit.lambda_sweep], marker="o")
axes[0].axvline(lam_max, color="gray", ls=":", label="λ_max")
axes[0].set_xlabel("λ (λ = 0 at the left)")
axes[0].set_ylabel("streamlines kept")
axes[0].legend()
axes[1].semilogx(x, [row["cv_rmse_median"] for row in fit.lambda_sweep], marker="o")
axes[1].set_xlabel("λ (λ = 0 at the left)")
axes[1].set_ylabel("cross-validated median RMSE")
fig.tight_layout()

# %%
# The selected fit
# ----------------
# Its weights (one per input streamline) and its error in each voxel of the
# model.
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].bar(range(fit.weights.size), fit.weights)
axes[0].set_xlabel("streamline")
axes[0].set_ylabel("weight")
axes[1].hist(fit.voxel_rmse, bins=20)
axes[1].set_xlabel("RMSE per voxel (signal units)")
fig.tight_layout()
