"""Turn a command-line INPUT (NIfTI + mask/atlas, ROI table, CIFTI-2 series) into series."""

from __future__ import annotations

from pathlib import Path

from connscale.io.timeseries import TIMESERIES_SUFFIXES, load_timeseries

#: The CIFTI-2 series that ``connscale fc`` reads (a matrix of grayordinates or parcels).
CIFTI_SERIES_SUFFIXES = (".dtseries.nii", ".ptseries.nii")
_CIFTI_OTHER_SUFFIXES = (".dconn.nii", ".pconn.nii", ".dscalar.nii", ".pscalar.nii", ".dlabel.nii")


def is_cifti_series(path) -> bool:
    """Return whether ``path`` names a CIFTI-2 series (by its name; nothing is read)."""
    return Path(path).name.lower().endswith(CIFTI_SERIES_SUFFIXES)


def check_input_arguments(args, *, cifti: bool = False) -> None:
    """Check that --mask and --atlas go with a NIfTI INPUT, and INPUT is of a kind read.

    The kind is told by its name: nothing is read here. A CIFTI-2 series is
    read by the commands that pass ``cifti=True``.
    """
    from connscale.io.nifti import is_nifti

    name = args.input.name.lower()
    is_cifti = name.endswith(CIFTI_SERIES_SUFFIXES + _CIFTI_OTHER_SUFFIXES)
    if is_cifti and not (cifti and is_cifti_series(name)):
        raise ValueError(_not_an_input(args.input.name, cifti))
    if is_nifti(args.input) and not is_cifti:
        return
    if args.input.suffix.lower() not in TIMESERIES_SUFFIXES and not is_cifti:
        raise ValueError(_not_an_input(args.input.name, cifti))
    if args.mask is not None or args.atlas is not None:
        raise ValueError("--mask and --atlas apply to NIfTI input only.")


def _not_an_input(name: str, cifti: bool) -> str:
    tables = f"a time-series table ({', '.join(TIMESERIES_SUFFIXES)})"
    if cifti:
        return (
            f"INPUT must be a NIfTI (.nii, .nii.gz), {tables} or a CIFTI-2 series "
            f"({', '.join(CIFTI_SERIES_SUFFIXES)}); got {name}."
        )
    return f"INPUT must be a NIfTI (.nii, .nii.gz) or {tables}; got {name}."


def output_entities(input_path, *, atlas=None, atlas_name: str | None = None) -> dict:
    """Return the BIDS entities of the outputs made from ``input_path``.

    These are the source entities of its name (:func:`connscale.io.bids.source_entities`)
    and ``seg`` from ``atlas_name``, else from the ``atlas`` file's name.
    """
    from connscale.io.bids import seg_label, source_entities

    entities = source_entities(input_path)
    if atlas_name is not None:
        entities["seg"] = atlas_name
    elif atlas is not None:
        entities["seg"] = seg_label(atlas)
    return entities


def bids_place(root: Path, entities: dict, *, suffix: str, extension: str) -> tuple[Path, str]:
    """Return the folder and file stem of the BIDS-named output with ``entities``.

    The folder is ``<root>/sub-<s>/[ses-<t>/]func``.
    """
    from connscale.io.bids import bids_name, derivative_path

    folder = derivative_path(root, entities, suffix=suffix, extension=extension).parent
    stem = bids_name(entities, suffix=suffix, extension=extension)[: -len(extension)]
    return folder, stem


def cifti_output_place(args, *, stat: str, suffix: str) -> tuple[Path, str]:
    """Return the folder and file stem of the output made from a CIFTI-2 series.

    XCP-D's BIDS spelling when INPUT has BIDS entities
    (``<source entities>_stat-<stat>_<suffix>``, e.g.
    ``..._space-fsLR_den-91k_stat-pearsoncorrelation_boldmap``), else INPUT's
    own stem in ``--out``.
    """
    from connscale.io.bids import source_entities

    entities = source_entities(args.input)
    name = Path(args.input).name
    if f"sub-{entities['sub']}" not in name:
        return Path(args.out), name[: -len(".dtseries.nii")]
    # .nii.gz: a place-holder extension that the BIDS patterns know, for the stem.
    return bids_place(args.out, {**entities, "stat": stat}, suffix=suffix, extension=".nii.gz")


def output_place(args, *, suffix: str, extension: str) -> tuple[Path, str]:
    """Return the folder and file stem of a command's BIDS-named output from ``args.input``.

    The name holds its entities, ``seg-`` from the atlas, ``meas-PearsonCorrelation``.
    """
    entities = {
        **output_entities(args.input, atlas=args.atlas, atlas_name=args.atlas_name),
        "meas": "PearsonCorrelation",
    }
    return bids_place(args.out, entities, suffix=suffix, extension=extension)


def load_input(args):
    """Series, node labels and a description of what was loaded.

    Returns
    -------
    timeseries : ndarray of shape (n_timepoints, n_series)
    labels : list of str or None
    nodes : {'voxels', 'regions', 'series'}
    masker : nilearn masker or None
    """
    from connscale.io.nifti import is_nifti, load_masked, region_labels

    check_input_arguments(args)
    path = args.input
    if is_nifti(path):
        timeseries, masker = load_masked(path, mask=args.mask, atlas=args.atlas)
        if args.atlas is not None:
            return timeseries, region_labels(masker) or None, "regions", masker
        return timeseries, None, "voxels", masker
    timeseries, labels = load_timeseries(path)
    return timeseries, labels, "series", None
