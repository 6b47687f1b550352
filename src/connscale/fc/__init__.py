"""Functional connectivity: static (Fast-GPU-PCC) correlation and edge-vector
index helpers."""

from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.static import correlation
from connscale.fc.triu import (
    from_nilearn_vec,
    matrix_to_vec,
    n_pairs,
    to_nilearn_vec,
    triu_index,
    triu_pairs,
    vec_to_matrix,
)

__all__ = [
    "ConstantSeriesWarning",
    "correlation",
    "from_nilearn_vec",
    "matrix_to_vec",
    "n_pairs",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "vec_to_matrix",
]
