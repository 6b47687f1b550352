"""``connscale life``: LiFE / ReAl-LiFE streamline weights of a tractogram.

The outputs of a run (weights, pruned tractogram, RMSE map, connectome, λ
sweep table, figures, log) are published together with a manifest
``<source>_life_manifest.json`` (:class:`connscale.io.publish.OutputSet`):
written in the hidden ``.<source>_life.staging/`` folder under a lock on the
output (a second run fails naming the first's pid, or waits with
``--wait``), then moved into ``--out``. The solver's state is checkpointed
there every ``--checkpoint-every`` iterations, so a killed run resumes; a
re-run over a published set of the same input contents and parameters does
nothing, and a changed input is computed again.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from connscale._fields import SEED_HELP
from connscale.cli import _types
from connscale.cli._common import (
    DeprecatedAlias,
    RunRecord,
    add_compute_arguments,
    add_out_argument,
    add_wait_argument,
    compute_options,
    configure_logging,
    logger,
    output_set,
)
from connscale.cli._sets import command_fingerprint, publish
from connscale.io.bids import dataset_relative


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``life`` command to ``subparsers`` and return its parser."""
    parser = subparsers.add_parser(
        "life",
        help="Streamline weights that explain the diffusion signal (LiFE, ReAl-LiFE).",
        description=(
            "Fit LiFE (or ReAl-LiFE with --lambda > 0) to a dMRI scan and a tractogram: "
            "ENCODE model, SBB-NNLS on the CPU or a CUDA GPU. Writes the weights "
            "(.npy/.tsv), the pruned tractogram, the voxel RMSE map, a region x region "
            "connectome when --labels is given, figures and a JSON log."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("dwi", type=_types.input_file, metavar="DWI", help="4-D diffusion NIfTI.")
    parser.add_argument("--bvals", type=_types.input_file, required=True, help="FSL b-values file.")
    parser.add_argument(
        "--bvecs", type=_types.input_file, required=True, help="FSL b-vectors file."
    )
    parser.add_argument(
        "--tractogram",
        type=_types.input_file,
        required=True,
        help=".trk or .tck in the dMRI's space.",
    )
    parser.add_argument(
        "--mask", type=_types.input_file, default=None, help="Brain / white-matter mask NIfTI."
    )
    parser.add_argument(
        "--labels",
        type=_types.input_file,
        default=None,
        help="Region labels NIfTI: write a region x region connectome.",
    )
    parser.add_argument(
        "--measure",
        choices=["weight", "count", "evidence"],
        default="weight",
        help="Connectome edge value: weight sum, surviving streamline count, "
        "or strength of evidence.",
    )
    lam = parser.add_mutually_exclusive_group()
    lam.add_argument(
        "--lambda",
        dest="lam",
        type=_types.number(0.0),
        default=0.0,
        help="ReAl-LiFE L1 weight (0: LiFE).",
    )
    lam.add_argument(
        "--lambda-sweep",
        dest="lam_sweep",
        type=_types.numbers(_types.number(0.0)),
        default=None,
        metavar="L1,L2,...",
        help="Fit each λ; report weight sum, non-zero count and cross-validated "
        "RMSE; outputs use the λ with the lowest cross-validated RMSE.",
    )
    parser.add_argument(
        "--repeat",
        type=_types.input_file,
        default=None,
        help="Second acquisition (same grid and volumes) for cross-validation; "
        "default: a gradient-direction split.",
    )
    iters = parser.add_mutually_exclusive_group()
    iters.add_argument(
        "--max-iter", type=_types.count, default=500, help="Most SBB iterations (reference maxit)."
    )
    iters.add_argument(
        "--iters", dest="max_iter", type=_types.count, action=DeprecatedAlias, new="--max-iter"
    )
    parser.add_argument(
        "--tol",
        type=_types.number(0.0),
        default=1e-5,
        help="Stop thresholds (projected gradient, objective change); 0: run all iterations.",
    )
    parser.add_argument(
        "--sphere",
        default=None,
        help="Atom orientations: a number of directions or a dipy sphere name.",
    )
    parser.add_argument(
        "--formulation",
        choices=["encode", "dipy"],
        default="encode",
        help="ENCODE's model or dipy's / LiFE 1.0's.",
    )
    parser.add_argument("--seed", type=_types.natural, default=0, help=SEED_HELP)
    parser.add_argument(
        "--checkpoint-every",
        type=_types.count,
        default=50,
        metavar="N",
        help="Solver iterations between checkpoints of its state (kept in the "
        "output folder until the outputs are published; a killed run "
        "resumes from the last one).",
    )
    add_out_argument(parser)
    add_wait_argument(parser)
    add_compute_arguments(parser)
    parser.set_defaults(func=run)
    return parser


_INPUTS = ("dwi", "bvals", "bvecs", "tractogram", "mask", "labels", "repeat")


def _input_files(args) -> list[Path]:
    """Return the input files of the run.

    The parser checked that they exist; life.fit checks their contents.
    """
    return [getattr(args, name) for name in _INPUTS if getattr(args, name) is not None]


def run(args) -> int:
    """Run ``connscale life``; return the exit status."""
    from connscale.io.relmat import source_entities

    configure_logging(args.verbose)
    inputs = _input_files(args)
    source = source_entities(args.dwi)
    with output_set(
        args,
        args.out,
        f"{source}_life",
        command="life",
        fingerprint=command_fingerprint(args, inputs),
    ) as outputs:
        if outputs.complete():
            print(
                f"connscale life: {args.out} already holds this run's complete output (same "
                "input contents and parameters); nothing to do."
            )
            return 0
        return _run(args, outputs, source)


def _run(args, outputs, source: str) -> int:
    from connscale._compute import resolve_device

    record = RunRecord("life", args.out, vars(args))
    record.device = str(resolve_device(args.device))

    def write(name: str) -> Path:
        record.add_output(args.out / name)
        return outputs.path(name)

    with record.timer("fit"):  # split into fit's steps below
        fit = _fit(args, outputs)
    del record.timings["fit"]
    record.timings.update({k: round(v, 6) for k, v in fit.timings.items()})
    _record_fit(record, fit)
    outputs.check_space(
        40 * len(fit.streamlines)
        + args.tractogram.stat().st_size
        + 4 * int(np.prod(fit.model.shape))
        + 4 * 1024**2,
        what="the LiFE outputs",
    )
    if fit.lambda_sweep is not None:
        from connscale.io.life import write_lambda_sweep

        write_lambda_sweep(write(f"{source}_desc-lambdasweep_table.tsv"), fit.lambda_sweep)
    with record.timer("write"):
        _write_outputs(args, outputs, source, fit, write)
        if args.labels is not None:
            record.results["n_regions"] = _write_connectome(args, outputs, source, fit, write)
        from connscale.io.relmat import write_dataset_description

        write_dataset_description(args.out)
    with record.timer("figures"):
        _write_figures(args, outputs, source, fit, record)
    log = publish(outputs, record, f"{source}_life")
    model, w = fit.model, fit.weights
    print(
        f"connscale life: {model.n_fibres}/{model.n_streamlines} streamlines in "
        f"{model.n_voxels} voxels, "
        f"λ={fit.lam:g}, {fit.n_iter} iterations ({fit.stop_reason}) on {record.device}; "
        f"{int((w > 0).sum())} kept, median RMSE {np.median(fit.voxel_rmse):.4g}"
    )
    print(f"  log {log}")
    return 0


def _fit(args, outputs):
    """Fit LiFE as the arguments say.

    Every solve of the run keeps its state in the staging folder (one file per
    problem), from which a killed run resumes.
    """
    from connscale import life

    sphere = args.sphere
    if sphere is not None and sphere.isdigit():
        sphere = int(sphere)
    return life.fit(
        args.dwi,
        args.bvals,
        args.bvecs,
        args.tractogram,
        mask=args.mask,
        lam=args.lam,
        lambdas=args.lam_sweep,
        dwi_repeat=args.repeat,
        cross_validate=True,
        max_iter=args.max_iter,
        tol=args.tol if args.tol > 0 else None,
        sphere=sphere,
        formulation=args.formulation,
        random_state=args.seed,
        **compute_options(args),
        verbose=args.verbose,
        checkpoint=outputs.staging / "life_checkpoint",
        checkpoint_every=args.checkpoint_every,
    )


def _record_fit(record: RunRecord, fit) -> None:
    """Log the model's size and put the model and fit in the run's results."""
    model, w = fit.model, fit.weights
    logger.info(
        "Model: %d fibres (%d dropped), %d voxels, %d directions, %d atoms, %d Φ entries",
        model.n_fibres,
        model.n_streamlines - model.n_fibres,
        model.n_voxels,
        model.n_directions,
        model.n_atoms,
        model.n_entries,
    )
    record.results.update(
        {
            "n_streamlines": model.n_streamlines,
            "n_fibres": model.n_fibres,
            "n_dropped_short": model.n_dropped_short,
            "n_dropped_outside": model.n_dropped_outside,
            "n_voxels": model.n_voxels,
            "n_directions": model.n_directions,
            "n_atoms": model.n_atoms,
            "n_entries": model.n_entries,
        }
    )
    if fit.lambda_sweep is not None:
        record.results["lambda_sweep"] = fit.lambda_sweep
        record.results["lambda_selected"] = fit.lam
    else:
        record.results["cv_rmse_median"] = float(np.median(fit.cv_rmse))
    record.results.update(
        {
            "lambda": fit.lam,
            "n_iter": fit.n_iter,
            "stop_reason": fit.stop_reason,
            "resumed_from_iteration": fit.resumed_from,
            "objective_final": float(fit.objective[-1]),
            "objective_history": [float(x) for x in fit.objective],
            "weight_sum": float(w.sum()),
            "n_nonzero": int((w > 0).sum()),
            "rmse_median": float(np.median(fit.voxel_rmse)),
        }
    )


def _write_outputs(args, outputs, source: str, fit, write) -> None:
    """Write the weights (.npy and text), the pruned tractogram and the RMSE map."""
    from connscale.io.nifti import save_nifti_gz
    from connscale.life.outputs import save_pruned_tractogram, save_weights

    w, model = fit.weights, fit.model
    save_weights(w, write(f"{source}_desc-life_weights.npy"))
    save_weights(w, write(f"{source}_desc-life_weights.tsv"))
    ext = args.tractogram.suffix.lower()
    save_pruned_tractogram(
        fit.streamlines,
        w,
        write(f"{source}_desc-pruned_tractogram{ext}"),
        reference_affine=model.affine,
        reference_shape=model.shape,
    )
    save_nifti_gz(write(f"{source}_desc-life_rmse.nii.gz"), fit.rmse_image())


def _write_connectome(args, outputs, source: str, fit, write) -> int:
    """Write the region x region connectome of ``--labels``; return its number of regions."""
    from connscale.life.api import load_volume
    from connscale.life.outputs import connectome, write_relmat

    labels, labels_affine = load_volume(args.labels, "labels")
    if labels_affine is None:
        labels_affine = fit.model.affine
    matrix, regions = connectome(
        fit.streamlines,
        fit.weights,
        labels,
        labels_affine,
        measure=args.measure,
        fit=fit,
        random_state=args.seed,
    )
    for p in write_relmat(
        matrix,
        regions,
        outputs.staging,
        source,
        measure=args.measure,
        metadata={
            "Sources": [dataset_relative(p, args.out) for p in (args.dwi, args.tractogram)],
            "Lambda": fit.lam,
        },
    ):
        write(p.name)
    return len(regions)


def _write_figures(args, outputs, source: str, fit, record: RunRecord) -> None:
    """Plot the RMSE map, the weight histogram and the λ sweep."""
    from connscale.report.plots import (
        plot_lambda_sweep,
        plot_rmse_map,
        plot_weight_histogram,
    )

    w = fit.weights
    figures = [
        (
            f"{source}_desc-rmse_slice.png",
            plot_rmse_map,
            fit.rmse_volume(),
            {"title": "LiFE voxel RMSE"},
        ),
        (
            f"{source}_desc-weights_hist.png",
            plot_weight_histogram,
            w,
            {"title": f"{int((w > 0).sum())} of {w.size} streamlines kept (λ={fit.lam:g})"},
        ),
    ]
    if fit.lambda_sweep:
        figures.append(
            (f"{source}_desc-lambdasweep_plot.png", plot_lambda_sweep, fit.lambda_sweep, {})
        )
    for name, plot, data, options in figures:
        plot(data, outputs.path(name), **options)
        record.add_figure(args.out / name)
