"""
Functional networks by rank-1 dictionary learning
=================================================

r1DL (Li et al.) learns K sparse networks one at a time: each atom is a time
course u and a map v with r non-zero voxels that best explain what the
earlier atoms left of the data S (T x P). First on a simulation with planted
networks, to see that they are found; then with the scikit-learn-style
estimator :class:`connscale.R1DL` on nitime's ``fmri1`` scan.
"""

# %%
# Planted networks
# ----------------
# :func:`connscale.datasets.simulate_networks` makes S = time courses x
# sparse maps + noise: 8 networks of 5% of 5,000 voxels each.
import matplotlib.pyplot as plt
import numpy as np
from nilearn import image, plotting

import connscale
from connscale.datasets import compute_brain_mask, load_nitime_fmri, simulate_networks

S, courses, maps = simulate_networks(150, 5_000, 8, sparsity=0.05, noise=1.0, random_state=0)
result = connscale.r1dl(S, n_components=8, sparsity=0.05, random_state=0)
print("dictionary", result.dictionary.shape, "loadings", result.loadings.shape)
print("updates per atom:", result.n_iter)

# %%
# :func:`connscale.match_networks` pairs each planted map with a distinct
# learned one (Hungarian assignment on the spatial similarity
# R = |P1 ∩ P2| / |P2| of their supports).
learned, planted, similarity = connscale.match_networks(result.loadings, maps)
print("similarity of each planted network to its match:", np.round(similarity, 2))
assert similarity.min() > 0.9

fig, axes = plt.subplots(2, 4, figsize=(11, 4), sharex=True)
for ax, m, t, sim in zip(axes.flat, learned, planted, similarity):
    u = result.dictionary[:, m]
    ax.plot(courses[:, t] / np.linalg.norm(courses[:, t]), color="gray", label="planted")
    ax.plot(u * np.sign(u @ courses[:, t]), color="C3", lw=1, label="learned")
    ax.set_title(f"network {t}: R = {sim:.2f}", fontsize=9)
    ax.set_yticks([])
axes[0, 0].legend(fontsize=7)
fig.supxlabel("time point")
fig.tight_layout()

# %%
# On a scan, as an estimator
# --------------------------
# :class:`connscale.R1DL` takes a 4-D image and its mask, and gives the maps
# back as a 4-D NIfTI image (``components_img_``) beside the time courses.
img = load_nitime_fmri(1)
estimator = connscale.R1DL(4, sparsity=0.1, mask_img=compute_brain_mask(img), random_state=0)
estimator.fit(img)
print("components image:", estimator.components_img_.shape)

mean_img = image.mean_img(img)
fig, axes = plt.subplots(2, 1, figsize=(8, 4.5))
for k, ax in enumerate(axes):
    plotting.plot_stat_map(
        image.index_img(estimator.components_img_, k),
        bg_img=mean_img,
        display_mode="x",  # the scan is a sagittal slab
        cut_coords=4,
        title=f"network {k}",
        axes=ax,
    )
