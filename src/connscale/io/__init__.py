"""Reading inputs and writing results.

Every file format connscale knows has its writer and its reader here, and
nowhere else. Writes are atomic.

- :mod:`~connscale.io.timeseries`: region/voxel time-series tables;
  :mod:`~connscale.io.nifti`: NIfTI through nilearn's maskers, gzipped NIfTI;
- :mod:`~connscale.io.cifti`: CIFTI-2 grayordinate files through nibabel's axes;
- :mod:`~connscale.io.relmat` (TSV, NPY, names, sidecars) and
  :mod:`~connscale.io.hdf5` (``_relmat.h5``): connectivity matrices;
- :mod:`~connscale.io.dfc`: the ``_dfc.h5`` store of windowed correlations;
- :mod:`~connscale.io.pairs`: ``_pairs.h5``, pair summaries, pair features;
- :mod:`~connscale.io.r1dl`, :mod:`~connscale.io.life`,
  :mod:`~connscale.io.streamlines` (.trk/.tck), :mod:`~connscale.io.maps`,
  :mod:`~connscale.io.states`: the outputs of those capabilities;
- :mod:`~connscale.io.bids`: BIDS derivative names, ``participants.tsv``.
"""

from connscale.io.hdf5 import load_relmat
from connscale.io.relmat import read_relmat_tsv, relmat_path, write_relmat_tsv
from connscale.io.timeseries import load_timeseries, save_timeseries

__all__ = [
    "load_relmat",
    "load_timeseries",
    "read_relmat_tsv",
    "relmat_path",
    "save_timeseries",
    "write_relmat_tsv",
]
