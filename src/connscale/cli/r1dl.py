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

import argparse
import logging
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._choices import R1DL_BACKENDS, R1DL_SELECTIONS, R1DL_STORAGES
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval, StrOptions
from connscale._version import __version__
from connscale.cli import _types
from connscale.cli._common import (
    RunRecord,
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
_COUNT = Interval(Integral, 1, None, closed="left")


@dataclass(frozen=True, kw_only=True)
class R1dlConfig:
    """The options of ``connscale r1dl``, each declared once (:mod:`connscale._params`)."""

    input: Path = _fields.input_file(
        "A 4-D NIfTI (``.nii``/``.nii.gz``), or a T x P matrix as ``.npy``\n"
        "(memory-mapped), ``.tsv`` or ``.csv``.",
        flag_help="4-D NIfTI, or T x P .npy / .tsv / .csv.",
    )
    mask: Path | None = param(
        None,
        constraints=["path", None],
        doc="Brain mask NIfTI of a NIfTI INPUT; None: computed by nilearn.",
        flag=Flag(("--mask",), type="input_file", help="Brain mask NIfTI."),
    )
    n_components: int = param(
        constraints=[_COUNT],
        doc="Number of networks K.",
        flag=Flag(("--n-components", "-k"), type="count", metavar="N_COMPONENTS", required=True,
                  help="Number of networks K."),
    )  # fmt: skip
    sparsity: int | float = param(
        constraints=[_COUNT, Interval(Real, 0, 1, closed="right")],
        doc="Voxels per network: a count (``500``) or a fraction of the voxels\n"
        "(``0.07``).",
        flag=Flag(("--sparsity", "-r"), type="sparsity", metavar="SPARSITY", required=True,
                  help="Voxels per network: a count (e.g. 500) or a fraction (e.g. 0.07)."),
    )  # fmt: skip
    out: Path = _fields.out()
    backend: str = param(
        "local",
        constraints=[StrOptions(set(R1DL_BACKENDS))],
        doc="Where to learn: ``'local'`` (CPU/GPU, streamed from disk when S\n"
        "exceeds memory), or a Dask or Spark cluster.",
        flag=Flag(("--backend",), choices=R1DL_BACKENDS),
    )
    cluster: str | None = param(
        None,
        constraints=[str, None],
        doc="Dask scheduler address or Spark master URL; None: a local cluster.",
        flag=Flag(("--cluster",), metavar="ADDRESS",
                  help="Dask scheduler address or Spark master URL (default: local)."),
    )  # fmt: skip
    seed: int = _fields.seed()
    tol: float = param(
        0.01,
        constraints=[Interval(Real, 0, None, closed="neither")],
        doc="Convergence tolerance of an atom: ``‖u_new - u‖ < tol``.",
        flag=Flag(("--tol",), type="positive", help="Convergence tolerance."),
    )
    max_iter: int = param(
        100,
        constraints=[_COUNT],
        doc="Most alternating updates per atom.",
        flag=Flag(("--max-iter",), type="count", help="Most updates per atom."),
    )
    selection: str = param(
        "magnitude",
        constraints=[StrOptions(set(R1DL_SELECTIONS))],
        doc="Keep the loadings of largest ``|y|`` (``'magnitude'``) or largest ``y``\n"
        "(``'signed'``).",
        flag=Flag(("--selection",), choices=R1DL_SELECTIONS),
    )
    standardize: bool = param(
        True,
        constraints=["boolean"],
        doc="Make the voxel columns zero-mean and unit-norm first.",
        flag=Flag(("--no-standardize",), action="store_false",
                  help="Do not make voxel columns zero-mean, unit-norm."),
    )  # fmt: skip
    n_init: int = param(
        1,
        constraints=[_COUNT],
        doc="Random starts per atom.",
        flag=Flag(("--n-init",), type="count", help="Random starts per atom."),
    )
    block_size: int | None = param(
        None,
        constraints=[_COUNT, None],
        doc="Voxels per streamed / cluster block; None: chosen from the memory budget.",
        flag=Flag(("--block-size",), type="count", help="Voxels per streamed / cluster block."),
    )
    storage: str = param(
        "auto",
        constraints=[StrOptions(set(R1DL_STORAGES))],
        doc="Where the local backend keeps S between passes: GPU memory\n"
        "(``'device'``), pinned host memory (``'host'``), re-read from INPUT\n"
        "(``'file'``); ``'auto'``: the first that fits.",
        flag=Flag(("--storage",), choices=R1DL_STORAGES,
                  help="Where the local backend keeps S between passes: GPU memory "
                  "('device'), pinned host memory streamed over PCIe ('host'), or "
                  "re-read from the input every pass ('file'); 'auto' takes the "
                  "first that fits."),
    )  # fmt: skip
    wait: bool = _fields.wait()
    overwrite: bool = _fields.overwrite()
    device: str = _fields.device()
    dtype: str = _fields.dtype()
    memory_limit: str | int | None = _fields.memory_limit()
    verbose: int = _fields.verbose()


def add_parser(subparsers) -> None:
    """Add the ``r1dl`` command to ``subparsers``.

    Its options are derived from :class:`R1dlConfig`'s fields.
    """
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
    groups = {
        None: parser,
        _fields.COMPUTATION: parser.add_argument_group(_fields.COMPUTATION),
    }
    add_arguments(parser, R1dlConfig, groups, _types)
    parser.set_defaults(func=run)


def _load_input(config):
    """Return (S or a .npy path for r1dl, masker or None, mean image or None)."""
    from connscale.io.nifti import is_nifti, load_masked
    from connscale.io.timeseries import load_timeseries

    path = config.input
    if is_nifti(path):
        from nilearn.image import mean_img

        S, masker = load_masked(path, mask=config.mask)
        return S, masker, mean_img(str(path))
    if path.suffix.lower() == ".npy":
        return str(path), None, None  # memory-mapped by r1dl, never loaded whole
    return load_timeseries(path)[0], None, None  # .tsv, .csv, .txt (check_arguments)


def _place(config) -> tuple[Path, str]:
    """Folder and common stem (``<source>_meas-R1DL``) of the outputs."""
    from connscale.cli._inputs import bids_place, output_entities

    entities = {**output_entities(config.input), "meas": "R1DL"}
    folder, stem = bids_place(config.out, entities, suffix="components", extension=".npz")
    return folder, stem.removesuffix("_components")


def _write_outputs(config, record: RunRecord, result, masker, outputs, base: str):
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
    sources = [
        dataset_relative(p, config.out) for p in (config.input, config.mask) if p is not None
    ]
    write_json_atomic(write("components.json"), _components_sidecar(config, summary, sources))
    write_json_atomic(write("mixing.json"), _mixing_sidecar(n_atoms, sources))
    return maps


def _components_sidecar(config, summary: dict, sources: list) -> dict:
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
        "Selection": config.selection,
        "Standardize": bool(config.standardize),
        "Tolerance": float(config.tol),
        "MaxIterations": int(config.max_iter),
        "RandomStarts": int(config.n_init),
        "RandomSeed": int(config.seed),
        "DataType": str(config.dtype),
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


def _check_space(config, outputs, S) -> None:
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
    r = resolve_sparsity(config.sparsity, shape[1])
    nbytes = 2 * 12 * config.n_components * r + 16 * shape[0] * config.n_components + 4 * 1024**2
    outputs.check_space(nbytes, what="the r1dl outputs")


def _parameters(config: R1dlConfig) -> dict:
    """Return the run's parameters, as its log and fingerprint record them."""
    return {"command": "r1dl", **vars(config)}


def run(args) -> int:
    """Run ``connscale r1dl`` from its parsed command line; return the exit status."""
    return run_r1dl(**keywords_from_args(args, R1dlConfig))


@entry(R1dlConfig)
def run_r1dl(config: R1dlConfig) -> int:
    """Learn the networks of INPUT and publish them; return 0.

    The learning resumes from the checkpoint in the staging folder; the
    components, mixing table, figure and log are published as one set
    (nothing is done when the folder already holds this run's complete
    output).

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale.io.bids import write_dataset_description

    configure_logging(config.verbose)
    folder, base = _place(config)
    prefix = f"{base}_components"
    inputs = [p for p in (config.input, config.mask) if p is not None]
    fingerprint = command_fingerprint(argparse.Namespace(**_parameters(config)), inputs)
    with output_set(config, folder, prefix, command="r1dl", fingerprint=fingerprint) as outputs:
        if outputs.complete():
            logger.info(
                "r1dl: %s already holds this run's complete output (same input "
                "content and parameters); nothing to do.",
                folder,
            )
            return 0
        record = RunRecord("r1dl", config.out, _parameters(config))
        with record.timer("load"):
            S, masker, background = _load_input(config)
        _check_space(config, outputs, S)
        with record.timer("r1dl"):
            result = _learn(config, S, outputs.staging / "r1dl_checkpoint")
        record.device = result.info.get("device", result.info.get("backend"))
        record.results["resumed_atoms"] = result.info["resumed_atoms"]
        with record.timer("write"):
            maps = _write_outputs(config, record, result, masker, outputs, base)
        with record.timer("figure"):
            _figure(record, result, maps, background, outputs, base)
        log = record.finish(prefix, outputs)
        outputs.commit()
    write_dataset_description(config.out)
    logger.info(
        "r1dl: %d networks, mean %.2f updates per atom; outputs in %s (%s)",
        result.dictionary.shape[1],
        result.mean_iterations,
        folder,
        log.name,
    )
    return 0


def _learn(config: R1dlConfig, S, checkpoint: Path):
    """Return :func:`connscale.networks.r1dl`'s result on S, as the config says."""
    from connscale.networks import r1dl

    return r1dl(
        S,
        config.n_components,
        config.sparsity,
        tol=config.tol,
        max_iter=config.max_iter,
        selection=config.selection,
        standardize=config.standardize,
        n_init=config.n_init,
        backend=config.backend,
        cluster=config.cluster,
        random_state=config.seed,
        block_size=config.block_size,
        **compute_options(config),
        storage=config.storage,
        checkpoint=checkpoint,
        verbose=config.verbose,
    )
