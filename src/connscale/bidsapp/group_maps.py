"""Group level: the cohort's mean voxel maps (degree, weighted degree, ECM, GCOR, ALFF, ReHo).

Every run's maps (the participant measures ``maps``,
:mod:`connscale.bidsapp.voxel_measures`, and ``alff``, ``reho``,
:mod:`connscale.bidsapp.local_maps`) are read back with nibabel; all must
lie on one grid (shape and affine). The common mask is the intersection of
the runs' brain masks: the mask each map's sidecar records (``Mask``, a BIDS
URI into the input derivatives named in the output's
``dataset_description.json``), or, where that file cannot be found, the
voxels where the run's maps are non-zero. Each participant's runs are
averaged first, then the participants; with ``<s> = desc-<strategy>`` and
``space-<l>`` when every run shares it::

    group/[space-<l>_]meas-r<θ>_stat-degree_<s>_boldmap.nii.gz / .json   (and weighteddegree)
    group/[space-<l>_]stat-ecm_<s>_boldmap.nii.gz / .json                (and gcor)
    group/[space-<l>_]<s>_mask.nii.gz / .json                           the common mask

They form one :class:`~connscale.io.publish.OutputSet`
(``group/[space-<l>_]stat-maps_<s>_manifest.json``), fingerprinted by the
runs' maps and masks: a re-run resumes, changed maps are averaged again. On
request the participants' maps (values inside the common mask, voxels in C
order) are columns of the group feature table, named
``<entities>@i,j,k`` after the voxel's indices: feature kind ``maps`` (degree,
ECM, GCOR), ``alff`` (ALFF, fALFF) and ``reho``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.io.bids import bids_name, bids_prefix, dataset_relative, parse_bids_name
from connscale.io.publish import OutputSet, read_manifest

__all__ = ["MAP_FEATURES", "GroupMaps", "MapsPlan", "compute_maps", "feature_kind", "plan_maps"]

logger = logging.getLogger("connscale")

_KIND_ENTITIES = ("meas", "stat")
_SOURCE_SKIP = ("path", "seg", "meas", "stat", "desc", "suffix", "extension")
#: The participant set (and group feature kind) of each map's ``stat-`` (others: ``maps``).
_STAT_SETS = {"alff": "alff", "falff": "alff", "reho": "reho"}
#: The group feature kinds made of voxel maps.
MAP_FEATURES = ("maps", "alff", "reho")
_TITLES = {
    "alff": "ALFF",
    "falff": "fALFF",
    "reho": "ReHo",
    "degree": "degree",
    "weighteddegree": "weighted degree",
    "ecm": "eigenvector centrality",
    "gcor": "global correlation",
}


@dataclass
class MapsPlan:
    """What :func:`compute_maps` reads and writes (headers and sidecars read, no voxel)."""

    output: Path
    runs: list[dict]
    kinds: list[tuple]
    files: list[dict]
    masks: list[Path | None]
    shape: tuple
    affine: np.ndarray
    entities: dict
    fingerprint: dict


@dataclass
class GroupMaps:
    """The cohort's mean maps, as published.

    Attributes
    ----------
    kinds : list of tuple
        ``(meas, stat)`` of each map (``meas`` None for ECM and GCOR).
    names : list of str
        The mean maps' file names in ``group/``, one per kind.
    titles : list of str
    mask : ndarray of bool, 3-D
        The common mask.
    affine : ndarray of shape (4, 4)
    subjects : list of str
    values : ndarray of shape (n_subjects, n_kinds * n_voxels) or None
        Each participant's maps inside the mask (mean over its runs), kinds
        one after the other; None unless asked for.
    feature_names : list of str
    background : Path or None
        The image the report draws the maps over: None (nilearn's MNI
        template) for maps in an MNI space, else the first run's fMRIPrep
        reference image (``_boldref.nii.gz`` beside its mask) when found.
    outputs : list of Path
    resumed : bool
    """

    kinds: list
    names: list
    titles: list
    mask: np.ndarray
    affine: np.ndarray
    subjects: list
    values: np.ndarray | None
    feature_names: list
    background: Path | None
    outputs: list
    resumed: bool

    def columns(self, kinds) -> tuple[np.ndarray, list[str]]:
        """Return the feature columns of the feature kinds ``kinds`` and their names.

        Raises
        ------
        ValueError
            A kind with no map common to every run (e.g. ``alff`` without
            every run's ALFF maps).
        """
        n_voxels = int(self.mask.sum())
        chosen = [j for j, kind in enumerate(self.kinds) if feature_kind(kind) in kinds]
        lacking = [k for k in kinds if k not in {feature_kind(self.kinds[j]) for j in chosen}]
        if lacking:
            raise ValueError(
                f"The feature kind(s) {', '.join(lacking)} need every run's maps of that "
                f"measure; run the participant level with --measures {','.join(lacking)}."
            )
        index = np.concatenate([np.arange(j * n_voxels, (j + 1) * n_voxels) for j in chosen])
        return self.values[:, index], [self.feature_names[i] for i in index]


def feature_kind(kind: tuple) -> str:
    """Return the group feature kind of a map ``(meas, stat)``: 'alff', 'reho' or 'maps'."""
    return _STAT_SETS.get(kind[1], "maps")


def _source(run: dict) -> dict:
    return {k: v for k, v in run.items() if k not in _SOURCE_SKIP}


def _run_maps(run: dict) -> dict:
    """``{(meas, stat): path}`` of a run's published maps of its strategy."""
    source, found = _source(run), {}
    for path in sorted(run["path"].parent.glob("*_boldmap.nii.gz")):
        try:
            ents = parse_bids_name(path)
        except ValueError:
            continue
        if ents.get("desc") != run.get("desc") or "seg" in ents or _source(ents) != source:
            continue
        found[tuple(ents.get(k) for k in _KIND_ENTITIES)] = path
    for stat in sorted({feature_kind(kind) for kind in found}):  # refuse half-written sets
        prefix = bids_prefix({**source, "stat": stat, "desc": run.get("desc")})
        read_manifest(run["path"].parent, prefix)
    return found


def _mask_path(output: Path, sidecar: Path) -> Path | None:
    """Return the run's brain mask that the map's sidecar names, when the file is there."""
    uri = json.loads(sidecar.read_text()).get("Mask")
    if not isinstance(uri, str) or not uri.startswith("bids:"):
        return None
    _, link, relative = uri.split(":", 2)
    try:
        links = json.loads((output / "dataset_description.json").read_text())["DatasetLinks"]
        root = output / links[link]  # relative to the output root (or absolute)
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return None
    path = root / relative
    return path if path.is_file() else None


def _label(kind: tuple) -> str:
    return "_".join(f"{k}-{v}" for k, v in zip(_KIND_ENTITIES, kind) if v is not None)


def plan_maps(output, runs: list[dict], *, required: bool | None) -> MapsPlan | None:
    """Decide whether the cohort's mean maps are computed, check the grid, fingerprint.

    Parameters
    ----------
    output : path
        The participant-level output folder.
    runs : list of dict
        :func:`connscale.bidsapp.group.find_participant_outputs`.
    required : bool or None
        True: every run must have its maps (the maps are features); None:
        mean maps when every run has them, none (with a warning when some
        have) otherwise; False: none.

    Returns
    -------
    MapsPlan or None

    Raises
    ------
    ValueError
        Runs without maps when required, no map kind common to every run,
        or maps on different grids (shape or affine).
    """
    import nibabel as nib

    from connscale.io.fingerprint import run_fingerprint

    if required is False:
        return None
    output = Path(output)
    files = [_run_maps(r) for r in runs]
    missing = [r["path"].name.split("_seg-")[0] for r, f in zip(runs, files) if not f]
    if missing:
        listed = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        if required:
            raise ValueError(
                f"Map features need every run's voxel maps; {len(missing)} of {len(runs)} runs "
                f"have none ({listed}). Run the participant level with --measures maps "
                "(alff, reho)."
            )
        if len(missing) < len(runs):
            logger.warning(
                "group: %d of %d runs have no voxel maps (%s); no group maps",
                len(missing),
                len(runs),
                listed,
            )
        return None
    kinds = sorted(
        set.intersection(*(set(f) for f in files)), key=lambda k: (k[0] is None, str(k[0]), k[1])
    )
    if not kinds:
        raise ValueError("No voxel map (same meas- and stat-) is present in every run.")
    dropped = set().union(*(set(f) for f in files)) - set(kinds)
    if dropped:
        logger.warning(
            "group: maps missing from some runs are left out: %s",
            ", ".join(sorted(_label(k) for k in dropped)),
        )
    files = [{k: f[k] for k in kinds} for f in files]
    first = files[0][kinds[0]]
    reference = nib.load(first)
    shape, affine = tuple(reference.shape), np.asarray(reference.affine, dtype=np.float64)
    masks = []
    for f in files:
        for path in f.values():
            img = nib.load(path)
            if tuple(img.shape) != shape or not np.allclose(img.affine, affine, atol=1e-4):
                raise ValueError(
                    f"Group maps need every map on one grid; {path.name} has shape "
                    f"{tuple(img.shape)} and affine {np.round(img.affine, 4).tolist()}, "
                    f"{first.name} has {shape} and {np.round(affine, 4).tolist()}."
                )
        sidecar = f[kinds[0]].with_name(f[kinds[0]].name[: -len(".nii.gz")] + ".json")
        mask = _mask_path(output, sidecar)
        if mask is not None and tuple(nib.load(mask).shape[:3]) != shape:
            raise ValueError(
                f"The mask {mask.name} has shape {tuple(nib.load(mask).shape)}; the maps "
                f"have {shape}."
            )
        masks.append(mask)
    if any(m is None for m in masks):
        logger.warning(
            "group: %d run(s) name no readable mask; their maps' non-zero voxels stand for it",
            sum(m is None for m in masks),
        )
    spaces = {r.get("space") for r in runs}
    entities = {"space": spaces.pop() if len(spaces) == 1 else None, "desc": runs[0].get("desc")}
    inputs = [p for f in files for p in f.values()] + [m for m in masks if m is not None]
    fingerprint = run_fingerprint(inputs, {"maps": [_label(k) for k in kinds]})
    return MapsPlan(output, runs, kinds, files, masks, shape, affine, entities, fingerprint)


def _prefix(entities: dict) -> str:
    return bids_prefix({**entities, "stat": "maps"}, require_subject=False)


def _names(plan: MapsPlan) -> list[str]:
    return [
        bids_name(
            {**plan.entities, **dict(zip(_KIND_ENTITIES, kind))},
            suffix="boldmap",
            extension=".nii.gz",
            require_subject=False,
        )
        for kind in plan.kinds
    ]


def _mask_name(plan: MapsPlan) -> str:
    return bids_name(plan.entities, suffix="mask", extension=".nii.gz", require_subject=False)


def _common_mask(plan: MapsPlan) -> np.ndarray:
    import nibabel as nib

    mask = np.ones(plan.shape, dtype=bool)
    for files, path in zip(plan.files, plan.masks):
        if path is not None:
            mask &= np.asarray(nib.load(path).dataobj) != 0
        else:
            support = np.zeros(plan.shape, dtype=bool)
            for p in files.values():
                support |= np.asarray(nib.load(p).dataobj) != 0
            mask &= support
    if not mask.any():
        raise ValueError("The runs' brain masks have no voxel in common.")
    return mask


def _background(plan: MapsPlan) -> Path | None:
    space = plan.entities.get("space") or ""
    mask = plan.masks[0]
    if space.startswith("MNI") or mask is None or "_desc-" not in mask.name:
        return None
    reference = mask.with_name(mask.name.split("_desc-")[0] + "_boldref.nii.gz")
    return reference if reference.is_file() else None


def _title(kind: tuple) -> str:
    meas, stat = kind
    title = _TITLES.get(stat, stat)
    return title if meas is None else f"{title}, {meas}"


def compute_maps(plan: MapsPlan, *, features: bool, overwrite: bool = False) -> GroupMaps:
    """Compute the cohort's mean maps, published in ``group/`` (or resumed).

    Parameters
    ----------
    plan : MapsPlan
    features : bool
        Keep each participant's maps inside the common mask
        (:attr:`GroupMaps.values`), for the feature table.
    overwrite : bool, default=False
        Replace mean maps published from other maps.

    Returns
    -------
    GroupMaps
    """
    import nibabel as nib

    group = plan.output / "group"
    names = _names(plan)
    by_subject: dict[str, list[int]] = {}
    for i, run in enumerate(plan.runs):
        by_subject.setdefault(run["sub"], []).append(i)
    subjects = sorted(by_subject)
    with OutputSet(
        group,
        _prefix(plan.entities),
        command="bids group",
        fingerprint=plan.fingerprint,
        overwrite=overwrite,
    ) as out:
        resumed = out.complete()
        if resumed and not features:
            mask = np.asarray(nib.load(group / _mask_name(plan)).dataobj) != 0
            values = None
        else:
            mask = _common_mask(plan)
            # Only the features keep every participant's maps; the means need one row each.
            shape = (len(plan.kinds), int(mask.sum()))
            values = np.empty((len(subjects), *shape)) if features else None
            total = np.zeros(shape)
            for s, sub in enumerate(subjects):
                for j, kind in enumerate(plan.kinds):
                    runs = [plan.files[i][kind] for i in by_subject[sub]]
                    row = np.mean(
                        [np.asarray(nib.load(p).dataobj, dtype=np.float64)[mask] for p in runs],
                        axis=0,
                    )
                    total[j] += row
                    if values is not None:
                        values[s, j] = row
            if not resumed:
                _publish(plan, out, names, mask, total / len(subjects), len(subjects))
    feature_names = []
    if features:
        voxels = [",".join(map(str, ijk)) for ijk in np.argwhere(mask)]
        feature_names = [f"{_label(k)}@{v}" for k in plan.kinds for v in voxels]
    stems = [name[: -len(".nii.gz")] for name in [*names, _mask_name(plan)]]
    return GroupMaps(
        kinds=list(plan.kinds),
        names=names,
        titles=[_title(k) for k in plan.kinds],
        mask=mask,
        affine=plan.affine,
        subjects=subjects,
        values=None if values is None else values.reshape(len(subjects), -1),
        feature_names=feature_names,
        background=_background(plan),
        outputs=[group / f"{s}{e}" for s in stems for e in (".nii.gz", ".json")],
        resumed=resumed,
    )


def _publish(plan: MapsPlan, out: OutputSet, names, mask, means, n_subjects: int) -> None:
    import nibabel as nib

    from connscale.io.maps import write_map

    mask_name = _mask_name(plan)
    masks = [
        dataset_relative(m, plan.output)
        if m is not None
        else f"non-zero voxels of {f[plan.kinds[0]].name}"
        for f, m in zip(plan.files, plan.masks)
    ]
    img = nib.Nifti1Image(mask.astype(np.uint8), plan.affine)
    img.header.set_xyzt_units("mm")
    write_map(
        out.path(mask_name),
        img,
        {
            "Type": "Brain",
            "Description": "Intersection of the runs' brain masks: the voxels of the "
            "group maps and of the map features",
            "NumberOfVoxels": int(mask.sum()),
            "RunMasks": masks,
            "SoftwareName": "connscale",
            "SoftwareVersion": __version__,
        },
    )
    out.path(mask_name[: -len(".nii.gz")] + ".json")
    for j, (kind, name) in enumerate(zip(plan.kinds, names)):
        first = plan.files[0][kind]
        meta = json.loads(first.with_name(first.name[: -len(".nii.gz")] + ".json").read_text())
        volume = np.zeros(plan.shape, dtype=np.float32)
        volume[mask] = means[j]
        img = nib.Nifti1Image(volume, plan.affine)
        img.header.set_xyzt_units("mm")
        write_map(
            out.path(name),
            img,
            {
                "Measure": meta.get("Measure"),
                "MeasureDescription": f"Group mean of the participants' maps (each "
                f"participant's runs averaged first) inside the common mask; run maps: "
                f"{meta.get('MeasureDescription')}",
                **{k: meta[k] for k in ("Threshold", "Weighted", "Method") if k in meta},
                "NumberOfParticipants": n_subjects,
                "NumberOfRuns": len(plan.runs),
                "NumberOfVoxels": int(mask.sum()),
                "Mask": mask_name,
                "DenoiseStrategy": plan.entities["desc"],
                "Sources": [str(f[kind].relative_to(plan.output)) for f in plan.files],
                "SoftwareName": "connscale",
                "SoftwareVersion": __version__,
            },
        )
        out.path(name[: -len(".nii.gz")] + ".json")
    out.commit()
