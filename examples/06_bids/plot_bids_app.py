"""
The BIDS-App on an fMRIPrep tree
================================

``connscale bids`` reads fMRIPrep's derivatives with pybids (each run's
preprocessed BOLD, brain mask, confounds and repetition time), denoises each
run as nilearn does, and writes BIDS connectivity derivatives; its group
level averages them and classifies participants. Here on a small synthetic
fMRIPrep tree built on nilearn's real confounds file: 6 subjects, whose
patients have a stronger Visual-Motor coupling.
"""

# %%
# An fMRIPrep-shaped tree
# -----------------------
# :func:`connscale.datasets.fmriprep.make_fmriprep_tree` writes, for each
# subject, a BOLD run (30 volumes on an 8 x 8 x 6 grid), its mask, its
# sidecar and nilearn's fMRIPrep confounds, plus a 4-region atlas and
# ``participants.tsv``.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import connscale
from connscale.cli.main import main as connscale_cli
from connscale.datasets.fmriprep import make_fmriprep_tree

root = Path(tempfile.mkdtemp())
tree = make_fmriprep_tree(root / "inputs", n_subjects=6, random_state=0)
for path in sorted((tree.derivatives / "sub-01").rglob("*")):
    print(path.relative_to(tree.derivatives))

# %%
# The participant level
# ---------------------
# The same arguments as on the command line (``connscale bids DERIVATIVES
# OUTPUT participant ...``): the atlas and its labels, no confound
# regression (these 30-volume runs cannot support nilearn's presets: the
# participant level refuses runs left with too few degrees of freedom), and
# the measures: the region series, their correlation matrix and its
# sliding-window DFC. ``--backend serial`` runs one run after the other in
# this process (``local``, the default, starts a pool of processes; ``dask``
# and ``spark`` run on clusters); ``--no-report`` leaves out each run's HTML
# report (its figures take most of the time of these tiny runs).
output = root / "connscale"
status = connscale_cli(
    [
        "bids", str(tree.derivatives), str(output), "participant",
        "--atlas", str(tree.atlas), "--atlas-name", "Slab4",
        "--atlas-labels", str(tree.atlas_labels),
        "--denoise", "none", "--measures", "fc,timeseries,dfc",
        "--window-length", "10", "--step", "5",
        "--backend", "serial", "--device", "auto", "--no-report", "-q",
    ]
)  # fmt: skip
assert status == 0
for path in sorted((output / "sub-01").rglob("*")):
    if path.is_file():
        print(path.relative_to(output))

# %%
# Each run's connectome is a TSV whose header names the regions;
# :func:`connscale.load_relmat` reads it (and the HDF5 stores).
relmats = sorted(output.glob("sub-*/func/*_relmat.tsv"))
r, attrs = connscale.load_relmat(relmats[1])
matrix = pd.DataFrame(r, index=attrs["labels"], columns=attrs["labels"])
print(relmats[1].name)
print(matrix.round(2))

# %%
# The group level
# ---------------
# The group's mean connectome and the classification of the participants'
# ``group`` column from their connectomes, with a report.
status = connscale_cli(
    [
        "bids", str(tree.derivatives), str(output), "group",
        "--participants", str(tree.participants), "--target", "group",
        "--folds", "3", "--repeats", "2", "-q",
    ]
)  # fmt: skip
assert status == 0
for path in sorted((output / "group").iterdir()):
    print(path.name)

# %%
# The planted difference, read from the participants' connectomes.
groups = pd.read_csv(tree.participants, sep="\t", index_col="participant_id")["group"]
visual, motor = attrs["labels"].index("Visual"), attrs["labels"].index("Motor")
coupling = {
    path.name.split("_")[0]: connscale.load_relmat(path)[0][visual, motor] for path in relmats
}
by_group = {g: [r for s, r in coupling.items() if groups[s] == g] for g in ("control", "patient")}
print({g: np.round(values, 2).tolist() for g, values in by_group.items()})
assert min(by_group["patient"]) > max(by_group["control"])

fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
image = axes[0].imshow(matrix, vmin=-1, vmax=1, cmap="RdBu_r")
axes[0].set_xticks(range(4), matrix.columns)
axes[0].set_yticks(range(4), matrix.index)
axes[0].set_title(relmats[1].name.split("_")[0])
fig.colorbar(image, ax=axes[0])
axes[1].boxplot(list(by_group.values()), tick_labels=list(by_group))
axes[1].set_ylabel("Visual-Motor r")
fig.tight_layout()
