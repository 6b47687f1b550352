"""connscale: fast, scalable brain connectivity on CPUs, GPUs and clusters."""

from connscale import life  # noqa: E402  (LiFE / ReAl-LiFE subpackage)
from connscale._compute.memory import MemoryLimitError
from connscale._version import __version__
from connscale.classify import cross_validate, load_features
from connscale.cohort import run_cohort
from connscale.engines import get_engine
from connscale.fc import (
    ConstantSeriesWarning,
    DynamicConnectivity,
    correlation,
    dynamic_correlation,
    from_nilearn_vec,
    load_dynamic,
    matrix_to_vec,
    n_pairs,
    pair_summary,
    pairwise_dfc,
    to_nilearn_vec,
    triu_index,
    triu_pairs,
    vec_to_matrix,
)
from connscale.io import load_relmat, load_timeseries
from connscale.maps import (
    degree_centrality,
    eigenvector_centrality,
    global_correlation,
    seed_correlation,
)
from connscale.networks import R1DL, match_networks, r1dl, spatial_similarity
from connscale.states import DFCStates

__all__ = [
    "ConstantSeriesWarning",
    "DFCStates",
    "DynamicConnectivity",
    "MemoryLimitError",
    "R1DL",
    "__version__",
    "correlation",
    "cross_validate",
    "degree_centrality",
    "dynamic_correlation",
    "eigenvector_centrality",
    "from_nilearn_vec",
    "get_engine",
    "global_correlation",
    "life",
    "load_dynamic",
    "load_features",
    "load_relmat",
    "load_timeseries",
    "match_networks",
    "matrix_to_vec",
    "n_pairs",
    "pair_summary",
    "pairwise_dfc",
    "r1dl",
    "run_cohort",
    "seed_correlation",
    "spatial_similarity",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "vec_to_matrix",
]
