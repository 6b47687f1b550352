"""connscale: fast, scalable brain connectivity on CPUs, GPUs and clusters."""

from connscale._version import __version__
from connscale.fc import (
    ConstantSeriesWarning,
    correlation,
    from_nilearn_vec,
    matrix_to_vec,
    n_pairs,
    pair_summary,
    pairwise_dfc,
    to_nilearn_vec,
    triu_index,
    triu_pairs,
    vec_to_matrix,
)
from connscale.cohort import run_cohort
from connscale.engines import get_engine
from connscale.io import load_relmat, load_timeseries

__all__ = [
    "ConstantSeriesWarning",
    "__version__",
    "correlation",
    "from_nilearn_vec",
    "get_engine",
    "load_relmat",
    "load_timeseries",
    "matrix_to_vec",
    "n_pairs",
    "pair_summary",
    "pairwise_dfc",
    "run_cohort",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "vec_to_matrix",
]
