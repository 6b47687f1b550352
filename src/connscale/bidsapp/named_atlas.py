"""An atlas named by TemplateFlow, taken in each run's space and resolution.

``--atlas Schaefer2018 --atlas-desc 400Parcels7Networks`` (a name: letters
and digits, and no file of that name) is looked up in TemplateFlow
(:mod:`connscale.io.templateflow`) once before any run (no such atlas or
desc: a one-line error listing what TemplateFlow has), then, for each
space and resolution of the runs, fetched and checked
(:func:`connscale.bidsapp.atlas.check_atlas`) once: its template is the
run's ``space-`` entity, its resolution the run's ``res-`` entity (fMRIPrep's
``res-2`` is TemplateFlow's ``res-02``) or, without one, the template
resolution nearest the BOLD's voxel size. Each run's task then reads that
file (and its ``.tsv`` of region names) as it reads an atlas given as a
file. A run in a space or at a resolution TemplateFlow has not for this
atlas is refused (recorded, naming what TemplateFlow has); the others go on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from connscale.bidsapp.atlas import NATIVE, check_atlas, run_space
from connscale.bidsapp.layout import BoldRun

__all__ = ["check_named_atlas", "is_atlas_name", "run_atlases"]


def is_atlas_name(atlas) -> bool:
    """Return whether ``atlas`` names a TemplateFlow atlas: letters and digits, no such file."""
    text = str(atlas)
    return text.isascii() and text.isalnum() and not Path(text).exists()


def check_named_atlas(config, file_format: str) -> None:
    """Check, before any run, that TemplateFlow has the atlas and that the options go with a name.

    Raises
    ------
    ValueError
        One line: CIFTI runs, ``--atlas-labels`` or ``--atlas-space`` beside
        a name, or TemplateFlow has no such atlas or desc (listing those it has).
    """
    from connscale.io.templateflow import check_atlas_name

    name = config.atlas
    if file_format == "cifti":
        raise ValueError(
            f"--atlas {name}: a TemplateFlow atlas by name parcellates volumes; CIFTI runs "
            "take a .dlabel.nii file."
        )
    given = {"--atlas-labels": config.atlas_labels, "--atlas-space": config.atlas_space}
    for option, value in given.items():
        if value is not None:
            raise ValueError(
                f"{option}: TemplateFlow's atlas {name} is taken in each run's space with its "
                "own region names; drop it."
            )
    check_atlas_name(name, config.atlas_desc)


def _resolution(run: BoldRun) -> tuple[int | None, tuple | None]:
    """Return the run's ``res-`` entity as TemplateFlow's resolution, else its voxel size."""
    res = str(run.entities.get("res", ""))
    if res.isdigit():
        return int(res), None
    import nibabel as nib

    from connscale.bidsapp.decode import reading

    with reading(run.bold):
        zooms = nib.load(run.bold).header.get_zooms()[:3]
    return None, tuple(round(float(z), 3) for z in zooms)


def _resolve(config, space: str, resolution: int | None, zooms) -> dict | str:
    """Return the atlas fields of a space and resolution's runs, or why TemplateFlow has none."""
    from connscale.io.templateflow import get_atlas

    if space == NATIVE:
        return (
            f"no space- entity: TemplateFlow's atlas {config.atlas} is in a template's space "
            "(select the runs of one, --space)"
        )
    try:
        atlas = get_atlas(
            config.atlas, template=space, desc=config.atlas_desc, resolution=resolution, zooms=zooms
        )
    except ValueError as exc:
        return str(exc).rstrip(".")
    check_atlas(atlas.image, space=space, labels_file=atlas.labels)
    return {
        "atlas": str(atlas.image),
        "atlas_labels": None if atlas.labels is None else str(atlas.labels),
        "atlas_space": space,
    }


def run_atlases(config, runs: list[BoldRun]) -> tuple[list[BoldRun], dict[str, dict]]:
    """Take the named atlas in each run's space and resolution.

    Returns
    -------
    runs : list of BoldRun
        The runs, those TemplateFlow has no file for given a problem saying why.
    fields : dict
        ``{run.name: {"atlas", "atlas_labels", "atlas_space"}}``: the
        config fields of each other run's task (the file in
        ``TEMPLATEFLOW_HOME``, its ``.tsv``, the space).

    Raises
    ------
    RuntimeError
        A file not yet in ``TEMPLATEFLOW_HOME`` could not be downloaded.
    ValueError
        A fetched file fails :func:`~connscale.bidsapp.atlas.check_atlas`.
    """
    resolved: dict[tuple, dict | str] = {}
    fields = {}
    kept = []
    for run in runs:
        if not run.problem:
            key = (run_space(run), *_resolution(run))
            if key not in resolved:
                resolved[key] = _resolve(config, *key)
            got = resolved[key]
            if isinstance(got, str):
                run = dataclasses.replace(run, problem=f"{run.bold.name}: {got}")
            else:
                fields[run.name] = got
        kept.append(run)
    return kept, fields
