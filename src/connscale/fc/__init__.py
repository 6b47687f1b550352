"""Functional connectivity: static and dynamic correlation, edge-vector indices.

Static correlation (Fast-GPU-PCC), dynamic correlation (GPU-DFC) and the
edge-vector index helpers.
"""

from connscale.fc.dynamic import dynamic_correlation
from connscale.fc.dynamic_result import DynamicConnectivity, load_dynamic
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.pairs import PairSummary, PairwiseDFC, pair_summary, pairwise_dfc
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
    "DynamicConnectivity",
    "PairSummary",
    "PairwiseDFC",
    "correlation",
    "dynamic_correlation",
    "from_nilearn_vec",
    "load_dynamic",
    "matrix_to_vec",
    "n_pairs",
    "pair_summary",
    "pairwise_dfc",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "vec_to_matrix",
]
