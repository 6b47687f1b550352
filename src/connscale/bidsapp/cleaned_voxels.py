"""A run's cleaned, unstandardised voxel (or grayordinate) series, made once per run.

The QC table's final DVARS and the ALFF and ReHo maps all read the run's
denoised series before standardisation (XCP-D's denoised BOLD): the first set
that needs them cleans the decoded series on the device and keeps the tensor
in the run's context (``context['cleaned_voxels']``), so that a run is moved
to the device and cleaned once, not once per set. The run's
:class:`~connscale.engines.batch.TaskBudget` already counts one cleaned copy
of its widest series; the tensor goes with the run's context.

On a GPU without ``memory_limit``, the decoded series themselves are copied to
the device once per run (:func:`device_series`: ~50 ms for a 2 mm MNI run of
400 volumes), for the initial DVARS, this cleaning and the maps' cleaning,
instead of once for each, when they take at most 1/8 of the GPU's memory (the
copy is held through the run's sets).
"""

from __future__ import annotations

__all__ = ["device_series", "unstandardised_series"]


def device_series(config, decoded, context: dict):
    """Return the run's decoded series where its sets compute: on the GPU, copied once.

    On a CUDA device without ``memory_limit``, the first call copies
    ``decoded.data`` to the device and keeps the tensor in ``context``
    (``context['series_on_device']``, with the array it copies); later calls
    return it while ``decoded.data`` is that array (a despiked run's new
    array is copied anew). Elsewhere (the CPU, or a limit that counts each
    copy where it is made) ``decoded.data`` as it is.

    Parameters
    ----------
    config : ParticipantConfig
        The run's (device, memory limit).
    decoded : DecodedRun or CiftiDecoded
        Its decoded series (``data``, time along axis 0).
    context : dict
        The run's context: the tensor is kept there.

    Returns
    -------
    ndarray or torch.Tensor
    """
    data = decoded.data
    device = _held_on(config, data.nbytes)
    if device is None:
        return data
    source, tensor = context.get("series_on_device", (None, None))
    if source is not data:
        import numpy as np
        import torch

        tensor = torch.as_tensor(np.asarray(data), device=device)
        context["series_on_device"] = (data, tensor)
    return tensor


#: The largest share of the GPU's memory a run's series held there may take.
_HELD_SHARE = 1 / 8


def _held_on(config, nbytes: int):
    """Return the GPU a run's series (``nbytes``) are copied to once, or None.

    A GPU, without a memory limit, when they take at most
    :data:`_HELD_SHARE` of its memory.
    """
    import torch

    from connscale._compute import resolve_device

    if config.memory_limit is not None:
        return None
    device = resolve_device(config.device)
    if device.type != "cuda":
        return None
    held = nbytes <= torch.cuda.get_device_properties(device).total_memory * _HELD_SHARE
    return device if held else None


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
            device_series(config, decoded, context),
            context["operator"],
            standardize=None,
            device=config.device,
            dtype=config.dtype,
            return_tensor=True,
            memory_limit=config.memory_limit,
        )
    return context["cleaned_voxels"]
