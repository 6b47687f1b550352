"""Bundled real data and simulators with known structure."""

from connscale.datasets.networks import simulate_networks

__all__ = ["simulate_networks"]
