"""
ALFF, fALFF and ReHo
====================

Two local measures of resting-state activity, as XCP-D computes them: the
amplitude of low-frequency fluctuations (ALFF: the mean amplitude of the
spectrum between 0.01 and 0.08 Hz, and fALFF, its share of the whole
spectrum) and regional homogeneity (ReHo: Kendall's W of a voxel's series
with those of its 26 neighbours, as AFNI's ``3dReHo``). Here on nitime's
``fmri1`` scan (40 volumes, TR 1.35 s), each checked on a voxel against
scipy and the formula.
"""

# %%
# ALFF and fALFF
# --------------
# :func:`connscale.alff` takes (n_timepoints, n_series) and the repetition
# time, and returns the two maps.
import matplotlib.pyplot as plt
import nibabel as nib
import numpy as np
from nilearn import image, plotting
from scipy.signal import periodogram
from scipy.stats import rankdata

import connscale
from connscale.datasets import compute_brain_mask, load_nitime_fmri
from connscale.io.nifti import load_masked

img = load_nitime_fmri(1)
mask = compute_brain_mask(img)
voxels, masker = load_masked(img, mask=mask)
t_r = 1.35
alff, falff = connscale.alff(voxels, t_r, high_pass=0.01, low_pass=0.08)
print(f"ALFF: median {np.median(alff):.1f}; fALFF: median {np.median(falff):.2f}")

# %%
# One voxel by hand: the amplitude spectrum is the square root of scipy's
# periodogram; the band runs from the frequency nearest 0.01 Hz up to, but
# not including, the one nearest 0.08 Hz; ALFF is twice its mean amplitude.
v = 500
f, power = periodogram(voxels[:, v] - voxels[:, v].mean(), fs=1 / t_r, scaling="spectrum")
amplitude = np.sqrt(power)
band = slice(np.argmin(np.abs(f - 0.01)), np.argmin(np.abs(f - 0.08)))
np.testing.assert_allclose(alff[v], 2 * amplitude[band].mean(), rtol=1e-4)
np.testing.assert_allclose(falff[v], amplitude[band].sum() / amplitude[1:].sum(), rtol=1e-4)
print(f"voxel {v}: band {f[band][0]:.3f}-{f[band][-1]:.3f} Hz, ALFF {alff[v]:.2f}")

# %%
# ReHo
# ----
# :func:`connscale.reho` takes the 4-D image and its mask and returns the map
# as a NIfTI image (27 neighbours by default; those outside the mask are left
# out).
reho_img = connscale.reho(img, mask)
reho = reho_img.get_fdata()
print(f"ReHo: median {np.median(reho[mask.get_fdata() > 0]):.3f}")

# %%
# Kendall's W of a voxel whose 27 neighbours are all in the mask, by its
# formula: W = 12 S / (m² (n³ - n) - m Σ (t³ - t)), with S the sum of squared
# deviations of the time points' rank sums, m series of n time points, and
# the correction for the groups of t tied values (this scan's values are
# integers, so some tie).
data = img.get_fdata()
inside = mask.get_fdata() > 0
x, y, z = 5, 5, 9
assert inside[x - 1 : x + 2, y - 1 : y + 2, z - 1 : z + 2].all()
block = data[x - 1 : x + 2, y - 1 : y + 2, z - 1 : z + 2].reshape(27, -1)
ranks = rankdata(block, axis=1).sum(axis=0)
m, n = block.shape
ties = sum((c**3 - c).sum() for c in (np.unique(s, return_counts=True)[1] for s in block))
w = 12 * ((ranks - ranks.mean()) ** 2).sum() / (m**2 * (n**3 - n) - m * ties)
np.testing.assert_allclose(reho[x, y, z], w, rtol=1e-4)
print(f"ReHo at voxel {(x, y, z)}: {reho[x, y, z]:.4f} = Kendall's W {w:.4f}")

# %%
# The three maps
# --------------
maps = {
    "ALFF": masker.inverse_transform(alff.astype(np.float32)),
    "fALFF": masker.inverse_transform(falff.astype(np.float32)),
    "ReHo": nib.Nifti1Image(reho.astype(np.float32), img.affine),
}
mean_img = image.mean_img(img)
fig, axes = plt.subplots(3, 1, figsize=(8, 7))
for ax, (name, map_img) in zip(axes, maps.items()):
    plotting.plot_stat_map(
        map_img,
        bg_img=mean_img,
        display_mode="x",  # the scan is a sagittal slab
        cut_coords=4,
        title=name,
        axes=ax,
        cmap="inferno",
        symmetric_cbar=False,
    )
