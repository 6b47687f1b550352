"""``connscale fc``: static functional connectivity of one scan."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import CORRELATION_KINDS
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import StrOptions
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    configure_logging,
    input_files,
    logger,
    output_set,
)
from connscale.cli._inputs import (
    check_input_arguments,
    cifti_output_place,
    is_cifti_series,
    load_input,
    output_place,
)
from connscale.io.bids import dataset_relative

# Region matrices up to this size are written as TSV, larger ones as HDF5.
TSV_MAX_NODES = 1000
#: The argument group of the options of a CIFTI-2 INPUT.
CIFTI = "CIFTI-2 input (.dtseries.nii, .ptseries.nii), as wb_command -cifti-correlation"
# The options that apply to a CIFTI-2 INPUT only: field -> flag.
_CIFTI_ONLY = {
    "fisher_z": "--fisher-z",
    "no_demean": "--no-demean",
    "covariance": "--covariance",
    "weights": "--weights",
    "roi_structures": "--roi-structures",
    "roi_cifti": "--roi-cifti",
}


def _demean(no_demean: bool) -> bool:
    """Return ``demean`` of ``--no-demean``."""
    return not no_demean


@dataclass(frozen=True, kw_only=True)
class FcConfig:
    """The options of ``connscale fc``, each declared once (:mod:`connscale._params`)."""

    input: Path = _fields.input_file(
        "A 4-D fMRI NIfTI (``.nii``/``.nii.gz``), ROI time series\n"
        "(``.tsv``/``.csv``/``.npy``, one column per region) or a CIFTI-2 series\n"
        "(``.dtseries.nii``/``.ptseries.nii``).",
        flag_help="4-D fMRI NIfTI (.nii/.nii.gz), ROI time series (.tsv/.csv/.npy, one column "
        "per region) or CIFTI-2 series (.dtseries.nii/.ptseries.nii: a .dconn.nii/.pconn.nii).",
    )
    mask: Path | None = _fields.mask()
    atlas: Path | None = _fields.atlas()
    atlas_name: str | None = _fields.atlas_name()
    kind: str | None = param(
        None,
        constraints=[StrOptions(set(CORRELATION_KINDS)), None],
        doc="The output's form (:func:`connscale.correlation`'s ``kind``); None:\n"
        f"``'dense'`` for up to {TSV_MAX_NODES} series, ``'triu'`` above, ``'sparse'``\n"
        "with a ``threshold``.",
        flag=Flag(("--kind",), choices=CORRELATION_KINDS,
                  help=f"Output form (default: dense for up to {TSV_MAX_NODES} series, "
                  "triu above)."),
    )  # fmt: skip
    threshold: float | None = _fields.threshold(
        "Keep r >= threshold: a sparse result (``kind='sparse'``).",
        flag_help="Keep r >= THRESHOLD (sparse output; implies --kind sparse).",
    )
    absolute: bool = _fields.absolute()
    fisher_z: bool = param(
        False,
        constraints=["boolean"],
        doc="CIFTI input: write artanh(r), r clamped to +-0.999999 (``-fisher-z``).",
        flag=Flag(("--fisher-z",), group=CIFTI, action="store_true",
                  help="Write artanh(r), r clamped to +-0.999999 (-fisher-z)."),
    )  # fmt: skip
    demean: bool = param(
        True,
        constraints=["boolean"],
        doc="CIFTI input: subtract each series' mean (False: ``-no-demean``).",
        flag=Flag(("--no-demean",), group=CIFTI, action="store_true", default=False,
                  dest="no_demean", convert=_demean,
                  help="Do not subtract the means: the cosine of the series (-no-demean)."),
    )  # fmt: skip
    covariance: bool = param(
        False,
        constraints=["boolean"],
        doc="CIFTI input: covariance (divided by T) instead of correlation (``-covariance``).",
        flag=Flag(("--covariance",), group=CIFTI, action="store_true",
                  help="Covariance (divided by the number of time points) instead of "
                  "correlation (-covariance)."),
    )  # fmt: skip
    weights: Path | None = param(
        None,
        constraints=["path", None],
        doc="CIFTI input: a text file of one non-negative weight per time point;\n"
        "0 drops a frame (``-weights``).",
        flag=Flag(("--weights",), group=CIFTI, type="input_file", metavar="FILE",
                  help="Text file of one non-negative weight per time point; 0 drops a "
                  "frame (-weights)."),
    )  # fmt: skip
    roi_structures: str | None = param(
        None,
        constraints=[str, None],
        doc="CIFTI input: rows of these structures only (comma-separated CIFTI\n"
        "names), against all grayordinates (``-roi-override``).",
        flag=Flag(("--roi-structures",), group=CIFTI, metavar="NAMES",
                  help="Rows of these structures only, against all grayordinates: CIFTI "
                  "names separated by commas, e.g. CORTEX_LEFT,THALAMUS_LEFT (-roi-override)."),
    )  # fmt: skip
    roi_cifti: Path | None = param(
        None,
        constraints=["path", None],
        doc="CIFTI input: rows where the first map of this ``.dscalar.nii`` is > 0\n"
        "(``-roi-override -cifti-roi``).",
        flag=Flag(("--roi-cifti",), group=CIFTI, type="input_file", metavar="ROI",
                  help="Rows where the first map of this .dscalar.nii is > 0 "
                  "(-roi-override -cifti-roi)."),
    )  # fmt: skip
    precision: str = _fields.precision()
    out: Path = _fields.out()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``fc`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`FcConfig`'s fields.
    """
    parser = subparsers.add_parser(
        "fc",
        help="Static functional connectivity (all-pairs Pearson correlation).",
        description=(
            "Pearson correlation of every pair of voxels or regions, out of core when "
            "needed. Writes a BIDS-named relmat (.tsv for small dense region matrices, "
            "chunked .h5 otherwise) with a JSON sidecar, a JSON log and a report."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    groups = {
        None: parser,
        _fields.MASK_OR_ATLAS: parser.add_mutually_exclusive_group(),
        _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION),
        CIFTI: parser.add_argument_group(CIFTI),
    }
    add_arguments(parser, FcConfig, groups, _types)
    parser.set_defaults(func=run)
    return parser


def check_arguments(args) -> None:
    """Check the options that go together, and that INPUT is of a kind read."""
    check_input_arguments(args, cifti=True)
    given = [flag for name, flag in _CIFTI_ONLY.items() if getattr(args, name) not in (None, False)]
    if given and not is_cifti_series(args.input):
        raise ValueError(
            f"{', '.join(given)} apply to CIFTI-2 input (.dtseries.nii, .ptseries.nii) only."
        )
    if args.roi_structures is not None and args.roi_cifti is not None:
        raise ValueError("Give --roi-structures or --roi-cifti, not both.")
    if args.threshold is not None and args.kind not in (None, "sparse"):
        raise ValueError(
            f"--threshold gives a sparse result (--kind sparse); got --kind {args.kind}."
        )


def run(args) -> int:
    """Run ``connscale fc`` from its parsed command line; return the exit status."""
    return run_fc(**keywords_from_args(args, FcConfig))


@entry(FcConfig)
def run_fc(config: FcConfig) -> int:
    """Compute the correlation matrix of INPUT and publish it; return 0.

    The matrix (a ``.tsv`` relmat for small dense region matrices, ``.h5``
    otherwise), its sidecar, figure, log and report are published as one set.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale.fc.static import compute_correlation
    from connscale.io.bids import write_dataset_description
    from connscale.io.fingerprint import run_fingerprint
    from connscale.io.hdf5 import load_relmat
    from connscale.io.relmat import sidecar, write_relmat_tsv, write_sidecar

    configure_logging(config.verbose)
    if is_cifti_series(config.input):
        return _run_cifti(config)
    kind = config.kind or ("sparse" if config.threshold is not None else None)
    folder, stem = output_place(config, suffix="relmat", extension=".tsv")
    fingerprint = run_fingerprint(
        input_files(config),
        {
            "command": "fc",
            "kind": config.kind,
            "threshold": config.threshold,
            "absolute": config.absolute,
            "dtype": config.dtype,
            "precision": config.precision,
        },
    )
    record = RunRecord("fc", config.out, vars(config))
    # The matrix, its sidecar, figure, log and report are one set: written in
    # a hidden staging folder under the set's lock, published together.
    with output_set(config, folder, stem, command="fc", fingerprint=fingerprint) as outputs:
        with record.timer("load"):
            timeseries, labels, nodes, _ = load_input(config)
        n_timepoints, n = timeseries.shape
        if kind is None:
            kind = "dense" if n <= TSV_MAX_NODES else "triu"
        logger.info("Loaded %d %s x %d time points from %s", n, nodes, n_timepoints, config.input)
        as_tsv = kind == "dense" and n <= TSV_MAX_NODES
        path = folder / f"{stem}{'.tsv' if as_tsv else '.h5'}"
        staged = outputs.path(path.name)
        with record.timer("correlation"):
            result, (plan, n_constant, confirmation) = compute_correlation(
                timeseries,
                kind=kind,
                threshold=config.threshold,
                absolute=config.absolute,
                device=config.device,
                dtype=config.dtype,
                memory_limit=config.memory_limit,
                out=None if as_tsv else staged,
                precision=config.precision,
                verbose=config.verbose,
                attrs={"source": str(config.input)},
            )
        if as_tsv:
            with record.timer("write"):
                write_relmat_tsv(staged, result, labels)
        record.add_output(path)
        side = write_sidecar(
            staged,
            sidecar(
                kind,
                n,
                threshold=config.threshold,
                absolute=config.absolute,
                source=dataset_relative(config.input, config.out),
                dtype=config.dtype,
                nodes=nodes,
            ),
        )
        outputs.path(side.name)
        record.add_output(folder / side.name)
        from connscale._compute import resolve_device

        record.device = str(resolve_device(config.device))
        record.results.update(
            {
                "n_series": n,
                "n_timepoints": n_timepoints,
                "nodes": nodes,
                "kind": kind,
                "n_constant_series": n_constant,
                **plan.as_dict(),
                "precision": config.precision,
                "confirmation": None if confirmation is None else confirmation.as_dict(),
            }
        )
        seconds = record.timings["correlation"]
        record.results["pairs_per_second"] = n * (n - 1) / 2 / max(seconds, 1e-9)
        if n <= TSV_MAX_NODES:
            matrix = result if as_tsv else _dense_from_store(load_relmat(staged)[0], kind, n)
            from connscale.report.plots import plot_correlation_matrix

            figure = f"{stem}.png"
            plot_correlation_matrix(
                matrix,
                outputs.path(figure),
                labels=labels,
                title=f"Pearson correlation, {n} {nodes}",
            )
            record.add_figure(folder / figure)
        log = record.finish(stem, outputs)
        outputs.commit()
    write_dataset_description(config.out)
    print(
        f"connscale fc: {n} {nodes}, {n_timepoints} time points, kind={kind}, "
        f"{plan.n_rounds} round(s) on {record.device} in {seconds:.3f} s"
    )
    print(f"  wrote {path}")
    print(f"  log   {log}")
    return 0


def _dense_from_store(stored, kind, n):
    from connscale.fc.triu import vec_to_matrix

    if kind == "triu":
        return vec_to_matrix(stored, n)
    matrix = np.asarray(stored.toarray() if hasattr(stored, "toarray") else stored)
    if kind == "sparse":
        matrix = matrix + matrix.T
        np.fill_diagonal(matrix, 1.0)
    return matrix


def _cifti_stat(config: FcConfig) -> str:
    """Return the ``stat-`` entity of a CIFTI run's output (XCP-D's spelling)."""
    if config.covariance:
        return "covariance"
    return "fisherz" if config.fisher_z else "pearsoncorrelation"


def _run_cifti(config: FcConfig) -> int:
    """Correlate a CIFTI-2 series into a published ``.dconn.nii``/``.pconn.nii`` (or relmat)."""
    from connscale._compute import resolve_device
    from connscale.cifti.correlation import cifti_correlation
    from connscale.io.atomic import write_json_atomic
    from connscale.io.bids import dataset_relative, write_dataset_description
    from connscale.io.fingerprint import run_fingerprint

    kind = config.kind or ("sparse" if config.threshold is not None else "dense")
    dense = config.input.name.lower().endswith(".dtseries.nii")
    suffix = "boldmap" if kind == "dense" else "relmat"
    folder, stem = cifti_output_place(config, stat=_cifti_stat(config), suffix=suffix)
    name = stem + ((".dconn.nii" if dense else ".pconn.nii") if kind == "dense" else ".h5")
    parameters = {
        key: getattr(config, key)
        for key in ("kind", "threshold", "absolute", "dtype", "fisher_z", "demean", "covariance",
                    "roi_structures")
    }  # fmt: skip
    inputs = [p for p in (config.input, config.weights, config.roi_cifti) if p is not None]
    fingerprint = run_fingerprint(inputs, {"command": "fc", **parameters})
    record = RunRecord("fc", config.out, vars(config))
    with output_set(config, folder, stem, command="fc", fingerprint=fingerprint) as outputs:
        with record.timer("correlation"):
            result = cifti_correlation(
                config.input,
                outputs.path(name),
                fisher_z=config.fisher_z,
                demean=config.demean,
                covariance=config.covariance,
                weights=config.weights,
                roi_structures=config.roi_structures,
                roi_cifti=config.roi_cifti,
                kind=kind,
                threshold=config.threshold,
                absolute=config.absolute,
                memory_limit=config.memory_limit,
                device=config.device,
                dtype=config.dtype,
                verbose=config.verbose,
            )
        record.add_output(folder / name)
        source = dataset_relative(config.input, config.out)
        metadata = _cifti_sidecar(config, result, source)
        side = write_json_atomic(outputs.path(f"{stem}.json"), metadata)
        record.add_output(folder / side.name)
        record.device = str(resolve_device(config.device))
        seconds = record.timings["correlation"]
        record.results.update(
            {
                "n_rows": result.n_rows,
                "n_series": result.n_columns,
                "n_timepoints": result.n_timepoints,
                "nodes": result.nodes,
                "kind": kind,
                "n_constant_series": result.n_constant,
                **result.plan.as_dict(),
                "values_per_second": result.n_rows * result.n_columns / max(seconds, 1e-9),
            }
        )
        log = record.finish(stem, outputs)
        outputs.commit()
    if folder != config.out:
        write_dataset_description(config.out)
    print(
        f"connscale fc: {result.n_rows} x {result.n_columns} {result.nodes}, "
        f"{result.n_timepoints} time points, kind={kind}, {result.plan.n_rounds} round(s) "
        f"on {record.device} in {seconds:.3f} s"
    )
    print(f"  wrote {folder / name}")
    print(f"  log   {log}")
    return 0


def _cifti_sidecar(config: FcConfig, result, source) -> dict:
    """Return the JSON sidecar of a CIFTI run's matrix."""
    from connscale import __version__

    measure = "Covariance" if config.covariance else "Pearson correlation"
    if config.fisher_z:
        measure = "Fisher z (artanh) of Pearson correlation"
    workbench = ["wb_command -cifti-correlation", "IN", "OUT"]
    for flag, on in (("-fisher-z", config.fisher_z), ("-no-demean", not config.demean),
                     ("-covariance", config.covariance)):  # fmt: skip
        if on:
            workbench.append(flag)
    if config.weights is not None:
        workbench += ["-weights", str(config.weights)]
    return {
        "Measure": measure,
        "MeasureDescription": f"{measure} of the series of each pair of {result.nodes}"
        + ("" if config.demean else ", means not subtracted"),
        "Weighted": True,
        "Directed": False,
        "ValidDiagonal": True,
        "Demeaned": bool(config.demean),
        "Weights": None if config.weights is None else str(config.weights),
        "RoiStructures": config.roi_structures,
        "RoiCifti": None if config.roi_cifti is None else str(config.roi_cifti),
        "NumberOfRows": int(result.n_rows),
        "NumberOfNodes": int(result.n_columns),
        "DataType": str(config.dtype),
        "WorkbenchEquivalent": " ".join(workbench),
        "Sources": [str(source)],
        "Code": f"connscale {__version__}",
    }
