"""Bundled real data and simulators with known structure."""

from connscale.datasets.cohort import Cohort, simulate_cohort

__all__ = ["Cohort", "simulate_cohort"]
