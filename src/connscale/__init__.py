"""connscale: fast, scalable brain connectivity on CPUs, GPUs and clusters."""

from connscale._version import __version__
from connscale.fc import (
    ConstantSeriesWarning,
    correlation,
    from_nilearn_vec,
    matrix_to_vec,
    n_pairs,
    to_nilearn_vec,
    triu_index,
    triu_pairs,
    vec_to_matrix,
)
from connscale.io import load_relmat, load_timeseries
from connscale.networks import R1DL, match_networks, r1dl, spatial_similarity

__all__ = [
    "ConstantSeriesWarning",
    "R1DL",
    "__version__",
    "correlation",
    "from_nilearn_vec",
    "load_relmat",
    "load_timeseries",
    "match_networks",
    "matrix_to_vec",
    "n_pairs",
    "r1dl",
    "spatial_similarity",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "vec_to_matrix",
]
