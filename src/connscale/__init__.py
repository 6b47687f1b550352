"""connscale: fast, scalable brain connectivity on CPUs, GPUs and clusters."""

from connscale._version import __version__

__all__ = ["__version__"]
