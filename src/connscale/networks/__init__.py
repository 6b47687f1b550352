"""Functional networks: rank-1 dictionary learning and spatial similarity of network maps.

Rank-1 dictionary learning runs as r1DL (one machine) or D-r1DL (distributed).
"""

from connscale.networks._r1dl import R1DL, R1DLResult, r1dl, resolve_sparsity
from connscale.networks.similarity import match_networks, spatial_similarity

__all__ = ["R1DL", "R1DLResult", "match_networks", "r1dl", "resolve_sparsity", "spatial_similarity"]
