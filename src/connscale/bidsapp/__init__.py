"""A BIDS-App over fMRIPrep derivatives: denoised connectivity per run, then per group.

:func:`find_runs` reads the derivatives with pybids, :func:`run_participant`
denoises each run as nilearn does (:mod:`connscale.denoise`) and writes
BIDS-named connectivity derivatives, one task per run on any engine;
:func:`run_group` reads them back for the group average and classification.
"""

from connscale.bidsapp.layout import BoldRun, find_runs

__all__ = ["BoldRun", "find_runs"]
