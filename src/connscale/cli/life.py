"""``connscale life``: LiFE / ReAl-LiFE streamline weights of a tractogram."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from connscale.cli._common import (
    RunRecord,
    add_compute_arguments,
    configure_logging,
    logger,
)


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one value")
    return values


def add_parser(subparsers) -> argparse.ArgumentParser:
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
    parser.add_argument("dwi", type=Path, help="4-D diffusion NIfTI.")
    parser.add_argument("--bvals", type=Path, required=True, help="FSL b-values file.")
    parser.add_argument("--bvecs", type=Path, required=True, help="FSL b-vectors file.")
    parser.add_argument("--tractogram", type=Path, required=True, help=".trk or .tck in the dMRI's space.")
    parser.add_argument("--mask", type=Path, default=None, help="Brain / white-matter mask NIfTI.")
    parser.add_argument("--labels", type=Path, default=None,
                        help="Region labels NIfTI: write a region x region connectome.")
    parser.add_argument("--measure", choices=["weight", "count", "evidence"], default="weight",
                        help="Connectome edge value: weight sum, surviving streamline count, "
                             "or strength of evidence.")
    lam = parser.add_mutually_exclusive_group()
    lam.add_argument("--lambda", dest="lam", type=float, default=0.0,
                     help="ReAl-LiFE L1 weight (0: LiFE).")
    lam.add_argument("--lambda-sweep", dest="lam_sweep", type=_floats, default=None, metavar="L1,L2,...",
                     help="Fit each λ; report weight sum, non-zero count and cross-validated "
                          "RMSE; outputs use the λ with the lowest cross-validated RMSE.")
    parser.add_argument("--repeat", type=Path, default=None,
                        help="Second acquisition (same grid and volumes) for cross-validation; "
                             "default: a gradient-direction split.")
    parser.add_argument("--iters", type=int, default=500, help="SBB iterations (reference maxit).")
    parser.add_argument("--tol", type=float, default=1e-5,
                        help="Stop thresholds (projected gradient, objective change); 0: run all iterations.")
    parser.add_argument("--sphere", default=None,
                        help="Atom orientations: a number of directions or a dipy sphere name.")
    parser.add_argument("--formulation", choices=["encode", "dipy"], default="encode",
                        help="ENCODE's model or dipy's / LiFE 1.0's.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the random steps.")
    parser.add_argument("--out", type=Path, required=True, help="Output folder.")
    add_compute_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    from connscale import life
    from connscale._compute import resolve_device
    from connscale.io.relmat import source_entities, write_dataset_description
    from connscale.life.api import (
        check_space,
        load_dwi,
        load_gradients,
        load_volume,
        plan_memory,
    )
    from connscale.life.encode import build_model
    from connscale.life.evaluate import cross_validated_rmse, lambda_sweep, split_rmse
    from connscale.life.outputs import (
        connectome,
        save_pruned_tractogram,
        save_weights,
        write_relmat,
    )
    from connscale.life.streamlines import load_streamlines

    configure_logging(args.verbose)
    if args.iters < 1:
        raise ValueError(f"--iters must be at least 1; got {args.iters}.")
    if args.lam < 0 or (args.lam_sweep and min(args.lam_sweep) < 0):
        raise ValueError("λ must be ≥ 0.")
    sphere = args.sphere
    if sphere is not None and sphere.isdigit():
        sphere = int(sphere)
    tol = args.tol if args.tol > 0 else None
    from connscale._compute import parse_memory

    parse_memory(args.memory_limit)
    record = RunRecord("life", args.out, vars(args))
    record.device = str(resolve_device(args.device))
    source = source_entities(args.dwi)
    with record.timer("load"):
        data, affine, _ = load_dwi(args.dwi)
        bvals, bvecs = load_gradients(args.bvals, args.bvecs)
        mask, _ = load_volume(args.mask, "mask")
        streamlines = load_streamlines(args.tractogram)
        check_space(streamlines, data.shape[:3], affine)
        repeat = load_dwi(args.repeat, affine=affine)[0] if args.repeat is not None else None
    # --memory-limit covers the loaded volumes, the model build's chunks, the
    # model and the products (checked up front and once the model is built).
    loaded = data.nbytes + (repeat.nbytes if repeat is not None else 0)
    chunk_points, ops = plan_memory(args.memory_limit, device=args.device,
                                    n_points=int(streamlines.offsets[-1]), loaded_bytes=loaded)
    with record.timer("build"):
        model = build_model(data, bvals, bvecs, streamlines, affine=affine, mask=mask, sphere=sphere,
                            formulation=args.formulation, device=args.device, dtype=args.dtype,
                            chunk_points=chunk_points, memory_limit=args.memory_limit,
                            loaded_bytes=loaded)
    logger.info("Model: %d fibres (%d dropped), %d voxels, %d directions, %d atoms, %d Φ entries",
                model.n_fibres, model.n_streamlines - model.n_fibres, model.n_voxels,
                model.n_directions, model.n_atoms, model.n_entries)
    record.results.update({
        "n_streamlines": model.n_streamlines, "n_fibres": model.n_fibres,
        "n_dropped_short": model.n_dropped_short, "n_dropped_outside": model.n_dropped_outside,
        "n_voxels": model.n_voxels, "n_directions": model.n_directions, "n_atoms": model.n_atoms,
        "n_entries": model.n_entries,
    })
    sweep_rows = None
    if args.lam_sweep:
        with record.timer("lambda_sweep"):
            sweep_rows = lambda_sweep(model, args.lam_sweep, data_repeat=repeat, n_iter=args.iters,
                                      tol=tol, random_state=args.seed, verbose=args.verbose,
                                      operator_options=ops)
        best = min(sweep_rows, key=lambda r: r["cv_rmse_median"])
        fit = best["fit"]
        record.results["lambda_sweep"] = [{k: v for k, v in r.items() if k != "fit"} for r in sweep_rows]
        record.results["lambda_selected"] = best["lam"]
        path = args.out / f"{source}_desc-lambdasweep_table.tsv"
        from connscale.io._atomic import write_text_atomic

        lines = ["lambda\tweight_sum\tn_nonzero\tcv_rmse_median\trmse_median\tobjective\tn_iter"]
        lines += [f"{r['lam']:.9g}\t{r['weight_sum']:.9g}\t{r['n_nonzero']}\t{r['cv_rmse_median']:.9g}\t"
                  f"{r['rmse_median']:.9g}\t{r['objective']:.9g}\t{r['n_iter']}" for r in sweep_rows]
        record.add_output(write_text_atomic(path, "\n".join(lines) + "\n"))
    else:
        with record.timer("solve"):
            fit = life.solve(model, lam=args.lam, n_iter=args.iters, tol=tol, verbose=args.verbose,
                             operator_options=ops)
        with record.timer("cross_validation"):
            if repeat is not None:
                cv = cross_validated_rmse(model, fit.weights_kept, repeat)["rmse"]
            else:
                cv = split_rmse(model, lam=args.lam, n_iter=args.iters, tol=tol, random_state=args.seed,
                                operator_options=ops)
        record.results["cv_rmse_median"] = float(np.median(cv))
    fit.streamlines = streamlines
    w = fit.weights
    record.results.update({
        "lambda": fit.lam, "n_iter": fit.n_iter, "stop_reason": fit.stop_reason,
        "objective_final": float(fit.objective[-1]), "objective_history": [float(x) for x in fit.objective],
        "weight_sum": float(w.sum()), "n_nonzero": int((w > 0).sum()),
        "rmse_median": float(np.median(fit.voxel_rmse)),
    })

    with record.timer("write"):
        record.add_output(save_weights(w, args.out / f"{source}_desc-life_weights.npy"))
        record.add_output(save_weights(w, args.out / f"{source}_desc-life_weights.tsv"))
        ext = args.tractogram.suffix.lower()
        record.add_output(save_pruned_tractogram(
            streamlines, w, args.out / f"{source}_desc-pruned_tractogram{ext}",
            reference_affine=affine, reference_shape=data.shape[:3]))
        import gzip

        from connscale.io._atomic import atomic_path

        rmse_path = args.out / f"{source}_desc-life_rmse.nii.gz"
        with atomic_path(rmse_path) as tmp:
            tmp.write_bytes(gzip.compress(fit.rmse_image().to_bytes()))
        record.add_output(rmse_path)
        if args.labels is not None:
            labels, labels_affine = load_volume(args.labels, "labels")
            if labels_affine is None:
                labels_affine = affine
            matrix, regions = connectome(streamlines, w, labels, labels_affine, measure=args.measure,
                                         fit=fit, random_state=args.seed)
            for p in write_relmat(matrix, regions, args.out, source, measure=args.measure,
                                  metadata={"Sources": [str(args.dwi), str(args.tractogram)],
                                            "Lambda": fit.lam}):
                record.add_output(p)
            record.results["n_regions"] = len(regions)
        write_dataset_description(args.out)
    with record.timer("figures"):
        for p in _figures(fit, args.out, source, sweep_rows):
            record.add_figure(p)
    log = record.finish(f"{source}_life")
    print(f"connscale life: {model.n_fibres}/{model.n_streamlines} streamlines in {model.n_voxels} voxels, "
          f"λ={fit.lam:g}, {fit.n_iter} iterations ({fit.stop_reason}) on {record.device}; "
          f"{int((w > 0).sum())} kept, median RMSE {np.median(fit.voxel_rmse):.4g}")
    print(f"  log {log}")
    return 0


def _save_png(fig, path):
    from connscale.io._atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return path


def _figures(fit, out: Path, source: str, sweep_rows) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    vol = fit.rmse_volume()
    counts = np.isfinite(vol).sum(axis=(0, 1))
    z = int(np.argmax(counts))
    fig, ax = plt.subplots(figsize=(5, 4.5))
    im = ax.imshow(np.ma.masked_invalid(vol[:, :, z]).T, origin="lower", cmap="magma")
    fig.colorbar(im, ax=ax, label="RMSE (signal units)")
    ax.set_title(f"LiFE voxel RMSE, slice z={z}")
    fig.tight_layout()
    paths.append(_save_png(fig, out / f"{source}_desc-rmse_slice.png"))
    plt.close(fig)
    w = fit.weights
    fig, ax = plt.subplots(figsize=(5, 3.5))
    pos = w[w > 0]
    ax.hist(pos if pos.size else [0.0], bins=50, color="tab:blue")
    ax.set_xlabel("weight (w > 0)")
    ax.set_ylabel("streamlines")
    ax.set_title(f"{pos.size} of {w.size} streamlines kept (λ={fit.lam:g})")
    fig.tight_layout()
    paths.append(_save_png(fig, out / f"{source}_desc-weights_hist.png"))
    plt.close(fig)
    if sweep_rows:
        lam = np.array([r["lam"] for r in sweep_rows])
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
        for ax, key, label in zip(axes, ["weight_sum", "n_nonzero", "cv_rmse_median"],
                                  ["Σ weights", "non-zero weights", "cross-validated median RMSE"]):
            ax.plot(lam, [r[key] for r in sweep_rows], "o-")
            if np.all(lam > 0):
                ax.set_xscale("log")
            ax.set_xlabel("λ")
            ax.set_title(label)
        fig.tight_layout()
        paths.append(_save_png(fig, out / f"{source}_desc-lambdasweep_plot.png"))
        plt.close(fig)
    return paths
