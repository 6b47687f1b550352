"""Reading inputs and writing results: time series, NIfTI through nilearn's
maskers, HDF5 stores, BIDS-named relmat files. Writes are atomic."""

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
