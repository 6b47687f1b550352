"""A run's output sets (region, voxel, maps, networks, denoised) and whether they are published.

Each set is published as one :class:`connscale.io.publish.OutputSet` whose
manifest records the fingerprint of its inputs and parameters: the batch
runner skips a run whose sets are all published with theirs.
"""

from __future__ import annotations

from pathlib import Path

from connscale._choices import MAP_MEASURES, REGION_MEASURES, VOXEL_MEASURES
from connscale.bidsapp.config import ParticipantConfig
from connscale.bidsapp.layout import BoldRun
from connscale.bidsapp.outputs import set_prefix
from connscale.io.bids import derivative_path

__all__ = [
    "is_published",
    "needs_decode",
    "output_sets",
    "recorded_failures",
    "run_folder",
    "set_measures",
]


def output_sets(config: ParticipantConfig, run: BoldRun) -> dict:
    """Return the run's output sets.

    ``{'region'|'voxel'|'maps'|'networks'|'denoised'|'qc': (folder, prefix, fingerprint)}``
    (``denoised``: the run's denoised BOLD or dtseries, with ``write_denoised``; ``qc``:
    the run's QC table, :mod:`connscale.bidsapp.qc_outputs`). Each input file is
    fingerprinted once, for every set.
    """
    from connscale.io.fingerprint import file_fingerprint, run_fingerprint

    entities = dict(run.entities)
    folder = run_folder(config, run)
    bold_inputs = [
        file_fingerprint(p)
        for p in (run.bold, run.mask, run.confounds, run.confounds_json)
        if p is not None
    ]
    sets = {}
    if any(m in REGION_MEASURES for m in config.measures):
        atlas = [p for p in (config.atlas, config.atlas_labels) if p is not None]
        inputs = bold_inputs + [file_fingerprint(p) for p in atlas]
        sets["region"] = (
            folder,
            set_prefix(entities, {"seg": config.atlas_name, "desc": config.desc}),
            run_fingerprint(inputs, {**config.region_parameters(), "t_r": run.t_r}),
        )
    if any(m in VOXEL_MEASURES for m in config.measures):
        sets["voxel"] = (
            folder,
            set_prefix(entities, {"desc": config.desc}),
            run_fingerprint(bold_inputs, {**config.voxel_parameters(), "t_r": run.t_r}),
        )
    if config.write_denoised:
        cleaning = {k: v for k, v in config.voxel_parameters().items() if k != "measures"}
        sets["denoised"] = (
            folder,
            set_prefix(entities, {"desc": config.desc}),
            run_fingerprint(bold_inputs, {**cleaning, "t_r": run.t_r}),
        )
    maps = [m for m in MAP_MEASURES if m in config.measures]
    if maps:
        from connscale.bidsapp.voxel_measures import map_sets

        sets.update(map_sets(config, run, folder, bold_inputs, maps))
    from connscale.bidsapp.qc_outputs import qc_set

    sets["qc"] = qc_set(config, run, folder, bold_inputs)
    return sets


def run_folder(config: ParticipantConfig, run: BoldRun) -> Path:
    """Return the folder of the run's output sets (``sub-<s>/[ses-<t>/]func``)."""
    entities = dict(run.entities)
    return derivative_path(config.output, entities, suffix="relmat", extension=".tsv").parent


def needs_decode(config: ParticipantConfig, run: BoldRun) -> bool:
    """Return False when every output set of the run is already published (nothing to read).

    Without the run's output folder no set is published, and no input is
    fingerprinted (a new cohort's runs start at once).
    """
    from connscale.io.publish import OutputSet

    if run.problem:
        return False
    if not run_folder(config, run).is_dir():
        return True
    for folder, prefix, fingerprint in output_sets(config, run).values():
        probe = OutputSet(folder, prefix, command="bids participant", fingerprint=fingerprint)
        if not is_published(probe):
            return True
    return False


def recorded_failures(out_dir, prefix: str) -> dict:
    """Return the measures that failed in a published set (its manifest's ``failed_measures``)."""
    from connscale.io.publish import IncompleteOutputError, read_manifest

    try:
        manifest = read_manifest(out_dir, prefix, verify="none")
    except IncompleteOutputError:
        return {}
    return dict(manifest.get("failed_measures") or {})


def is_published(out) -> bool:
    """Return whether the set is published with the same fingerprint and no failed measure.

    A set with failed measures is computed again: the failure may have been
    transient.
    """
    return out.complete() and not recorded_failures(out.out_dir, out.prefix)


def set_measures(config: ParticipantConfig, kind: str) -> list[str]:
    """Return the measures a set of the run holds."""
    if kind == "region":
        return [m for m in config.measures if m in REGION_MEASURES]
    if kind == "voxel":
        return [m for m in config.measures if m in VOXEL_MEASURES]
    return [kind]
