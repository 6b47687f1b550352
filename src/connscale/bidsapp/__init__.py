"""A BIDS-App over fMRIPrep derivatives: denoised connectivity per run, then per group.

:func:`find_runs` reads the derivatives with pybids, :func:`run_participant`
denoises each run as nilearn does (:mod:`connscale.denoise`) and writes
BIDS-named connectivity derivatives, one task per run on any engine;
:func:`run_group` reads them back for the group average and classification.

The names are imported on first use, so that ``connscale bids --help``
builds its parser from :mod:`connscale.bidsapp.config` without torch.
"""

__all__ = ["BoldRun", "find_runs"]


def __getattr__(name: str):
    if name in __all__:
        from connscale.bidsapp import layout

        return getattr(layout, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
