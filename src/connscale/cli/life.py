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
import dataclasses
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import LIFE_FORMULATIONS, LIFE_MEASURES
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval, SequenceOf, StrOptions
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
    compute_options,
    configure_logging,
    logger,
    output_set,
)
from connscale.cli._sets import command_fingerprint, publish
from connscale.io.bids import dataset_relative

#: The mutually exclusive --lambda / --lambda-sweep.
LAMBDA = "lambda"

_NON_NEGATIVE = Interval(Real, 0, None, closed="left")
_COUNT = Interval(Integral, 1, None, closed="left")


def _input(names: tuple[str, ...], doc: str, flag_help: str, *, required: bool = False, **flag):
    """Declare a file the fit reads: a positional argument or an option, required or None."""
    return param(
        dataclasses.MISSING if required else None,
        constraints=["path"] if required else ["path", None],
        doc=doc,
        flag=Flag(names, type="input_file", required=required and names[0].startswith("-"),
                  help=flag_help, **flag),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LifeConfig:
    """The options of ``connscale life``, each declared once (:mod:`connscale._params`)."""

    dwi: Path = _input(("dwi",), "4-D diffusion NIfTI.", "4-D diffusion NIfTI.",
                       required=True, metavar="DWI")  # fmt: skip
    bvals: Path = _input(("--bvals",), "FSL b-values file.", "FSL b-values file.", required=True)
    bvecs: Path = _input(("--bvecs",), "FSL b-vectors file.", "FSL b-vectors file.", required=True)
    tractogram: Path = _input(
        ("--tractogram",),
        "Tractogram (``.trk`` or ``.tck``) in the dMRI's space.",
        ".trk or .tck in the dMRI's space.",
        required=True,
    )
    mask: Path | None = _input(
        ("--mask",),
        "Brain / white-matter mask NIfTI: only the nodes inside enter the model;\nNone: all.",
        "Brain / white-matter mask NIfTI.",
    )
    labels: Path | None = _input(
        ("--labels",),
        "Region labels NIfTI: also write a region x region connectome; None: none.",
        "Region labels NIfTI: write a region x region connectome.",
    )
    measure: str = param(
        "weight",
        constraints=[StrOptions(set(LIFE_MEASURES))],
        doc="The connectome's edge value: the weight sum, the count of surviving\n"
        "streamlines, or the strength of evidence (with ``labels``).",
        flag=Flag(("--measure",), choices=LIFE_MEASURES,
                  help="Connectome edge value: weight sum, surviving streamline count, "
                  "or strength of evidence."),
    )  # fmt: skip
    lam: float = param(
        0.0,
        constraints=[_NON_NEGATIVE],
        doc="ReAl-LiFE's L1 weight λ (0: LiFE); unused with ``lam_sweep``.",
        flag=Flag(("--lambda",), group=LAMBDA, type=("number", 0.0), metavar="LAM",
                  help="ReAl-LiFE L1 weight (0: LiFE)."),
    )  # fmt: skip
    lam_sweep: list[float] | None = param(
        None,
        constraints=[SequenceOf(_NON_NEGATIVE), None],
        doc="Fit each λ and report its weight sum, non-zero count and cross-validated\n"
        "RMSE; the outputs are those of the λ with the lowest cross-validated RMSE.",
        flag=Flag(("--lambda-sweep",), group=LAMBDA, type=("numbers", _types.number(0.0)),
                  metavar="L1,L2,...",
                  help="Fit each λ; report weight sum, non-zero count and cross-validated "
                  "RMSE; outputs use the λ with the lowest cross-validated RMSE."),
    )  # fmt: skip
    repeat: Path | None = _input(
        ("--repeat",),
        "A second acquisition (same grid and volumes) for the cross-validation;\n"
        "None: a split of the gradient directions.",
        "Second acquisition (same grid and volumes) for cross-validation; "
        "default: a gradient-direction split.",
    )
    max_iter: int = param(
        500,
        constraints=[_COUNT],
        doc="Most SBB-NNLS iterations (the reference's ``maxit``).",
        flag=Flag(("--max-iter",), type="count", help="Most SBB iterations (reference maxit)."),
    )
    tol: float = param(
        1e-5,
        constraints=[_NON_NEGATIVE],
        doc="Stop thresholds of the solver (projected gradient, objective change);\n"
        "0: run all ``max_iter`` iterations.",
        flag=Flag(("--tol",), type=("number", 0.0),
                  help="Stop thresholds (projected gradient, objective change); "
                  "0: run all iterations."),
    )  # fmt: skip
    sphere: str | None = param(
        None,
        constraints=[str, None],
        doc="Atom orientations: a number of directions (``'100'``) or a dipy sphere\n"
        "name; None: the fit's default.",
        flag=Flag(("--sphere",),
                  help="Atom orientations: a number of directions or a dipy sphere name."),
    )  # fmt: skip
    formulation: str = param(
        "encode",
        constraints=[StrOptions(set(LIFE_FORMULATIONS))],
        doc="The signal model: ENCODE's, or dipy's / LiFE 1.0's.",
        flag=Flag(("--formulation",), choices=LIFE_FORMULATIONS,
                  help="ENCODE's model or dipy's / LiFE 1.0's."),
    )  # fmt: skip
    seed: int = _fields.seed()
    checkpoint_every: int = param(
        50,
        fingerprint=False,
        constraints=[_COUNT],
        doc="Solver iterations between checkpoints of its state (in the staging\n"
        "folder until the outputs are published; a killed run resumes from the last).",
        flag=Flag(("--checkpoint-every",), type="count", metavar="N",
                  help="Solver iterations between checkpoints of its state (kept in the "
                  "output folder until the outputs are published; a killed run "
                  "resumes from the last one)."),
    )  # fmt: skip
    out: Path = _fields.out()
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``life`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`LifeConfig`'s fields.
    """
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
    groups = {
        None: parser,
        LAMBDA: parser.add_mutually_exclusive_group(),
        _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION),
    }
    add_arguments(parser, LifeConfig, groups, _types)
    parser.set_defaults(func=run)
    return parser


_INPUTS = ("dwi", "bvals", "bvecs", "tractogram", "mask", "labels", "repeat")


def _input_files(config: LifeConfig) -> list[Path]:
    """Return the input files of the run.

    The parser checked that they exist; life.fit checks their contents.
    """
    return [getattr(config, name) for name in _INPUTS if getattr(config, name) is not None]


def _parameters(config: LifeConfig) -> dict:
    """Return the run's parameters, as its log and fingerprint record them."""
    return {"command": "life", **vars(config)}


def run(args) -> int:
    """Run ``connscale life`` from its parsed command line; return the exit status."""
    return run_life(**keywords_from_args(args, LifeConfig))


@entry(LifeConfig)
def run_life(config: LifeConfig) -> int:
    """Fit LiFE to a dMRI scan and a tractogram and publish its outputs; return 0.

    The weights, pruned tractogram, RMSE map, connectome (with ``labels``),
    λ sweep table, figures and log are published as one set; nothing is done
    when ``out`` already holds this run's complete output.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale.io.relmat import source_entities

    configure_logging(config.verbose)
    inputs = _input_files(config)
    source = source_entities(config.dwi)
    fingerprint = command_fingerprint(argparse.Namespace(**_parameters(config)), inputs)
    with output_set(
        config, config.out, f"{source}_life", command="life", fingerprint=fingerprint
    ) as outputs:
        if outputs.complete():
            print(
                f"connscale life: {config.out} already holds this run's complete output (same "
                "input contents and parameters); nothing to do."
            )
            return 0
        return _run(config, outputs, source)


def _run(config, outputs, source: str) -> int:
    from connscale._compute import resolve_device

    record = RunRecord("life", config.out, _parameters(config))
    record.device = str(resolve_device(config.device))

    def write(name: str) -> Path:
        record.add_output(config.out / name)
        return outputs.path(name)

    with record.timer("fit"):  # split into fit's steps below
        fit = _fit(config, outputs)
    del record.timings["fit"]
    record.timings.update({k: round(v, 6) for k, v in fit.timings.items()})
    _record_fit(record, fit)
    outputs.check_space(
        40 * len(fit.streamlines)
        + config.tractogram.stat().st_size
        + 4 * int(np.prod(fit.model.shape))
        + 4 * 1024**2,
        what="the LiFE outputs",
    )
    if fit.lambda_sweep is not None:
        from connscale.io.life import write_lambda_sweep

        write_lambda_sweep(write(f"{source}_desc-lambdasweep_table.tsv"), fit.lambda_sweep)
    with record.timer("write"):
        _write_outputs(config, outputs, source, fit, write)
        if config.labels is not None:
            record.results["n_regions"] = _write_connectome(config, outputs, source, fit, write)
        from connscale.io.relmat import write_dataset_description

        write_dataset_description(config.out)
    with record.timer("figures"):
        _write_figures(config, outputs, source, fit, record)
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


def _fit(config, outputs):
    """Fit LiFE as the config says.

    Every solve of the run keeps its state in the staging folder (one file per
    problem), from which a killed run resumes.
    """
    from connscale import life

    sphere = config.sphere
    if sphere is not None and sphere.isdigit():
        sphere = int(sphere)
    return life.fit(
        config.dwi,
        config.bvals,
        config.bvecs,
        config.tractogram,
        mask=config.mask,
        lam=config.lam,
        lambdas=config.lam_sweep,
        dwi_repeat=config.repeat,
        cross_validate=True,
        max_iter=config.max_iter,
        tol=config.tol if config.tol > 0 else None,
        sphere=sphere,
        formulation=config.formulation,
        random_state=config.seed,
        **compute_options(config),
        verbose=config.verbose,
        checkpoint=outputs.staging / "life_checkpoint",
        checkpoint_every=config.checkpoint_every,
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


def _write_outputs(config, outputs, source: str, fit, write) -> None:
    """Write the weights (.npy and text), the pruned tractogram and the RMSE map."""
    from connscale.io.nifti import save_nifti_gz
    from connscale.life.outputs import save_pruned_tractogram, save_weights

    w, model = fit.weights, fit.model
    save_weights(w, write(f"{source}_desc-life_weights.npy"))
    save_weights(w, write(f"{source}_desc-life_weights.tsv"))
    ext = config.tractogram.suffix.lower()
    save_pruned_tractogram(
        fit.streamlines,
        w,
        write(f"{source}_desc-pruned_tractogram{ext}"),
        reference_affine=model.affine,
        reference_shape=model.shape,
    )
    save_nifti_gz(write(f"{source}_desc-life_rmse.nii.gz"), fit.rmse_image())


def _write_connectome(config, outputs, source: str, fit, write) -> int:
    """Write the region x region connectome of ``--labels``; return its number of regions."""
    from connscale.life.api import load_volume
    from connscale.life.outputs import connectome, write_relmat

    labels, labels_affine = load_volume(config.labels, "labels")
    if labels_affine is None:
        labels_affine = fit.model.affine
    matrix, regions = connectome(
        fit.streamlines,
        fit.weights,
        labels,
        labels_affine,
        measure=config.measure,
        fit=fit,
        random_state=config.seed,
    )
    for p in write_relmat(
        matrix,
        regions,
        outputs.staging,
        source,
        measure=config.measure,
        metadata={
            "Sources": [dataset_relative(p, config.out) for p in (config.dwi, config.tractogram)],
            "Lambda": fit.lam,
        },
    ):
        write(p.name)
    return len(regions)


def _write_figures(config, outputs, source: str, fit, record: RunRecord) -> None:
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
        record.add_figure(config.out / name)
