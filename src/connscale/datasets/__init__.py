"""Bundled real data (offline) and simulators with known ground truth."""

from connscale.datasets.bundled import (
    compute_brain_mask,
    load_nibabel_functional,
    load_nitime_fmri,
    load_nitime_roi,
    nibabel_functional_path,
    nitime_fmri_path,
    nitime_roi_path,
)
from connscale.datasets.cohort import Cohort, simulate_cohort
from connscale.datasets.networks import simulate_networks
from connscale.datasets.phantom import LiFEPhantom, simulate_life_phantom
from connscale.datasets.simulate import simulate_timeseries
from connscale.datasets.states import StateCohort, simulate_states

__all__ = [
    "Cohort",
    "LiFEPhantom",
    "StateCohort",
    "compute_brain_mask",
    "load_nibabel_functional",
    "load_nitime_fmri",
    "load_nitime_roi",
    "nibabel_functional_path",
    "nitime_fmri_path",
    "nitime_roi_path",
    "simulate_cohort",
    "simulate_life_phantom",
    "simulate_networks",
    "simulate_states",
    "simulate_timeseries",
]
