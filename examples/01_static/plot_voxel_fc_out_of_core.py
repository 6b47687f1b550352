"""
Voxel-scale connectivity out of core
====================================

A correlation matrix of N series has N(N-1)/2 values: 20 GB of float32 at
100,000 voxels. connscale computes it in rounds of rows planned from a memory
budget (``memory_limit``) and, with ``out=``, streams each round into a
chunked HDF5 store instead of holding the result. Here, 8,000 simulated
series with planted networks and a 48 MB budget, well below the 128 MB
the edges take.
"""

# %%
# Simulated voxel series
# ----------------------
# :func:`connscale.datasets.simulate_timeseries` plants networks whose
# series correlate by 0.6; half the series belong to none.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import connscale
from connscale.datasets import simulate_timeseries

n_series = 8_000
timeseries, networks = simulate_timeseries(257, n_series, n_blocks=10, random_state=0)
n_edges = connscale.n_pairs(n_series)
print(f"{n_series} series: {n_edges:,} edges, {n_edges * 4 / 1e6:.0f} MB as float32")

# %%
# An in-memory result must fit the budget
# ---------------------------------------
# The planner checks before any work: a result that cannot fit fails at once
# with :class:`connscale.MemoryLimitError`, whose message suggests ``out=``.
try:
    connscale.correlation(timeseries, kind="triu", memory_limit="48MB")
except connscale.MemoryLimitError as error:
    print("MemoryLimitError:", str(error)[:200], "...")

# %%
# Streaming to disk
# -----------------
# With ``out=`` the rounds are written to a ``_relmat.h5`` store as they are
# computed; the store is published atomically when complete.
folder = Path(tempfile.mkdtemp())
path = connscale.correlation(
    timeseries, kind="triu", memory_limit="48MB", out=folder / "sim_relmat.h5"
)
print(path.name, f"{path.stat().st_size / 1e6:.0f} MB on disk")

# %%
# Reading it back without loading it
# ----------------------------------
# ``mmap=True`` gives the open HDF5 dataset: slices are read on demand.
# An edge of pair (i, j) sits at :func:`connscale.triu_index`; the edges of
# row i are one contiguous slice.
edges, attrs = connscale.load_relmat(path, mmap=True)
print(attrs["kind"], attrs["N"], edges.shape)

i = 123
start = connscale.triu_index(i, i + 1, n_series)
row = edges[start : start + n_series - i - 1]  # r(i, j) for j > i
expected = np.corrcoef(timeseries[:, i], timeseries[:, i + 1 :].T)[0, 1:]
np.testing.assert_allclose(row, expected, atol=1e-5)
print(f"row {i} equals numpy's to 1e-5")

# %%
# The planted networks show in a corner of the matrix (the first 600
# series), rebuilt from the store row by row.
m = 600
corner = np.eye(m, dtype=np.float32)
for i in range(m - 1):
    start = connscale.triu_index(i, i + 1, n_series)
    corner[i, i + 1 :] = edges[start : start + m - i - 1]
corner = np.triu(corner) + np.triu(corner, 1).T
edges.file.close()

fig, ax = plt.subplots(figsize=(5, 4.5))
image = ax.imshow(corner, vmin=-1, vmax=1, cmap="RdBu_r")
fig.colorbar(image, label="Pearson r")
ax.set_title(f"series 0-{m - 1} of {n_series:,}, read from the HDF5 store")
