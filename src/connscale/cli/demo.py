"""``connscale demo``: the whole chain end to end on bundled, offline data.

The BIDS-App on a synthetic fMRIPrep tree (its report path printed
first), static FC (nitime's ROI series and scans, nibabel's scan, a simulated
voxel-scale scan out of core), dynamic FC (sparse and low-rank), region-pair
DFC, r1DL networks, LiFE on dipy's bundled dMRI + tractogram pair, and a
simulated cohort with a planted group difference: per-subject FC through the
cohort runner, classification, and GPU-DFC's Table IV comparison of actual
against low-rank reconstructed correlations. Every step writes its outputs,
log and report in its own folder; the demo's own ``report.html``
gathers the comparison and the timings.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np

from connscale import _fields
from connscale._params import Flag, add_arguments, entry, keywords_from_args, param
from connscale._validation import Interval
from connscale.cli import _types

# Simulated cohort: GPU-DFC §V.C used 200 ROIs, T = 175 and rank l = 58;
# this one is smaller so that the demo stays under five minutes on 2 cores.
_COHORT = {
    "n_subjects": 40,
    "n_regions": 40,
    "n_timepoints": 175,
    "effect_edges": 6,
    "effect_size": 0.5,
}
_COHORT_RANK = 12


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """The options of ``connscale demo``, each declared once (:mod:`connscale._params`)."""

    # Not _fields.out: optional here, with a default folder.
    out: Path = param(
        Path("demo_output"),
        constraints=["path"],
        doc="Output folder: each step writes its outputs, log and report in its own\n"
        "folder under it, the demo its overview ``report.html``.",
        flag=Flag(("--out",), type="output_folder", help="Output folder."),
    )
    # Not _fields.device: its help names the devices the demo is run on.
    device: str = param(
        "auto",
        fingerprint=False,
        constraints=["device"],
        doc="Where every step computes ('auto': CUDA when present, else the CPU).",
        flag=Flag(("--device",), type="device", help="'auto', 'cpu' or 'cuda'."),
    )
    n_voxels: int = param(
        20000,
        constraints=[Interval(Integral, 2, None, closed="left")],
        doc="Series of the simulated voxel-scale scan (computed out of core).",
        flag=Flag(("--n-voxels",), type=("integer", 2),
                  help="Size of the simulated voxel-scale scan."),
    )  # fmt: skip
    seed: int = _fields.seed(
        "Seed of every simulation and of the steps' random steps.",
        flag_help="Seed of every simulation.",
    )


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``demo`` command to ``subparsers`` and return its parser.

    Its options are derived from :class:`DemoConfig`'s fields.
    """
    parser = subparsers.add_parser(
        "demo",
        help="Run connscale end to end on bundled data (nitime, nibabel, dipy) and simulations.",
        description="Runs every capability on data that installs offline and says where "
        "the results and reports are.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(parser, DemoConfig, {None: parser}, _types)
    parser.set_defaults(func=run)
    return parser


class _Steps:
    """The demo's steps, each a ``connscale`` command run into its own folder.

    Every step is timed, and its reports added to the demo's run record.
    """

    def __init__(self, record, config: DemoConfig) -> None:
        self.record = record
        self.common = ["--device", config.device, "-q"]
        self.done: list[tuple[str, float, Path]] = []

    def add(self, title: str, seconds: float, folder: Path, key: str) -> None:
        """Record a finished step: its title, its seconds and its folder."""
        self.done.append((title, seconds, folder))
        self.record.timings[key] = round(seconds, 3)

    def __call__(self, title: str, argv: list[str], folder: Path) -> None:
        """Run ``connscale <argv> --out <folder>``; raise if it fails."""
        from connscale.cli.main import main

        print(f"\n== {title}", flush=True)
        start = time.perf_counter()
        status = main([*argv, "--out", str(folder)])
        if status:
            raise RuntimeError(f"demo step '{title}' failed with exit status {status}")
        self.add(title, time.perf_counter() - start, folder, key=folder.name)
        for report in sorted(folder.rglob("*report.html")):  # <prefix>_report.html or report.html
            self.record.add_output(report)


def run(args) -> int:
    """Run ``connscale demo`` from its parsed command line; return the exit status."""
    return run_demo(**keywords_from_args(args, DemoConfig))


@entry(DemoConfig)
def run_demo(config: DemoConfig) -> int:
    """Run every step in turn, then write the overview report; return 0.

    Each step is a ``connscale`` command (or the BIDS-App's two levels) run
    into its own folder under ``out``; the timings, the Table IV comparison
    and the steps' reports are gathered in ``out/report.html``.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    int
        The exit status, 0.
    """
    from connscale._compute import resolve_device
    from connscale.cli._common import RunRecord

    out: Path = config.out
    inputs = out / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    record = RunRecord("demo", out, vars(config))
    steps = _Steps(record, config)

    bids_report = _bids_step(steps, out, config)
    roi, fmri1, mask_path = _fc_steps(steps, out, inputs, config)
    _dynamic_steps(steps, out, (roi, fmri1, mask_path), config)
    _life_step(steps, out, config)
    cohort = _cohort_steps(steps, out, inputs, config)
    _table_iv_step(record, cohort, out, config)
    record.results["steps"] = {folder.name: title for title, _, folder in steps.done}
    record.device = str(resolve_device(config.device))
    record.finish("demo")

    print("\n== connscale demo finished")
    print(f"BIDS-App report: {bids_report.resolve()}")
    for title, seconds, folder in steps.done:
        print(f"  {seconds:7.2f} s  {folder.name:<14} {title}")
    print(f"Results, logs and reports of each step are in {out.resolve()}/<step>/")
    print(f"Overview report: {(out / 'report.html').resolve()}")
    return 0


def _bids_step(steps: _Steps, out: Path, config: DemoConfig) -> Path:
    """Run the BIDS-App step; return its group report."""
    print(
        "\n== BIDS-App on a synthetic fMRIPrep tree (6 subjects, nilearn's real confounds): "
        "denoised atlas FC, DFC and region pairs per run, then the group level",
        flush=True,
    )
    start = time.perf_counter()
    bids_report = _bids_app(out / "bids", config)
    steps.add(
        "BIDS-App: fMRIPrep -> denoised connectivity, group report",
        time.perf_counter() - start,
        out / "bids",
        key="bids",
    )
    steps.record.add_output(bids_report)
    print(f"BIDS-App report: {bids_report.resolve()}", flush=True)
    return bids_report


def _fc_steps(steps: _Steps, out: Path, inputs: Path, config: DemoConfig) -> tuple[str, str, Path]:
    """Run the static FC steps; return nitime's ROI series, its fmri1 scan and that scan's mask."""
    from connscale.datasets import (
        compute_brain_mask,
        load_nitime_fmri,
        nibabel_functional_path,
        nitime_fmri_path,
        nitime_roi_path,
        simulate_timeseries,
    )

    roi = str(nitime_roi_path())
    steps(
        "Static FC of nitime's 31 ROI series (250 time points)",
        ["fc", roi, *steps.common],
        out / "fc_roi",
    )

    mask_path = inputs / "fmri1_brainmask.nii.gz"
    compute_brain_mask(load_nitime_fmri(1)).to_filename(mask_path)
    fmri1 = str(nitime_fmri_path(1))
    steps(
        "Voxel-level FC of nitime's fmri1 scan (1,800 voxels), sparse |r| >= 0.5",
        ["fc", fmri1, "--mask", str(mask_path), "--threshold", "0.5", "--absolute", *steps.common],
        out / "fc_voxels",
    )
    steps(
        "Voxel-level FC of nibabel's functional.nii (upper triangle, HDF5)",
        ["fc", str(nibabel_functional_path()), "--kind", "triu", *steps.common],
        out / "fc_nibabel",
    )

    simulated = inputs / f"sub-sim_desc-{config.n_voxels}voxels_timeseries.npy"
    data, _ = simulate_timeseries(257, config.n_voxels, random_state=config.seed)
    np.save(simulated, data)
    steps(
        f"Voxel-scale FC of a simulated scan ({config.n_voxels:,} series x 257), out of core "
        "under a 1 GB memory limit into HDF5",
        ["fc", str(simulated), "--kind", "triu", "--memory-limit", "1GB", *steps.common],
        out / "fc_simulated",
    )
    return roi, fmri1, mask_path


def _dynamic_steps(
    steps: _Steps, out: Path, nitime: tuple[str, str, Path], config: DemoConfig
) -> None:
    """Run the dynamic FC, region-pair and r1DL steps on nitime's (ROI series, fmri1, mask)."""
    roi, fmri1, mask_path = nitime
    steps(
        "Dynamic FC of nitime's ROI series: windows of 40, step 5, sparse |r| >= 0.5",
        [
            "dfc",
            roi,
            "--window",
            "40",
            "--step",
            "5",
            "--kind",
            "sparse",
            "--threshold",
            "0.5",
            "--absolute",
            *steps.common,
        ],
        out / "dfc_sparse",
    )
    steps(
        "Dynamic FC of nitime's fmri1 voxels: windows of 20, low-rank (rank 5) with errors",
        [
            "dfc",
            fmri1,
            "--mask",
            str(mask_path),
            "--window",
            "20",
            "--step",
            "2",
            "--kind",
            "lowrank",
            "--rank",
            "5",
            "--error",
            "--seed",
            str(config.seed),
            *steps.common,
        ],
        out / "dfc_lowrank",
    )
    steps(
        "Region-pair DFC time courses of nitime's ROI series (w = 32, s = 4)",
        ["pairs", roi, "--window", "32", "--step", "4", *steps.common],
        out / "pairs",
    )
    steps(
        "r1DL functional networks of nitime's fmri1 scan (8 atoms, 10% of voxels each)",
        [
            "r1dl",
            fmri1,
            "--mask",
            str(mask_path),
            "--n-components",
            "8",
            "--sparsity",
            "0.1",
            "--seed",
            str(config.seed),
            *steps.common,
        ],
        out / "r1dl",
    )


def _life_step(steps: _Steps, out: Path, config: DemoConfig) -> None:
    """Run LiFE on dipy's small_25 scan and tractogram."""
    from dipy.data import get_fnames

    dwi, bvals, bvecs = (str(p) for p in get_fnames(name="small_25"))
    tractogram = str(get_fnames(name="small_25_streamlines"))
    steps(
        "LiFE on dipy's small_25 scan and tractogram, ReAl-LiFE λ sweep (cross-validated)",
        [
            "life",
            dwi,
            "--bvals",
            bvals,
            "--bvecs",
            bvecs,
            "--tractogram",
            tractogram,
            "--lambda-sweep",
            "0,0.001,0.01",
            "--seed",
            str(config.seed),
            *steps.common,
        ],
        out / "life",
    )


def _cohort_steps(steps: _Steps, out: Path, inputs: Path, config: DemoConfig):
    """Run the cohort runner and the classification on a simulated cohort; return the cohort."""
    from connscale.datasets import simulate_cohort

    cohort = simulate_cohort(**_COHORT, random_state=config.seed)
    written = cohort.write(inputs / "cohort")
    steps(
        f"Cohort of {_COHORT['n_subjects']} simulated subjects (planted group difference in "
        f"{_COHORT['effect_edges']} edges): per-subject FC with the cohort runner",
        [
            "cohort",
            *map(str, written["timeseries"]),
            "--job",
            "fc",
            "--kind",
            "dense",
            "--backend",
            "local",
            "--n-jobs",
            "2",
            "--device",
            config.device,
            "-q",
        ],
        out / "cohort_fc",
    )
    relmats = sorted(str(p) for p in (out / "cohort_fc").rglob("*_relmat.h5"))
    steps(
        "Patients vs controls from the cohort's connectomes (linear SVM, 5-fold x 3)",
        [
            "classify",
            *relmats,
            "--participants",
            str(written["participants"]),
            "--label",
            "group",
            "--positive",
            "patient",
            "--repeats",
            "3",
            "--seed",
            str(config.seed),
        ],
        out / "classify",
    )
    return cohort


def _table_iv_step(record, cohort, out: Path, config: DemoConfig) -> None:
    """Compare classification from actual and low-rank reconstructed correlations."""
    from connscale.report.plots import plot_metric_comparison

    print(
        "\n== GPU-DFC Table IV: classification from actual vs low-rank reconstructed correlations",
        flush=True,
    )
    with record.timer("table_iv"):
        comparison = _table_iv(cohort, config, out / "table_iv")
    record.results["table_iv"] = {
        name: {metric: result[metric] for metric in ("accuracy", "sensitivity", "specificity")}
        for name, result in comparison.items()
    }
    record.add_figure(
        plot_metric_comparison(
            comparison,
            out / "table_iv" / "table_iv_comparison.png",
            title=f"Actual vs rank-{_COHORT_RANK} reconstructed correlations (MLP)",
        )
    )
    for name, result in comparison.items():
        acc = result["accuracy"]
        print(
            f"  {name:>13}: accuracy {acc['mean']:.2f} [{acc['ci_low']:.2f}, {acc['ci_high']:.2f}]"
        )


def _bids_app(folder: Path, config: DemoConfig) -> Path:
    """``connscale bids`` participant and group levels on a synthetic fMRIPrep tree."""
    from connscale.cli.main import main
    from connscale.datasets.fmriprep import make_fmriprep_tree

    tree = make_fmriprep_tree(folder / "inputs", n_subjects=6, random_state=config.seed)
    output = folder / "connscale"
    # 'none': nilearn's presets regress 30 or more confounds, which these 30-volume runs
    # cannot support (the participant level refuses them below --min-dof).
    status = main(
        [
            "bids",
            str(tree.derivatives),
            str(output),
            "participant",
            "--atlas",
            str(tree.atlas),
            "--atlas-name",
            "Slab4",
            "--atlas-labels",
            str(tree.atlas_labels),
            "--denoise",
            "none",
            "--measures",
            "fc,timeseries,dfc,pairs",
            "--window-length",
            "10",
            "--step",
            "5",
            "--backend",
            "serial",
            "--device",
            config.device,
            "-q",
        ]
    )
    if status:
        raise RuntimeError(f"demo step 'bids participant' failed with exit status {status}")
    status = main(
        [
            "bids",
            str(tree.derivatives),
            str(output),
            "group",
            "--participants",
            str(tree.participants),
            "--target",
            "group",
            "--folds",
            "3",
            "--repeats",
            "2",
            "-q",
        ]
    )
    if status:
        raise RuntimeError(f"demo step 'bids group' failed with exit status {status}")
    return next((output / "group").glob("*_report.html"))


def _table_iv(cohort, config: DemoConfig, folder: Path) -> dict:
    """Cross-validate an MLP on actual and on low-rank reconstructed correlations."""
    from connscale.classify import compare_features
    from connscale.fc import dynamic_correlation, matrix_to_vec

    folder.mkdir(parents=True, exist_ok=True)
    actual, reconstructed = [], []
    for series in cohort.timeseries:
        whole = dynamic_correlation(
            series,
            series.shape[0],
            kind="lowrank",
            rank=_COHORT_RANK,
            random_state=config.seed,
            device=config.device,
        )
        actual.append(matrix_to_vec(np.corrcoef(series, rowvar=False)))
        reconstructed.append(matrix_to_vec(whole.to_dense(0)))
    features = {
        "actual": np.vstack(actual),
        f"reconstructed (l={_COHORT_RANK})": np.vstack(reconstructed),
    }
    return compare_features(
        features, cohort.y, model="mlp", folds=5, repeats=2, random_state=config.seed
    )
