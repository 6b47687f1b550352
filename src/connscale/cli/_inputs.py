"""Turn a command-line INPUT (NIfTI + mask/atlas, or ROI table) into series."""

from __future__ import annotations

from pathlib import Path

from connscale.io.timeseries import TIMESERIES_SUFFIXES, load_timeseries


def check_input_arguments(args) -> None:
    """Check that --mask and --atlas go with a NIfTI INPUT, and INPUT is of a kind read.

    The kind is told by its name: nothing is read here.
    """
    from connscale.io.nifti import is_nifti

    if is_nifti(args.input):
        return
    if args.input.suffix.lower() not in TIMESERIES_SUFFIXES:
        raise ValueError(_NOT_AN_INPUT.format(name=args.input.name))
    if args.mask is not None or args.atlas is not None:
        raise ValueError("--mask and --atlas apply to NIfTI input only.")


_NOT_AN_INPUT = (
    f"INPUT must be a NIfTI (.nii, .nii.gz) or a time-series table "
    f"({', '.join(TIMESERIES_SUFFIXES)}); got {{name}}."
)


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
