"""connscale: fast, scalable brain connectivity on CPUs, GPUs and clusters."""

from connscale._version import __version__
from connscale.networks import R1DL, match_networks, r1dl, spatial_similarity

__all__ = ["R1DL", "__version__", "match_networks", "r1dl", "spatial_similarity"]
