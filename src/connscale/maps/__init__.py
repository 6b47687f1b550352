"""Voxel-wise connectivity maps computed without storing the correlation matrix.

Degree and eigenvector centrality, global and seed correlation; ALFF and fALFF;
regional homogeneity (ReHo).
"""

from connscale.maps.alff import alff
from connscale.maps.correlation_maps import global_correlation, seed_correlation
from connscale.maps.degree import degree_centrality
from connscale.maps.ecm import eigenvector_centrality
from connscale.maps.neighbours import grayordinate_neighbours, voxel_neighbours
from connscale.maps.reho import reho, reho_series

__all__ = [
    "alff",
    "degree_centrality",
    "eigenvector_centrality",
    "global_correlation",
    "grayordinate_neighbours",
    "reho",
    "reho_series",
    "seed_correlation",
    "voxel_neighbours",
]
