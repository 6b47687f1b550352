"""``connscale maps``: voxel-wise connectivity maps of one scan."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from types import SimpleNamespace

from connscale import _fields
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval, SequenceOf
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    configure_logging,
    input_files,
    logger,
    output_set,
)
from connscale.cli._inputs import load_input
from connscale.cli._sets import command_fingerprint, publish
from connscale.io.bids import dataset_relative, seg_label

#: The argument group of the maps (at least one is asked for).
MAPS = "maps (at least one)"
#: The mutually exclusive --seed / --seed-mask, in the maps' group.
SEEDS = "seed or seed mask"

_CORRELATION = Interval(Real, -1, 1, closed="both")
_FRACTION = Interval(Real, 0, 1, closed="right")


def _switch(doc: str, flag: str, flag_help: str):
    """Return a map's boolean field: ``flag`` (store_true) in the maps' group."""
    return param(
        False,
        constraints=["boolean"],
        doc=doc,
        flag=Flag((flag,), group=MAPS, action="store_true", help=flag_help),
    )


@dataclass(frozen=True, kw_only=True)
class MapsConfig:
    """The options of ``connscale maps``, each declared once (:mod:`connscale._params`)."""

    input: Path = _fields.input_file(
        "A 4-D fMRI NIfTI (``.nii``/``.nii.gz``): maps are images; or a CIFTI-2\n"
        "dense series (``.dtseries.nii``): maps on its grayordinates, in one\n"
        "``.dscalar.nii``.",
        flag_help="4-D fMRI NIfTI (.nii/.nii.gz), or CIFTI-2 dense time series "
        "(.dtseries.nii): its maps go in one .dscalar.nii.",
    )
    mask: Path | None = _fields.mask()
    atlas: Path | None = _fields.atlas()
    atlas_name: str | None = _fields.atlas_name()
    out: Path = _fields.out()
    degree: tuple[float, ...] | None = param(
        None,
        constraints=[SequenceOf(_CORRELATION), None],
        doc="Degree centrality at these thresholds, in one pass: the number of other\n"
        "series with ``r > R`` (``abs(r)`` with ``absolute``); None: no degree map.",
        flag=Flag(("--degree",), group=MAPS, type=("numbers", "correlation"),
                  metavar="R[,R...]",
                  help="Degree centrality at these thresholds: count r > R (one pass)."),
    )  # fmt: skip
    sparsity: tuple[float, ...] | None = param(
        None,
        constraints=[SequenceOf(_FRACTION), None],
        doc="Degree centrality keeping the top fraction of all edges (``0.01``: 1%),\n"
        "at the exact global threshold; None: no such map.",
        flag=Flag(("--sparsity",), group=MAPS, type=("numbers", "fraction"),
                  metavar="P[,P...]",
                  help="Degree centrality keeping the top fraction P of all edges "
                  "(0.01 = 1%%), at the exact global threshold."),
    )  # fmt: skip
    weighted: bool = _switch(
        "Also write the weighted degree maps (the sum of the kept ``r``; same pass).",
        "--weighted",
        "Also write weighted degree (the sum of the kept r; same pass).",
    )
    absolute: bool = _fields.absolute(
        "Threshold ``abs(r)`` instead of ``r`` (degree and sparsity).",
        flag_help="Threshold |r| instead of r (degree and sparsity).",
        group=MAPS,
    )
    ecm: bool = _switch(
        "Write the eigenvector centrality map (fastECM).",
        "--ecm",
        "Eigenvector centrality (fastECM).",
    )
    gcor: bool = _switch(
        "Write the global correlation map: each series' mean ``r`` to all others.",
        "--gcor",
        "Global correlation: each voxel's mean r to all others.",
    )
    seed: list[tuple[float, float, float]] | None = param(
        None,
        constraints=[list, tuple, None],
        doc_type="list of (x, y, z) or None",
        doc="Seeds at world coordinates in mm: one correlation map each (for a\n"
        "CIFTI-2 INPUT, the nearest voxel of its volume part); None: none.",
        flag=Flag(("--seed",), group=SEEDS, type="coordinate", action="append",
                  metavar="X,Y,Z",
                  help="Seed at world coordinates in mm (repeatable; write "
                  "--seed=-10,20,4 when X is negative). CIFTI-2 INPUT: the nearest "
                  "voxel of its volume part."),
    )  # fmt: skip
    seed_mask: Path | None = param(
        None,
        constraints=["path", None],
        doc="Seed region: a binary mask NIfTI on the fMRI grid (its mean series);\n"
        "None: none. Not with ``seed``.",
        flag=Flag(("--seed-mask",), group=SEEDS, type="input_file",
                  help="Seed region: a binary mask NIfTI on the fMRI grid."),
    )  # fmt: skip
    seed_grayordinate: list[str] | None = param(
        None,
        constraints=[list, tuple, None],
        doc_type="list of str or None",
        doc="Seeds of a CIFTI-2 INPUT: a grayordinate's index (``'1234'``) or a\n"
        "vertex of a surface structure (``'CORTEX_LEFT:1234'``); one correlation\n"
        "map each, after those of ``seed``; None: none.",
        flag=Flag(("--seed-grayordinate",), group=MAPS, action="append",
                  metavar="INDEX|STRUCTURE:VERTEX",
                  help="Seed of a CIFTI-2 INPUT: a grayordinate index, or a vertex of "
                  "a surface structure such as CORTEX_LEFT:1234 (repeatable)."),
    )  # fmt: skip
    seed_radius: float | None = param(
        None,
        constraints=[Interval(Real, 0, None, closed="neither"), None],
        doc="Sphere radius in mm around the ``seed`` coordinates; None: one voxel.",
        flag=Flag(("--seed-radius",), group=MAPS, type="positive",
                  help="Sphere radius in mm around --seed coordinates (default: one voxel)."),
    )  # fmt: skip
    fisher_z: bool = _switch(
        "Write the seed maps as Fisher z, ``arctanh(r)``.",
        "--fisher-z",
        "Seed maps as Fisher z = arctanh(r).",
    )
    precision: str = _fields.precision()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``maps`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`MapsConfig`'s fields.
    """
    parser = subparsers.add_parser(
        "maps",
        help="Voxel-wise maps: degree and eigenvector centrality, global and seed correlation.",
        description=(
            "One value per voxel (or region), computed without storing the correlation "
            "matrix. Writes BIDS-named maps (<source>_stat-<stat>[_desc-<desc>]_boldmap.nii.gz) "
            "with JSON sidecars, a JSON log and a report showing each map over the mean image; "
            "for a CIFTI-2 dense series, one <source>_boldmap.dscalar.nii holding every map "
            "(named stat-<stat>[_desc-<desc>]) and its JSON sidecar."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    maps = parser.add_argument_group(MAPS)
    groups = {
        None: parser,
        _fields.MASK_OR_ATLAS: parser.add_mutually_exclusive_group(),
        MAPS: maps,
        SEEDS: maps.add_mutually_exclusive_group(),
        _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION),
    }
    add_arguments(parser, MapsConfig, groups, _types)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """At least one map, of a NIfTI INPUT or a CIFTI-2 dense series."""
    from connscale.io.nifti import is_nifti

    if not (
        args.degree
        or args.sparsity
        or args.ecm
        or args.gcor
        or args.seed
        or args.seed_mask
        or args.seed_grayordinate
    ):
        raise ValueError(
            "Ask for at least one map: --degree, --sparsity, --ecm, --gcor, --seed, --seed-mask "
            "or --seed-grayordinate."
        )
    if _is_cifti(args.input):
        _check_cifti_arguments(args)
    elif not is_nifti(args.input):
        raise ValueError(
            f"connscale maps needs a 4-D NIfTI INPUT (maps are images); got {args.input.name}."
        )
    elif args.seed_grayordinate:
        raise ValueError(
            "--seed-grayordinate applies to a CIFTI-2 dense series INPUT (.dtseries.nii)."
        )
    if args.seed_radius is not None and not args.seed:
        raise ValueError("--seed-radius applies to --seed coordinates.")


#: The CIFTI-2 file suffixes (a dense series is the one maps are made of).
_CIFTI_SUFFIXES = (
    ".dtseries.nii",
    ".ptseries.nii",
    ".dscalar.nii",
    ".pscalar.nii",
    ".dconn.nii",
    ".pconn.nii",
    ".dlabel.nii",
)


def _is_cifti(path) -> bool:
    """Return whether ``path`` is named as a CIFTI-2 file."""
    return str(path).lower().endswith(_CIFTI_SUFFIXES)


def _check_cifti_arguments(args) -> None:
    """Refuse a CIFTI-2 INPUT other than a dense series, NIfTI-only options, bad seeds."""
    import re

    if not str(args.input).lower().endswith(".dtseries.nii"):
        raise ValueError(
            f"connscale maps reads a CIFTI-2 dense time series (.dtseries.nii); got "
            f"{args.input.name}."
        )
    for option, value in (
        ("--mask", args.mask),
        ("--atlas", args.atlas),
        ("--seed-mask", args.seed_mask),
        ("--seed-radius", args.seed_radius),
    ):
        if value is not None:
            raise ValueError(
                f"{option} applies to a NIfTI INPUT; a CIFTI-2 series has its grayordinates "
                "(seeds: --seed X,Y,Z or --seed-grayordinate INDEX|STRUCTURE:VERTEX)."
            )
    for seed in args.seed_grayordinate or ():
        # As connscale.cifti.maps.GRAYORDINATE (not imported here: it loads torch).
        if not re.match(r"^\s*(?:[A-Za-z_]+\s*:\s*)?\d+\s*$", seed):
            raise ValueError(
                "--seed-grayordinate is INDEX or STRUCTURE:VERTEX (e.g. 1234 or "
                f"CORTEX_LEFT:1234); got {seed!r}."
            )


def run(args) -> int:
    """Run ``connscale maps`` from its parsed command line; return the exit status."""
    return run_maps(**keywords_from_args(args, MapsConfig))


@entry(MapsConfig)
def run_maps(config: MapsConfig) -> int:
    """Compute the maps of INPUT asked for and publish them; return 0.

    The maps, their sidecars, figures and log are published as one set
    (nothing is done when the folder already holds this run's complete maps).

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale.io.relmat import source_entities, write_dataset_description

    configure_logging(config.verbose)
    source = source_entities(config.input)
    seg = seg_label(config.atlas) if config.atlas is not None else None
    prefix = f"{source}{'' if seg is None else f'_seg-{seg}'}_maps"
    inputs = input_files(config) + ([config.seed_mask] if config.seed_mask is not None else [])
    # The maps, sidecars, figures and log are one set: written in a hidden
    # staging folder under the set's lock, published together with a manifest.
    with output_set(
        config, config.out, prefix, command="maps", fingerprint=_fingerprint(config, inputs)
    ) as outputs:
        if outputs.complete():
            print(
                f"connscale maps: {config.out} already holds this run's complete maps (same "
                "input contents and parameters); nothing to do."
            )
            return 0
        record, written, count, log = _compute(config, outputs, prefix, source, seg)
    write_dataset_description(config.out)
    results = record.results
    print(
        f"connscale maps: {results['n_series']} {results['nodes']}, {results['n_timepoints']} "
        f"time points, {count} map(s) on {record.device}"
    )
    for path, _ in written:
        print(f"  wrote {config.out / path.name}")
    print(f"  log   {log}")
    return 0


def _fingerprint(config: MapsConfig, inputs: list) -> dict:
    """Return the run's fingerprint: that of its parsed command line (``command`` included)."""
    return command_fingerprint(SimpleNamespace(command="maps", **vars(config)), inputs)


def _compute(config, outputs, prefix: str, source: str, seg: str | None):
    """Compute the maps asked for into the staging folder of ``outputs`` and publish them.

    They are published with their figures and log; return the run's record,
    the files written (staged path, title), the number of maps and the log's path.
    """
    from connscale._compute import planner_for, resolve_device
    from connscale.maps.prepare import normalize_once

    record = RunRecord("maps", config.out, vars(config))
    # One planner for the run: every map is counted into it while it runs.
    planner = planner_for(
        resolve_device(config.device),
        config.memory_limit,
        hint="Raise --memory-limit, or use fewer series (a coarser mask).",
    )
    _check_input_memory(config, planner)
    with record.timer("load"):
        timeseries, sink = _load(config, outputs, record, source, seg)
    n_timepoints, n = timeseries.shape
    nodes = sink.nodes
    logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, config.input)
    compute = {"device": planner.device, "dtype": config.dtype, "memory_limit": planner}
    # The matrix-free maps share one normalisation, planned beside the series;
    # these are kept only for seed maps.
    seeds = bool(config.seed or config.seed_mask or config.seed_grayordinate)
    if seeds:
        planner.reserve_host(timeseries.nbytes)
    series = None
    if config.degree or config.sparsity or config.ecm or config.gcor:
        with record.timer("normalize"), planner.transient():
            if not seeds:
                planner.reserve_host(timeseries.nbytes)
            series = normalize_once(timeseries, **compute)
    if not seeds:
        del timeseries
    _degree_maps(config, series, planner, record, sink.emit, nodes)
    _centrality_maps(config, series, planner, record, sink.emit, nodes)
    if seeds:
        _seed_maps(config, timeseries, compute, record, sink)
    written = sink.finish()
    record.device = str(planner.device)
    record.results.update(
        {
            "n_series": n,
            "n_timepoints": n_timepoints,
            "nodes": nodes,
            "maps": [str(config.out / p.name) for p, _ in written],
        }
    )
    with record.timer("figures"):
        sink.figures(written)
    log = publish(outputs, record, prefix)
    return record, written, sink.count, log


def _load(config, outputs, record, source: str, seg: str | None):
    """Return INPUT's series (T, N) and the sink of its maps (NIfTI images or one dscalar)."""
    common = {"source": dataset_relative(config.input, config.out), "DataType": config.dtype}
    if _is_cifti(config.input):
        from connscale.io.cifti import read_cifti_series

        dense = read_cifti_series(config.input)
        if type(dense.brain_model).__name__ != "BrainModelAxis":
            raise ValueError(
                f"connscale maps needs a dense series (.dtseries.nii); {config.input.name} "
                "holds parcels."
            )
        sink = _CiftiMaps(config, outputs, record, source, dense.brain_model, common)
        return dense.data, sink
    timeseries, _, nodes, masker = load_input(config)
    common = {"n_nodes": timeseries.shape[1], **common, "Nodes": nodes}
    sink = _NiftiMaps(config, outputs, record, source, seg, masker, nodes, common)
    return timeseries, sink


def _centrality_maps(config, series, planner, record, emit, nodes: str) -> None:
    """Compute the eigenvector centrality and global correlation maps asked for."""
    if config.ecm:
        from connscale.maps import eigenvector_centrality

        with record.timer("ecm"):
            ecm = eigenvector_centrality(series, memory_limit=planner, verbose=config.verbose)
        emit(
            ecm,
            "ecm",
            None,
            "Eigenvector centrality",
            "Leading eigenvector of R + 1 (fastECM, Wink et al. 2012), unit norm",
        )
    if config.gcor:
        from connscale.maps import global_correlation

        with record.timer("gcor"):
            gcor = global_correlation(series, memory_limit=planner)
        emit(gcor, "gcor", None, "Global correlation", f"Mean r to all other {nodes}")


def _seed_maps(config, timeseries, compute: dict, record, sink) -> None:
    """Compute one seed correlation map per seed (or the seed mask's)."""
    from connscale.maps import seed_correlation

    seeds, options, where = sink.seeds(timeseries)
    with record.timer("seed"):
        maps = seed_correlation(timeseries, seeds, fisher_z=config.fisher_z, **options, **compute)
    names = (
        [f"seed{i + 1}" for i in range(len(where))] if config.seed_mask is None else ["seedmask"]
    )
    for i, name in enumerate(names):
        sink.emit(
            maps[i],
            "seedz" if config.fisher_z else "seedcorr",
            name,
            "Seed correlation",
            ("Fisher z of " if config.fisher_z else "") + f"r with {where[i]}",
            FisherZ=config.fisher_z,
        )


class _NiftiMaps:
    """The maps of a NIfTI INPUT: one ``.nii.gz`` and sidecar each, a figure each."""

    def __init__(self, config, outputs, record, source, seg, masker, nodes, common) -> None:
        self.config, self.outputs, self.record = config, outputs, record
        self.source, self.seg, self.masker, self.nodes = source, seg, masker, nodes
        self.common = common
        self.written = []  # (staged path, title)

    @property
    def count(self) -> int:
        """The number of maps written."""
        return len(self.written)

    def emit(self, values, stat, desc, measure, description, **parameters) -> None:
        """Write one map and its sidecar into the set."""
        from connscale.io.maps import map_path, map_sidecar, write_map

        config = self.config
        name = map_path(config.out, self.source, stat, desc=desc, seg=self.seg).name
        img = self.masker.inverse_transform(values)
        sidecar = map_sidecar(measure, description, **parameters, **self.common)
        image_path, sidecar_path = write_map(self.outputs.path(name), img, sidecar)
        self.outputs.path(sidecar_path.name)
        self.record.add_output(config.out / image_path.name)
        self.record.add_output(config.out / sidecar_path.name)
        self.written.append((image_path, f"{measure} {desc or ''}".strip()))

    def seeds(self, timeseries):
        """Return the seeds for ``seed_correlation``, its options and each seed's description."""
        config = self.config
        options = {"img": config.input, "radius": config.seed_radius}
        if config.seed:
            where = [
                f"the sphere at {seed} mm (radius {config.seed_radius} mm)" for seed in config.seed
            ]
            return config.seed, options, where
        return config.seed_mask, options, [f"the mean of {config.seed_mask}"]

    def finish(self) -> list:
        """Return the files written (staged path, title)."""
        return self.written

    def figures(self, written) -> None:
        """Plot each map over the scan's mean image."""
        _figures(self.record, written, self.config, self.outputs)


class _CiftiMaps:
    """The maps of a CIFTI-2 dense series: one ``.dscalar.nii`` (a map a row) and its sidecar."""

    nodes = "grayordinates"

    def __init__(self, config, outputs, record, source, brain_model, common) -> None:
        from connscale.cifti.maps import seed_indices

        self.config, self.outputs, self.record = config, outputs, record
        self.source, self.brain_model = source, brain_model
        self.common = {"n_nodes": len(brain_model), **common, "Nodes": self.nodes}
        self.maps = []  # (name, values, sidecar entry)
        # The seeds are found before anything is computed (a seed outside stops at once).
        self.given = list(config.seed or []) + list(config.seed_grayordinate or [])
        self.columns = seed_indices(brain_model, self.given)

    @property
    def count(self) -> int:
        """The number of maps written."""
        return len(self.maps)

    def emit(self, values, stat, desc, measure, description, **parameters) -> None:
        """Keep one map for the dscalar, named ``stat-<stat>[_desc-<desc>]``."""
        from connscale.io.maps import map_sidecar

        name = f"stat-{stat}" + (f"_desc-{desc}" if desc else "")
        entry = map_sidecar(measure, description, **parameters, **self.common)
        self.maps.append((name, values, {"MapName": name, **entry}))

    def seeds(self, timeseries):
        """Return the seeds' series (T, n_seeds), no options, and each seed's description."""
        import numpy as np

        where = [
            f"grayordinate {column} ({_grayordinate(self.brain_model, column)}; seed {seed})"
            for column, seed in zip(self.columns, self.given)
        ]
        return np.asarray(timeseries[:, self.columns]), {}, where

    def finish(self) -> list:
        """Write the dscalar of every map and its sidecar; return [(its staged path, title)]."""
        import numpy as np

        from connscale.io.atomic import write_json_atomic
        from connscale.io.cifti import write_dscalar

        out = self.config.out
        path = self.outputs.path(f"{self.source}_boldmap.dscalar.nii")
        names = [name for name, _, _ in self.maps]
        data = np.stack([values for _, values, _ in self.maps]).astype(np.float32)
        write_dscalar(path, self.brain_model, names, data)
        sidecar = self.outputs.path(f"{self.source}_boldmap.json")
        write_json_atomic(sidecar, {"Maps": [entry for _, _, entry in self.maps]})
        self.record.add_output(out / path.name)
        self.record.add_output(out / sidecar.name)
        return [(path, f"{len(names)} maps")]

    def figures(self, written) -> None:
        """Draw none: the maps are on grayordinates (a surface viewer shows them)."""


def _grayordinate(brain_model, column: int) -> str:
    """Describe grayordinate ``column``: a vertex of a structure or a voxel."""
    structure = str(brain_model.name[column]).removeprefix("CIFTI_STRUCTURE_")
    if brain_model.surface_mask[column]:
        return f"{structure} vertex {int(brain_model.vertex[column])}"
    return f"{structure} voxel {tuple(int(v) for v in brain_model.voxel[column])}"


def _degree_maps(config, series, planner, record, emit, nodes: str) -> None:
    """Compute the degree maps of --degree and --sparsity, each handed to ``emit``.

    The maps are binary, and weighted with --weighted; their method and
    confirmation go in ``record``.
    """
    from connscale.io.maps import threshold_label
    from connscale.maps.degree import compute_degree

    rule = "|r|" if config.absolute else "r"
    for option, values in (("degree", config.degree), ("sparsity", config.sparsity)):
        if not values:
            continue

        with record.timer(f"{option}"):
            (binary, weighted), info = compute_degree(
                series,
                **({"threshold": values} if option == "degree" else {"sparsity": values}),
                absolute=config.absolute,
                memory_limit=planner,
                verbose=config.verbose,
                precision=config.precision,
                both=True,
            )
        record.results[f"{option}_method"] = info["method"]
        record.results["precision"] = info["precision"]
        record.results[f"{option}_confirmation"] = info["confirmation"]
        for i, value in enumerate(values):
            theta = info["thresholds"][i]
            kept = f"{rule} >= {theta:.6g}" if option == "sparsity" else f"{rule} > {theta:.6g}"
            label = ("abs" if config.absolute else "") + (
                threshold_label(value, "sparsity")
                if option == "sparsity"
                else threshold_label(value)
            )
            params = {
                "Threshold": theta,
                "AbsoluteThreshold": config.absolute,
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
            if config.weighted:
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


def _check_input_memory(config, planner) -> None:
    """Fail before reading INPUT when its series cannot fit --memory-limit.

    A NIfTI INPUT counts its 4-D image, the masked series and nilearn's
    temporaries; a CIFTI-2 one its (T, N) float32 series. The limit is the
    run's ``planner``; the maps' own memory is planned as they run.
    """
    if config.memory_limit is None:
        return
    import numpy as np

    if _is_cifti(config.input):
        from connscale.io.cifti import read_cifti_series

        shape = read_cifti_series(config.input).data.shape
        needed = 4 * int(np.prod(shape))
    else:
        from connscale.io.nifti import load_image

        shape = load_image(config.input, name="fMRI image").shape
        needed = _LOAD_BYTES_PER_VALUE * int(np.prod(shape))
    planner.require(
        needed,
        f"Reading {config.input.name} ({' x '.join(map(str, shape))} values) and its series",
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


def _figures(record, written, config, outputs) -> None:
    """Plot one PNG per map over the scan's mean image, in the set of ``outputs``.

    A failure is a warning.
    """
    import warnings

    from connscale.report.maps import plot_stat_map

    background = _mean_volume(config.input)
    for path, title in written:
        png = outputs.path(path.name[: -len(".nii.gz")] + ".png")
        try:
            plot_stat_map(path, png, bg_img=background, title=title)
            record.add_figure(config.out / png.name)
        except Exception as exc:  # noqa: BLE001 - maps are written; say which figure failed
            outputs.discard(png.name)
            warnings.warn(
                f"The figure of {path.name} could not be drawn ({type(exc).__name__}: {exc}).",
                RuntimeWarning,
                stacklevel=2,
            )
