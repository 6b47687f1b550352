"""``connscale r1dl``: functional networks by rank-1 dictionary learning.

Input: a 4-D NIfTI (with ``--mask``; without one nilearn computes a mask) or
a T x P matrix as ``.npy`` (memory-mapped) or TSV/CSV. Outputs, as BIDS
derivatives in ``<out>/sub-<s>/[ses-<t>/]func/`` named after the input's
entities (``<source>``, as ``connscale fc`` names them) with ``meas-R1DL``:

* ``<source>_meas-R1DL_components.nii.gz`` (4-D, through the mask; NIfTI
  input only) and ``..._components.npz`` (scipy.sparse CSR, K x P) always,
  with the sidecar ``..._components.json``;
* ``..._mixing.tsv`` (T x K time courses) and its sidecar ``..._mixing.json``;
* ``..._iterations.tsv`` and ``..._iterations.json`` (updates per atom);
* ``..._components.png``, a figure of the first networks;
* ``..._components_log.json`` and ``..._components_report.html``;
* ``..._components_manifest.json``, the set's manifest (each file's size and
  SHA-256, the fingerprint of the input and the parameters), written last;

and ``dataset_description.json`` at ``<out>``.

The files are published together (:class:`connscale.io.publish.OutputSet`):
a run writes them in the hidden ``.<source>_meas-R1DL_components.staging/``
folder under a lock on the output (a second run fails naming the first's
pid, or waits with ``--wait``) and moves them into the folder when all are
written. Every learned atom is checkpointed there, so a killed run resumes
from its last finished atom. A re-run over a published set of the same input
content and parameters does nothing; a changed input is computed again; a
set made with other parameters is replaced only with ``--overwrite``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from connscale._fields import SEED_HELP
from connscale._version import __version__
from connscale.cli import _types
from connscale.cli._common import (
    DeprecatedAlias,
    RunRecord,
    add_compute_arguments,
    add_out_argument,
    add_wait_argument,
    compute_options,
    configure_logging,
    output_set,
)
from connscale.cli._sets import command_fingerprint
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import dataset_relative

logger = logging.getLogger("connscale")

_N_FIGURE = 4
_TABLE_SUFFIXES = (".npy", ".tsv", ".csv", ".txt")


def add_parser(subparsers) -> None:
    """Add the ``r1dl`` command to ``subparsers``."""
    parser = subparsers.add_parser(
        "r1dl",
        help="Functional networks by rank-1 dictionary learning (r1DL / D-r1DL).",
        description=(
            "Learn K sparse functional networks (spatial maps and time courses) "
            "from a 4-D NIfTI through a mask, or from a T x P matrix (.npy, TSV, "
            "CSV), locally (CPU/GPU, streamed from disk when S exceeds memory) "
            "or on a Dask or Spark cluster."
        ),
    )
    parser.add_argument(
        "input",
        type=_types.input_file,
        metavar="INPUT",
        help="4-D NIfTI, or T x P .npy / .tsv / .csv.",
    )
    parser.add_argument("--mask", type=_types.input_file, default=None, help="Brain mask NIfTI.")
    components = parser.add_mutually_exclusive_group(required=True)
    components.add_argument("--n-components", "-k", type=_types.count, help="Number of networks K.")
    components.add_argument(
        "--atoms",
        dest="n_components",
        type=_types.count,
        action=DeprecatedAlias,
        new="--n-components",
    )
    parser.add_argument(
        "--sparsity",
        "-r",
        type=_types.sparsity,
        required=True,
        help="Voxels per network: a count (e.g. 500) or a fraction (e.g. 0.07).",
    )
    add_out_argument(parser)
    parser.add_argument("--backend", default="local", choices=["local", "dask", "spark"])
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="Dask scheduler address or Spark master URL (default: local).",
    )
    parser.add_argument("--seed", type=_types.natural, default=0, help=SEED_HELP)
    parser.add_argument("--tol", type=_types.positive, default=0.01, help="Convergence tolerance.")
    parser.add_argument("--max-iter", type=_types.count, default=100, help="Most updates per atom.")
    parser.add_argument("--selection", default="magnitude", choices=["magnitude", "signed"])
    parser.add_argument(
        "--no-standardize",
        dest="standardize",
        action="store_false",
        help="Do not make voxel columns zero-mean, unit-norm.",
    )
    parser.add_argument("--n-init", type=_types.count, default=1, help="Random starts per atom.")
    parser.add_argument(
        "--block-size", type=_types.count, default=None, help="Voxels per streamed / cluster block."
    )
    parser.add_argument(
        "--storage",
        default="auto",
        choices=["auto", "device", "host", "file"],
        help="Where the local backend keeps S between passes: GPU memory "
        "('device'), pinned host memory streamed over PCIe ('host'), or "
        "re-read from the input every pass ('file'); 'auto' takes the "
        "first that fits.",
    )
    add_wait_argument(parser)
    add_compute_arguments(parser)
    parser.set_defaults(func=run)


def _load_input(args):
    """Return (S or a .npy path for r1dl, masker or None, mean image or None)."""
    from connscale.io.nifti import is_nifti, load_masked
    from connscale.io.timeseries import load_timeseries

    path = args.input
    if is_nifti(path):
        from nilearn.image import mean_img

        S, masker = load_masked(path, mask=args.mask)
        return S, masker, mean_img(str(path))
    if path.suffix.lower() == ".npy":
        return str(path), None, None  # memory-mapped by r1dl, never loaded whole
    return load_timeseries(path)[0], None, None  # .tsv, .csv, .txt (check_arguments)


def _place(args) -> tuple[Path, str]:
    """Folder and common stem (``<source>_meas-R1DL``) of the outputs."""
    from connscale.cli._inputs import bids_place, output_entities

    entities = {**output_entities(args.input), "meas": "R1DL"}
    folder, stem = bids_place(args.out, entities, suffix="components", extension=".npz")
    return folder, stem.removesuffix("_components")


def _write_outputs(args, record: RunRecord, result, masker, outputs, base: str):
    """Write the outputs; return the 4-D maps image (None for matrix input)."""
    from connscale.io.r1dl import write_r1dl

    def write(name: str) -> Path:
        record.add_output(outputs.out_dir / f"{base}_{name}")
        return outputs.path(f"{base}_{name}")

    maps = None if masker is None else masker.inverse_transform(result.loadings.toarray())
    summary = write_r1dl(
        write,
        loadings=result.loadings,
        dictionary=result.dictionary,
        n_iter=result.n_iter,
        converged=result.converged,
        sparsity=result.sparsity,
        mean_iterations=result.mean_iterations,
        info=result.info,
        maps_img=maps,
    )
    record.results.update({k: summary[k] for k in ("n_atoms", "sparsity", "mean_iterations")})
    record.results["n_converged"] = int(result.converged.sum())
    record.results.update({f"info_{k}": v for k, v in result.info.items()})
    n_atoms = result.dictionary.shape[1]
    sources = [dataset_relative(p, args.out) for p in (args.input, args.mask) if p is not None]
    write_json_atomic(write("components.json"), _components_sidecar(args, summary, sources))
    write_json_atomic(write("mixing.json"), _mixing_sidecar(n_atoms, sources))
    return maps


def _components_sidecar(args, summary: dict, sources: list) -> dict:
    """Return the JSON sidecar of the ``_components`` files (maps and loadings)."""
    return {
        "Measure": "Rank-1 dictionary learning (r1DL)",
        "MeasureDescription": (
            "Sparse spatial maps of functional networks: S (time points x voxels) ~ "
            "D (the _mixing.tsv) x L, each row of L with at most Sparsity non-zero voxels"
        ),
        "StorageFormat": (
            ".npz: scipy.sparse CSR (components, voxels in the mask's C order or the input's "
            "columns); .nii.gz: 4-D image, one volume per component"
        ),
        "NumberOfComponents": int(summary["n_atoms"]),
        "Sparsity": int(summary["sparsity"]),
        "Selection": args.selection,
        "Standardize": bool(args.standardize),
        "Tolerance": float(args.tol),
        "MaxIterations": int(args.max_iter),
        "RandomStarts": int(args.n_init),
        "RandomSeed": int(args.seed),
        "DataType": str(args.dtype),
        "Sources": sources,
        "Code": f"connscale {__version__}",
    }


def _mixing_sidecar(n_atoms: int, sources: list) -> dict:
    """Return the JSON sidecar of the ``_mixing.tsv`` table (its columns)."""
    from connscale.io.r1dl import network_names

    return {
        "Description": "Time course of each network (the dictionary D), one row per time point",
        **{
            name: {"Description": f"Time course of network {k} (row {k} of the loadings)"}
            for k, name in enumerate(network_names(n_atoms))
        },
        "Sources": sources,
        "Code": f"connscale {__version__}",
    }


def _figure(record: RunRecord, result, maps, background, outputs, base: str) -> None:
    from connscale.report.plots import plot_networks

    name = f"{base}_components.png"
    plot_networks(
        result.dictionary,
        maps if maps is not None else result.loadings,
        outputs.path(name),
        max_networks=_N_FIGURE,
        bg_img=background,
    )
    record.add_figure(outputs.out_dir / name)


def check_arguments(args) -> None:
    """Check that INPUT is of a kind r1dl reads, and --mask goes with a NIfTI INPUT.

    Both are told by the names: nothing is read here.
    """
    from connscale.io.nifti import is_nifti

    if not is_nifti(args.input) and args.input.suffix.lower() not in _TABLE_SUFFIXES:
        raise ValueError(
            f"INPUT must be a 4-D NIfTI (.nii/.nii.gz) or a T x P .npy, .tsv or .csv file; "
            f"got {args.input.name}."
        )
    if args.mask is not None and not is_nifti(args.input):
        raise ValueError(f"--mask applies to NIfTI input only; got {args.input.name}.")


def _check_space(args, outputs, S) -> None:
    """Fail before learning when the output folder cannot take the result.

    The result is the loadings (and their maps, mostly zeros once
    compressed), time courses as text, a figure and the logs.
    """
    from connscale.networks import resolve_sparsity

    if isinstance(S, str):
        try:
            shape = np.load(S, mmap_mode="r").shape
        except ValueError as exc:
            raise ValueError(f"Cannot read {S} as a numeric .npy array: {exc}") from None
    else:
        shape = np.shape(S)
    if len(shape) != 2:
        return  # r1dl says what is wrong with it
    r = resolve_sparsity(args.sparsity, shape[1])
    nbytes = 2 * 12 * args.n_components * r + 16 * shape[0] * args.n_components + 4 * 1024**2
    outputs.check_space(nbytes, what="the r1dl outputs")


def run(args) -> int:
    """Run ``connscale r1dl``; return the exit status.

    Learn the networks of INPUT (resuming from the checkpoint in the staging
    folder) and publish the components, mixing table, figure and log as one
    set (nothing is done when the folder already holds this run's complete
    output).
    """
    from connscale.io.bids import write_dataset_description
    from connscale.networks import r1dl

    configure_logging(args.verbose)
    folder, base = _place(args)
    prefix = f"{base}_components"
    inputs = [p for p in (args.input, args.mask) if p is not None]
    fingerprint = command_fingerprint(args, inputs)
    with output_set(args, folder, prefix, command="r1dl", fingerprint=fingerprint) as outputs:
        if outputs.complete():
            logger.info(
                "r1dl: %s already holds this run's complete output (same input "
                "content and parameters); nothing to do.",
                folder,
            )
            return 0
        parameters = {k: v for k, v in vars(args).items() if k != "func"}
        record = RunRecord("r1dl", args.out, parameters)
        with record.timer("load"):
            S, masker, background = _load_input(args)
        _check_space(args, outputs, S)
        with record.timer("r1dl"):
            result = r1dl(
                S,
                args.n_components,
                args.sparsity,
                tol=args.tol,
                max_iter=args.max_iter,
                selection=args.selection,
                standardize=args.standardize,
                n_init=args.n_init,
                backend=args.backend,
                cluster=args.cluster,
                random_state=args.seed,
                block_size=args.block_size,
                **compute_options(args),
                storage=args.storage,
                checkpoint=outputs.staging / "r1dl_checkpoint",
                verbose=args.verbose,
            )
        record.device = result.info.get("device", result.info.get("backend"))
        record.results["resumed_atoms"] = result.info["resumed_atoms"]
        with record.timer("write"):
            maps = _write_outputs(args, record, result, masker, outputs, base)
        with record.timer("figure"):
            _figure(record, result, maps, background, outputs, base)
        log = record.finish(prefix, outputs)
        outputs.commit()
    write_dataset_description(args.out)
    logger.info(
        "r1dl: %d networks, mean %.2f updates per atom; outputs in %s (%s)",
        result.dictionary.shape[1],
        result.mean_iterations,
        folder,
        log.name,
    )
    return 0
