"""``connscale maps``: voxel-wise connectivity maps of one scan."""

from __future__ import annotations

import argparse
from pathlib import Path

from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    add_compute_arguments,
    add_out_argument,
    add_precision_argument,
    add_wait_argument,
    configure_logging,
    input_files,
    logger,
    output_set,
)
from connscale.cli._inputs import add_input_arguments, load_input
from connscale.cli._sets import command_fingerprint, publish
from connscale.io.bids import dataset_relative, seg_label


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``maps`` command to ``subparsers`` and return its parser."""
    parser = subparsers.add_parser(
        "maps",
        help="Voxel-wise maps: degree and eigenvector centrality, global and seed correlation.",
        description=(
            "One value per voxel (or region), computed without storing the correlation "
            "matrix. Writes BIDS-named maps (<source>_stat-<stat>[_desc-<desc>]_boldmap.nii.gz) "
            "with JSON sidecars, a JSON log and a report showing each map over the mean image."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_input_arguments(parser)
    add_out_argument(parser)
    maps = parser.add_argument_group("maps (at least one)")
    maps.add_argument(
        "--degree",
        type=_types.numbers(_types.correlation),
        default=None,
        metavar="R[,R...]",
        help="Degree centrality at these thresholds: count r > R (one pass).",
    )
    maps.add_argument(
        "--sparsity",
        type=_types.numbers(_types.number(0.0, 1.0, open_min=True)),
        default=None,
        metavar="P[,P...]",
        help="Degree centrality keeping the top fraction P of all edges "
        "(0.01 = 1%%), at the exact global threshold.",
    )
    maps.add_argument(
        "--weighted",
        action="store_true",
        help="Also write weighted degree (the sum of the kept r; same pass).",
    )
    maps.add_argument(
        "--absolute", action="store_true", help="Threshold |r| instead of r (degree and sparsity)."
    )
    maps.add_argument("--ecm", action="store_true", help="Eigenvector centrality (fastECM).")
    maps.add_argument(
        "--gcor",
        action="store_true",
        help="Global correlation: each voxel's mean r to all others.",
    )
    seeds = maps.add_mutually_exclusive_group()
    seeds.add_argument(
        "--seed",
        type=_types.coordinate,
        action="append",
        default=None,
        metavar="X,Y,Z",
        help="Seed at world coordinates in mm (repeatable; write "
        "--seed=-10,20,4 when X is negative).",
    )
    seeds.add_argument(
        "--seed-mask",
        type=_types.input_file,
        default=None,
        help="Seed region: a binary mask NIfTI on the fMRI grid.",
    )
    maps.add_argument(
        "--seed-radius",
        type=_types.positive,
        default=None,
        help="Sphere radius in mm around --seed coordinates (default: one voxel).",
    )
    maps.add_argument("--fisher-z", action="store_true", help="Seed maps as Fisher z = arctanh(r).")
    add_precision_argument(parser)
    add_compute_arguments(parser)
    add_wait_argument(parser)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """At least one map, of a NIfTI INPUT."""
    from connscale.io.nifti import is_nifti

    if not (args.degree or args.sparsity or args.ecm or args.gcor or args.seed or args.seed_mask):
        raise ValueError(
            "Ask for at least one map: --degree, --sparsity, --ecm, --gcor, --seed or --seed-mask."
        )
    if not is_nifti(args.input):
        raise ValueError(
            f"connscale maps needs a 4-D NIfTI INPUT (maps are images); got {args.input.name}."
        )
    if args.seed_radius is not None and not args.seed:
        raise ValueError("--seed-radius applies to --seed coordinates.")


def run(args) -> int:
    """Run ``connscale maps``; return the exit status.

    Compute the maps asked for and publish them with their sidecars, figures
    and log as one set (nothing is done when the folder already holds this
    run's complete maps).
    """
    from connscale.io.relmat import source_entities, write_dataset_description

    configure_logging(args.verbose)
    source = source_entities(args.input)
    seg = seg_label(args.atlas) if args.atlas is not None else None
    prefix = f"{source}{'' if seg is None else f'_seg-{seg}'}_maps"
    inputs = input_files(args) + ([args.seed_mask] if args.seed_mask is not None else [])
    # The maps, sidecars, figures and log are one set: written in a hidden
    # staging folder under the set's lock, published together with a manifest.
    with output_set(
        args, args.out, prefix, command="maps", fingerprint=command_fingerprint(args, inputs)
    ) as outputs:
        if outputs.complete():
            print(
                f"connscale maps: {args.out} already holds this run's complete maps (same "
                "input contents and parameters); nothing to do."
            )
            return 0
        record, written, log = _compute(args, outputs, prefix, source, seg)
    write_dataset_description(args.out)
    results = record.results
    print(
        f"connscale maps: {results['n_series']} {results['nodes']}, {results['n_timepoints']} "
        f"time points, {len(written)} map(s) on {record.device}"
    )
    for path, _ in written:
        print(f"  wrote {args.out / path.name}")
    print(f"  log   {log}")
    return 0


def _compute(args, outputs, prefix: str, source: str, seg: str | None):
    """Compute the maps asked for into the staging folder of ``outputs`` and publish them.

    They are published with their figures and log; return the run's record,
    the maps written (staged path, title) and the log's path.
    """
    from connscale._compute import planner_for, resolve_device
    from connscale.maps.prepare import normalize_once

    record = RunRecord("maps", args.out, vars(args))
    # One planner for the run: every map is counted into it while it runs.
    planner = planner_for(
        resolve_device(args.device),
        args.memory_limit,
        hint="Raise --memory-limit, or use fewer series (a coarser mask).",
    )
    _check_input_memory(args, planner)
    with record.timer("load"):
        timeseries, _, nodes, masker = load_input(args)
    n_timepoints, n = timeseries.shape
    logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, args.input)
    compute = {"device": planner.device, "dtype": args.dtype, "memory_limit": planner}
    # The matrix-free maps share one normalisation, planned beside the series;
    # these are kept only for seed maps.
    seeds = bool(args.seed or args.seed_mask)
    if seeds:
        planner.reserve_host(timeseries.nbytes)
    series = None
    if args.degree or args.sparsity or args.ecm or args.gcor:
        with record.timer("normalize"), planner.transient():
            if not seeds:
                planner.reserve_host(timeseries.nbytes)
            series = normalize_once(timeseries, **compute)
    if not seeds:
        del timeseries
    written = []  # (staged path, title)
    common = {
        "n_nodes": n,
        "source": dataset_relative(args.input, args.out),
        "DataType": args.dtype,
        "Nodes": nodes,
    }

    def emit(values, stat, desc, measure, description, **parameters):
        from connscale.io.maps import map_path, map_sidecar, write_map

        name = map_path(args.out, source, stat, desc=desc, seg=seg).name
        img = masker.inverse_transform(values)
        image_path, sidecar_path = write_map(
            outputs.path(name), img, map_sidecar(measure, description, **parameters, **common)
        )
        outputs.path(sidecar_path.name)
        record.add_output(args.out / image_path.name)
        record.add_output(args.out / sidecar_path.name)
        written.append((image_path, f"{measure} {desc or ''}".strip()))

    _degree_maps(args, series, planner, record, emit, nodes)
    if args.ecm:
        from connscale.maps import eigenvector_centrality

        with record.timer("ecm"):
            ecm = eigenvector_centrality(series, memory_limit=planner, verbose=args.verbose)
        emit(
            ecm,
            "ecm",
            None,
            "Eigenvector centrality",
            "Leading eigenvector of R + 1 (fastECM, Wink et al. 2012), unit norm",
        )
    if args.gcor:
        from connscale.maps import global_correlation

        with record.timer("gcor"):
            gcor = global_correlation(series, memory_limit=planner)
        emit(gcor, "gcor", None, "Global correlation", f"Mean r to all other {nodes}")
    if args.seed or args.seed_mask:
        from connscale.maps import seed_correlation

        seeds = args.seed if args.seed else args.seed_mask
        with record.timer("seed"):
            maps = seed_correlation(
                timeseries,
                seeds,
                img=args.input,
                radius=args.seed_radius,
                fisher_z=args.fisher_z,
                **compute,
            )
        names = [f"seed{i + 1}" for i in range(len(args.seed))] if args.seed else ["seedmask"]
        for i, name in enumerate(names):
            where = (
                f"the sphere at {args.seed[i]} mm (radius {args.seed_radius} mm)"
                if args.seed
                else f"the mean of {args.seed_mask}"
            )
            emit(
                maps[i],
                "seedz" if args.fisher_z else "seedcorr",
                name,
                "Seed correlation",
                ("Fisher z of " if args.fisher_z else "") + f"r with {where}",
                FisherZ=args.fisher_z,
            )
    record.device = str(planner.device)
    record.results.update(
        {
            "n_series": n,
            "n_timepoints": n_timepoints,
            "nodes": nodes,
            "maps": [str(args.out / p.name) for p, _ in written],
        }
    )
    with record.timer("figures"):
        _figures(record, written, args, outputs)
    log = publish(outputs, record, prefix)
    return record, written, log


def _degree_maps(args, series, planner, record, emit, nodes: str) -> None:
    """Compute the degree maps of --degree and --sparsity, each handed to ``emit``.

    The maps are binary, and weighted with --weighted; their method and
    confirmation go in ``record``.
    """
    from connscale.io.maps import threshold_label
    from connscale.maps.degree import compute_degree

    rule = "|r|" if args.absolute else "r"
    for option, values in (("degree", args.degree), ("sparsity", args.sparsity)):
        if not values:
            continue

        with record.timer(f"{option}"):
            (binary, weighted), info = compute_degree(
                series,
                **({"threshold": values} if option == "degree" else {"sparsity": values}),
                absolute=args.absolute,
                memory_limit=planner,
                verbose=args.verbose,
                precision=args.precision,
                both=True,
            )
        record.results[f"{option}_method"] = info["method"]
        record.results["precision"] = info["precision"]
        record.results[f"{option}_confirmation"] = info["confirmation"]
        for i, value in enumerate(values):
            theta = info["thresholds"][i]
            kept = f"{rule} >= {theta:.6g}" if option == "sparsity" else f"{rule} > {theta:.6g}"
            label = ("abs" if args.absolute else "") + (
                threshold_label(value, "sparsity")
                if option == "sparsity"
                else threshold_label(value)
            )
            params = {
                "Threshold": theta,
                "AbsoluteThreshold": args.absolute,
                "Sparsity": value if option == "sparsity" else None,
            }
            emit(
                binary[i],
                "degree",
                label,
                "Degree centrality",
                f"Number of other {nodes} with {kept}",
                Weighted=False,
                **params,
            )
            if args.weighted:
                emit(
                    weighted[i],
                    "weighteddegree",
                    label,
                    "Weighted degree centrality",
                    f"Sum of {rule} over the other {nodes} with {kept}",
                    Weighted=True,
                    **params,
                )


#: Bytes per value of the 4-D image that reading it takes: the image, the
#: masked series and nilearn's temporaries (measured: about 3 float32 copies).
_LOAD_BYTES_PER_VALUE = 12


def _check_input_memory(args, planner) -> None:
    """Fail before reading INPUT when its 4-D image and series cannot fit --memory-limit.

    The limit is the run's ``planner``; the maps' own memory is planned as
    they run.
    """
    if args.memory_limit is None:
        return
    import numpy as np

    from connscale.io.nifti import load_image

    shape = load_image(args.input, name="fMRI image").shape
    planner.require(
        _LOAD_BYTES_PER_VALUE * int(np.prod(shape)),
        f"Reading {args.input.name} ({' x '.join(map(str, shape))} values) and its series",
        on="host",
        hint="Raise --memory-limit, or crop the image or cut its volumes first.",
    )


def _mean_volume(path: Path):
    """Return the mean of a 4-D image over time, read one volume at a time."""
    import nibabel as nib
    import numpy as np

    img = nib.load(path, keep_file_open=True)
    total = np.zeros(img.shape[:3])
    for t in range(img.shape[3]):
        total += np.asarray(img.dataobj[..., t], dtype=np.float64)
    return nib.Nifti1Image(total / img.shape[3], img.affine)


def _figures(record, written, args, outputs) -> None:
    """Plot one PNG per map over the scan's mean image, in the set of ``outputs``.

    A failure is a warning.
    """
    import warnings

    from connscale.report.maps import plot_stat_map

    background = _mean_volume(args.input)
    for path, title in written:
        png = outputs.path(path.name[: -len(".nii.gz")] + ".png")
        try:
            plot_stat_map(path, png, bg_img=background, title=title)
            record.add_figure(args.out / png.name)
        except Exception as exc:  # noqa: BLE001 - maps are written; say which figure failed
            outputs.discard(png.name)
            warnings.warn(
                f"The figure of {path.name} could not be drawn ({type(exc).__name__}: {exc}).",
                RuntimeWarning,
                stacklevel=2,
            )
