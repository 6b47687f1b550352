"""
Degree and eigenvector centrality maps as NIfTI
===============================================

Voxel-wise centrality (Zuo et al. 2012; fastECM, Wink et al. 2012) summarises
each voxel's row of the correlation matrix, which at 2 mm has 10^10 or more
entries. connscale computes the maps without storing the matrix: degree from
tiles of correlations consumed as they are made, eigenvector centrality by
matrix-free power iteration. Here on nitime's ``fmri1`` scan; the maps go
back into the scan's space with nilearn's masker and are plotted with
:mod:`nilearn.plotting`.
"""

# %%
# The in-brain voxels
# -------------------
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from nilearn import image, plotting
from scipy.sparse.linalg import eigsh

import connscale
from connscale.datasets import compute_brain_mask, load_nitime_fmri
from connscale.io.nifti import load_masked

img = load_nitime_fmri(1)
voxels, masker = load_masked(img, mask=compute_brain_mask(img))
print(f"{voxels.shape[1]} voxels x {voxels.shape[0]} volumes")

# %%
# Degree centrality
# -----------------
# The number of voxels each voxel correlates with above r = 0.25 (binary) and
# the sum of those correlations (weighted); several thresholds are one pass.
binary = connscale.degree_centrality(voxels, threshold=[0.25, 0.5])
weighted = connscale.degree_centrality(voxels, threshold=0.25, weighted=True)
print("binary degree maps:", binary.shape)

r = np.corrcoef(voxels.T)
np.fill_diagonal(r, 0)
np.testing.assert_array_equal(binary[0], (r > 0.25).sum(axis=1))
np.testing.assert_allclose(weighted, np.where(r > 0.25, r, 0).sum(axis=1), rtol=1e-4)

# %%
# Eigenvector centrality
# ----------------------
# The leading eigenvector of R + 1, computed from the N x T series only.
ecm = connscale.eigenvector_centrality(voxels)
leading = eigsh(r + np.eye(len(r)) + 1, k=1, which="LA")[1][:, 0]
leading *= np.sign(leading.sum())
print("correlation with numpy's eigenvector:", np.corrcoef(ecm, leading)[0, 1].round(6))
np.testing.assert_allclose(ecm / np.linalg.norm(ecm), leading, atol=1e-4)

# %%
# Writing and plotting the maps
# -----------------------------
# The masker that read the voxels writes the maps back as NIfTI images.
folder = Path(tempfile.mkdtemp())
maps = {"degree (r > 0.25)": binary[0], "weighted degree": weighted, "ECM": ecm}
for name, values in maps.items():
    path = folder / f"fmri1_stat-{name.split()[0]}_boldmap.nii.gz"
    masker.inverse_transform(values.astype(np.float32)).to_filename(path)
    print(path.name)

mean_img = image.mean_img(img)
fig, axes = plt.subplots(len(maps), 1, figsize=(8, 7))
for ax, (name, values) in zip(axes, maps.items()):
    plotting.plot_stat_map(
        masker.inverse_transform(values.astype(np.float32)),
        bg_img=mean_img,
        display_mode="x",  # the scan is a sagittal slab
        cut_coords=4,
        title=name,
        axes=ax,
        colorbar=True,
        cmap="inferno",
        symmetric_cbar=False,
    )
