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
    configure_logging,
    logger,
)
from connscale.cli._inputs import add_input_arguments, load_input


def add_parser(subparsers) -> argparse.ArgumentParser:
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
    from connscale.io.relmat import source_entities, write_dataset_description

    configure_logging(args.verbose)
    record = RunRecord("maps", args.out, vars(args))
    with record.timer("load"):
        timeseries, _, nodes, masker = load_input(args)
    n_timepoints, n = timeseries.shape
    logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, args.input)
    source = source_entities(args.input)
    seg = Path(str(args.atlas.name).split(".")[0]).name if args.atlas is not None else None
    compute = {"device": args.device, "dtype": args.dtype}
    written = []  # (path, title, map values)
    common = {"n_nodes": n, "source": args.input, "DataType": args.dtype, "Nodes": nodes}

    def emit(values, stat, desc, measure, description, **parameters):
        from connscale.io.maps import map_path, map_sidecar, write_map

        path = map_path(args.out, source, stat, desc=desc, seg=seg)
        img = masker.inverse_transform(values)
        image_path, sidecar_path = write_map(
            path, img, map_sidecar(measure, description, **parameters, **common)
        )
        record.add_output(image_path)
        record.add_output(sidecar_path)
        written.append((image_path, f"{measure} {desc or ''}".strip()))

    rule = "|r|" if args.absolute else "r"
    for option, values in (("degree", args.degree), ("sparsity", args.sparsity)):
        if not values:
            continue
        from connscale.io.maps import threshold_label
        from connscale.maps.degree import compute_degree

        with record.timer(f"{option}"):
            (binary, weighted), info = compute_degree(
                timeseries,
                **({"threshold": values} if option == "degree" else {"sparsity": values}),
                absolute=args.absolute,
                memory_limit=args.memory_limit,
                verbose=args.verbose,
                precision=args.precision,
                both=True,
                **compute,
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
    if args.ecm:
        from connscale.maps import eigenvector_centrality

        with record.timer("ecm"):
            ecm = eigenvector_centrality(timeseries, verbose=args.verbose, **compute)
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
            gcor = global_correlation(timeseries, **compute)
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
    write_dataset_description(args.out)
    from connscale._compute import resolve_device

    record.device = str(resolve_device(args.device))
    record.results.update(
        {
            "n_series": n,
            "n_timepoints": n_timepoints,
            "nodes": nodes,
            "maps": [str(p) for p, _ in written],
        }
    )
    with record.timer("figures"):
        _figures(record, written, args)
    log = record.finish(f"{source}_maps")
    print(
        f"connscale maps: {n} {nodes}, {n_timepoints} time points, {len(written)} map(s) "
        f"on {record.device}"
    )
    for path, _ in written:
        print(f"  wrote {path}")
    print(f"  log   {log}")
    return 0


def _figures(record, written, args) -> None:
    """One PNG per map over the scan's mean image (a failure is a warning)."""
    import warnings

    from nilearn.image import mean_img

    from connscale.report.maps import plot_stat_map

    try:
        background = mean_img(str(args.input), copy_header=True)
    except TypeError:  # nilearn before copy_header
        background = mean_img(str(args.input))
    for path, title in written:
        png = path.with_name(path.name[: -len(".nii.gz")] + ".png")
        try:
            record.add_figure(plot_stat_map(path, png, bg_img=background, title=title))
        except Exception as exc:  # noqa: BLE001 - maps are written; say which figure failed
            warnings.warn(
                f"The figure of {path.name} could not be drawn ({type(exc).__name__}: {exc}).",
                RuntimeWarning,
                stacklevel=2,
            )
