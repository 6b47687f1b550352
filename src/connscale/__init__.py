"""connscale: fast, scalable brain connectivity on CPUs, GPUs and clusters.

The public names below are imported on first use (PEP 562), so that
``import connscale`` and the ``connscale`` command start without importing
torch and the scientific stack until a function needs them.
"""

import importlib

from connscale._version import __version__

# Each public name and the module that defines it.
_LAZY = {
    "ConstantSeriesWarning": "connscale.fc",
    "DFCStates": "connscale.states",
    "DynamicConnectivity": "connscale.fc",
    "MemoryLimitError": "connscale._compute.memory",
    "R1DL": "connscale.networks",
    "alff": "connscale.maps",
    "correlation": "connscale.fc",
    "cross_validate": "connscale.classify",
    "degree_centrality": "connscale.maps",
    "dynamic_correlation": "connscale.fc",
    "eigenvector_centrality": "connscale.maps",
    "from_nilearn_vec": "connscale.fc",
    "get_engine": "connscale.engines",
    "global_correlation": "connscale.maps",
    "load_dynamic": "connscale.fc",
    "load_features": "connscale.classify",
    "load_relmat": "connscale.io",
    "load_timeseries": "connscale.io",
    "match_networks": "connscale.networks",
    "matrix_to_vec": "connscale.fc",
    "n_pairs": "connscale.fc",
    "pair_summary": "connscale.fc",
    "pairwise_dfc": "connscale.fc",
    "r1dl": "connscale.networks",
    "reho": "connscale.maps",
    "run_cohort": "connscale.cohort",
    "seed_correlation": "connscale.maps",
    "spatial_similarity": "connscale.networks",
    "to_nilearn_vec": "connscale.fc",
    "triu_index": "connscale.fc",
    "triu_pairs": "connscale.fc",
    "vec_to_matrix": "connscale.fc",
}

__all__ = [
    "ConstantSeriesWarning",
    "DFCStates",
    "DynamicConnectivity",
    "MemoryLimitError",
    "R1DL",
    "__version__",
    "alff",
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
    "reho",
    "run_cohort",
    "seed_correlation",
    "spatial_similarity",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "vec_to_matrix",
]


def __getattr__(name: str):
    if name == "life":  # the LiFE / ReAl-LiFE subpackage
        return importlib.import_module("connscale.life")
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
