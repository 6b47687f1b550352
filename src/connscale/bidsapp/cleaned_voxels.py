"""A run's cleaned, unstandardised voxel (or grayordinate) series, made once per run.

The QC table's final DVARS and the ALFF and ReHo maps all read the run's
denoised series before standardisation (XCP-D's denoised BOLD): the first set
that needs them cleans the decoded series on the device and keeps the tensor
in the run's context (``context['cleaned_voxels']``), so that a run is moved
to the device and cleaned once, not once per set. The run's
:class:`~connscale.engines.batch.TaskBudget` already counts one cleaned copy
of its widest series; the tensor goes with the run's context.
"""

from __future__ import annotations

__all__ = ["unstandardised_series"]


def unstandardised_series(config, decoded, context: dict):
    """Return the run's cleaned, unstandardised (kept volumes, series) tensor on its device.

    Parameters
    ----------
    config : ParticipantConfig
        The run's (device, dtype, memory limit).
    decoded : DecodedRun or CiftiDecoded
        Its decoded series (``data``).
    context : dict
        The run's context: its ``operator``; the tensor is kept there.

    Returns
    -------
    torch.Tensor
    """
    from connscale.denoise import clean_signals

    if "cleaned_voxels" not in context:
        context["cleaned_voxels"] = clean_signals(
            decoded.data,
            context["operator"],
            standardize=None,
            device=config.device,
            dtype=config.dtype,
            return_tensor=True,
            memory_limit=config.memory_limit,
        )
    return context["cleaned_voxels"]
