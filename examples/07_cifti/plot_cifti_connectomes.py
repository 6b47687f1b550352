"""
Dense and parcellated connectomes of grayordinates
==================================================

A CIFTI-2 dense time series (``.dtseries.nii``) holds the series of
grayordinates: cortical vertices and subcortical voxels, described by its
brain model. :func:`connscale.cifti.cifti_correlation` writes the
grayordinate-by-grayordinate correlation (``.dconn.nii``, as ``wb_command
-cifti-correlation``) and :func:`connscale.cifti.parcellate_cifti` averages
the grayordinates of each parcel of a label file (as ``wb_command
-cifti-parcellate``), whose connectome :func:`connscale.cifti.write_parcellated`
writes as ``.pconn.nii``. HCP and fMRIPrep's fs_LR files are large; here a
small dense series is written with nibabel on a brain model of a few hundred
vertices of each fs_LR 32k hemisphere and a block of thalamic voxels.
"""

# %%
# A small brain model and its series
# ----------------------------------
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import nibabel as nib
import numpy as np
from nibabel.cifti2 import BrainModelAxis, Cifti2Image, LabelAxis, SeriesAxis

from connscale.cifti import cifti_correlation, parcellate_cifti, write_parcellated

rng = np.random.default_rng(0)
affine = np.diag([2.0, 2.0, 2.0, 1.0])
affine[:3, 3] = [-90, -126, -72]
thalamus = np.zeros((91, 109, 91), bool)
thalamus[40:43, 55:58, 35:38] = True
left, right = (np.sort(rng.choice(32492, 300, replace=False)) for _ in range(2))
model = (
    BrainModelAxis.from_surface(left, 32492, "CortexLeft")
    + BrainModelAxis.from_surface(right, 32492, "CortexRight")
    + BrainModelAxis.from_mask(thalamus, name="ThalamusLeft", affine=affine)
)
print(f"{len(model)} grayordinates:", [str(name) for name, _, _ in model.iter_structures()])

# %%
# Five parcels: three on the left cortex, two on the right, and the
# thalamus. Each grayordinate is its parcel's signal plus noise; the first
# left parcel and the first right parcel share a signal.
keys = np.concatenate([np.repeat([1, 2, 3], 100), np.repeat([4, 5], 150), np.full(27, 6)])
n_timepoints = 150
signals = rng.standard_normal((n_timepoints, 7))
signals[:, 4] = 0.8 * signals[:, 1] + 0.6 * signals[:, 4]
data = signals[:, keys] + rng.standard_normal((n_timepoints, len(model)))

folder = Path(tempfile.mkdtemp())
dtseries = folder / "sub-01_task-rest_space-fsLR_den-toy_bold.dtseries.nii"
series = SeriesAxis(0.0, 0.8, n_timepoints, "SECOND")
nib.save(Cifti2Image(data.astype(np.float32), header=(series, model)), dtseries)
names = ["???", "L_visual", "L_motor", "L_default", "R_visual", "R_motor", "Thalamus"]
table = {k: (name, (*rng.uniform(size=3), 1.0)) for k, name in enumerate(names)}
table[0] = ("???", (0.0, 0.0, 0.0, 0.0))
dlabel = folder / "toy.dlabel.nii"
nib.save(
    Cifti2Image(keys[None].astype(np.float32), header=(LabelAxis(["parcels"], [table]), model)),
    dlabel,
)

# %%
# The dense connectome
# --------------------
# Every grayordinate against every other, written as ``.dconn.nii`` with the
# brain model on both axes.
result = cifti_correlation(dtseries, folder / "sub-01_task-rest_dconn.dconn.nii")
dconn = nib.load(result.path)
print(result.path.name, dconn.shape, type(dconn.header.get_axis(0)).__name__)
np.testing.assert_allclose(dconn.get_fdata(), np.corrcoef(data.T), atol=1e-5)

# %%
# Parcellated series and connectome
# ---------------------------------
# Each parcel's series is the mean of its grayordinates.
parcellation = parcellate_cifti(dtseries, dlabel)
print("parcels:", [str(name) for name in parcellation.parcels.name], parcellation.data.shape)
for p, key in enumerate(parcellation.keys):
    np.testing.assert_allclose(parcellation.data[:, p], data[:, keys == key].mean(1), atol=1e-5)

written = write_parcellated(parcellation, folder, "sub-01_task-rest_seg-Toy", source=dtseries)
for kind, path in written.items():
    print(f"{kind:>12}: {path.name}")

# %%
# The ``.pconn.nii`` holds the parcels' correlation, with the parcels on both
# axes; the planted coupling of the two visual parcels stands out.
pconn = nib.load(written["pconn"])
r = pconn.get_fdata()
np.testing.assert_allclose(r, np.corrcoef(parcellation.data.T), atol=1e-5)
labels = [str(name) for name in pconn.header.get_axis(0).name]
print(f"r(L_visual, R_visual) = {r[0, 3]:.2f}")
assert r[0, 3] > 0.5

fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"wspace": 0.4})
image = axes[0].imshow(dconn.get_fdata(), vmin=-1, vmax=1, cmap="RdBu_r")
axes[0].set_title(f"dense: {len(model)} grayordinates")
axes[0].set_xlabel("grayordinate (left cortex, right cortex, thalamus)")
axes[1].imshow(r, vmin=-1, vmax=1, cmap="RdBu_r")
axes[1].set_xticks(range(len(labels)), labels, rotation=45, ha="right")
axes[1].set_yticks(range(len(labels)), labels)
axes[1].set_title("parcellated")
fig.colorbar(image, ax=axes, label="Pearson r", shrink=0.8)
