"""
Reading connscale's outputs with pybids
=======================================

connscale names its derivatives with BIDS entities, including two that
pybids' own configurations do not know: ``meas-`` (the measure, e.g.
``PearsonCorrelation``) and ``stat-`` (the statistic, e.g. ``degree``).
Its configuration, ``connscale/io/bids_config.json``
(:data:`connscale.io.bids.CONFIG_PATH`), declares them with the path
patterns of every file it writes, so that ``BIDSLayout`` queries the outputs
by any entity, and the sidecars come back as metadata.
"""

# %%
# Outputs to read
# ---------------
# The participant level of ``connscale bids`` on a small synthetic fMRIPrep
# tree (see the previous example), with the atlas series, their connectome
# and the voxel maps of each run.
import tempfile
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from bids import BIDSLayout
from nilearn import plotting

import connscale
from connscale.cli.main import main as connscale_cli
from connscale.datasets.fmriprep import make_fmriprep_tree
from connscale.io.bids import CONFIG_PATH

root = Path(tempfile.mkdtemp())
tree = make_fmriprep_tree(root / "inputs", n_subjects=2, random_state=0)
output = root / "connscale"
status = connscale_cli(
    [
        "bids", str(tree.derivatives), str(output), "participant",
        "--atlas", str(tree.atlas), "--atlas-name", "Slab4",
        "--atlas-labels", str(tree.atlas_labels),
        "--denoise", "none", "--measures", "fc,timeseries,maps",
        "--backend", "serial", "--no-report", "-q",
    ]
)  # fmt: skip
assert status == 0

# %%
# The outputs alone, with connscale's configuration
# -------------------------------------------------
layout = BIDSLayout(output, validate=False, config=[str(CONFIG_PATH)])
print("entities:", sorted(layout.get_entities(metadata=False)))
relmats = layout.get(suffix="relmat", meas="PearsonCorrelation", extension=".tsv")
for f in relmats:
    print(f.filename)
    print("   ", {k: v for k, v in f.get_entities().items() if k != "extension"})

# %%
# A sidecar's keys come back as the file's metadata.
metadata = relmats[0].get_metadata()
print({k: metadata[k] for k in list(metadata)[:6]})

# %%
# The maps by statistic: ``stat`` is an entity like any other.
degree = layout.get(subject="01", stat="degree", suffix="boldmap", extension=".nii.gz")
print([f.filename for f in degree])
assert len(degree) == 1
plotting.plot_stat_map(
    degree[0].path, display_mode="z", cut_coords=3, title="sub-01 degree", cmap="inferno"
)

# %%
# With the fMRIPrep inputs
# ------------------------
# ``BIDSLayout(fmriprep, derivatives=[output])`` indexes both; the sidecars'
# paths are relative to the output root and ``dataset_description.json``
# links the source dataset.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the synthetic tree is not a raw dataset
    both = BIDSLayout(tree.derivatives, validate=False, derivatives=[output])
[derivatives] = both.derivatives.values()
series = derivatives.get(subject="01", suffix="timeseries", extension=".tsv")
print(series[0].filename)
data = series[0].get_df()
print(data.head(3).round(2))

# %%
# The connectome in the file equals the correlation of the series beside it.
r, attrs = connscale.load_relmat(relmats[0].path)
np.testing.assert_allclose(r, connscale.correlation(data.to_numpy()), atol=1e-4)
fig, ax = plt.subplots(figsize=(4, 3.5))
ax.imshow(r, vmin=-1, vmax=1, cmap="RdBu_r")
ax.set_xticks(range(len(r)), attrs["labels"], rotation=45)
ax.set_yticks(range(len(r)), attrs["labels"])
ax.set_title("sub-01, read back")
fig.tight_layout()
