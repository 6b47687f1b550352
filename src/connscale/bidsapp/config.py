"""The BIDS-App's parameters, each declared once (:mod:`connscale._params`).

:class:`ParticipantConfig` is what :func:`connscale.bidsapp.participant.run_participant`
takes and what every run task receives (picklable; paths absolute once the
entry resolved them); :class:`GroupConfig` is what
:func:`connscale.bidsapp.group.run_group` takes. Each field holds its
default, its constraints, its documentation and its ``connscale bids`` flag:
the entries' signatures, checks and docstrings and the command's options
are derived from these fields. An option both levels read (``--atlas-name``,
``--denoise``, ``--device``, ``--overwrite``) is declared once, by the
participant level, and its flag reused by the group level's field. The
fields of the options other commands share too (``--device``, ``--dtype``,
``--memory-limit``, ``-v``/``-q``, ``--wait``, ``--overwrite``,
``--precision``) are made by :mod:`connscale._fields`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, asdict, dataclass
from numbers import Integral, Real

from connscale import _fields
from connscale._choices import (
    DEFAULT_THRESHOLD,
    GROUP_FEATURES,
    MEASURES,
    MOTION_FILTERS,
    OUTPUT_SPELLINGS,
    OUTPUT_TYPES,
    PARCELLATED_MAPS,
    REGION_MEASURES,
    STATE_METRICS,
    STRATEGIES,
    VOXEL_MEASURES,
)
from connscale._params import Flag, declared, fingerprint_fields, param
from connscale._validation import MIN_WINDOW_LENGTH, Interval, SequenceOf, StrOptions
from connscale.engines import ENGINES
from connscale.nuisance import StrategyOptions, strategy_fingerprint

__all__ = [
    "FILE_FORMATS",
    "MEASURE_ALIASES",
    "TEMPORAL_FIELDS",
    "WINDOWED",
    "GroupConfig",
    "ParticipantConfig",
    "participant_measures",
]

#: The run formats of ``file_format``: volumes or grayordinates.
FILE_FORMATS = ("nifti", "cifti")

#: The region measures computed over sliding windows.
WINDOWED = ("dfc", "pairs")

#: Measures of ``--measures`` that stand for participant-level ones:
#: ``states`` writes each run's DFC, which the group level clusters into states.
MEASURE_ALIASES = {"states": "dfc"}

#: The fields of the temporal steps (:mod:`connscale.bidsapp.cleaning`): they change every set.
TEMPORAL_FIELDS = (
    "bpf_order",
    "dummy_scans",
    "motion_filter_type",
    "band_stop_min",
    "band_stop_max",
    "motion_filter_order",
    "head_radius",
    "fd_thresh",
    "output_type",
)

#: The argument groups of ``connscale bids``, in the order ``--help`` shows them.
ATLAS, FILTERS, GROUP, EXECUTION, COMPUTATION = (
    "atlas and denoising",
    "filters",
    "group level",
    "execution",
    "computation",
)

_PARTICIPANT = ("participant",)
_POSITIVE = (Interval(Real, 0, None, closed="neither"), None)
_COUNT = Interval(Integral, 1, None, closed="left")
_CORRELATION = Interval(Real, -1, 1, closed="both")


def participant_measures(text: str) -> list[str]:
    """Parse a ``--measures`` list: aliases replaced, duplicates dropped."""
    measures = [MEASURE_ALIASES.get(m.strip(), m.strip()) for m in text.split(",") if m.strip()]
    return list(dict.fromkeys(measures))


def _reports(no_reports: bool) -> bool:
    """Return ``reports`` of ``--no-reports``."""
    return not no_reports


@dataclass(frozen=True)
class ParticipantConfig:
    """Every parameter of the participant level, as each run task needs it."""

    derivatives: str = param(
        positional=True,
        fingerprint=False,
        constraints=["path"],
        doc="fMRIPrep's output folder.",
        flag=Flag(("derivatives",), type="input_folder", metavar="DERIVATIVES",
                  levels=("participant",),
                  help="fMRIPrep output folder."),
    )  # fmt: skip
    output: str = param(
        positional=True,
        fingerprint=False,
        constraints=["path"],
        doc="The connscale derivatives folder (``dataset_description.json`` at\n"
        "its root, ``sub-*/[ses-*/]func/`` per run, ``logs/``).",
        flag=Flag(("output",), type="output_folder", metavar="OUTPUT",
                  levels=("participant", "group"), help="Output folder."),
    )  # fmt: skip
    atlas: str = param(
        constraints=["path"],
        doc="3-D integer labels image (0 = background), resampled to each run's\n"
        "grid by nearest neighbour when needed (recorded in the sidecars'\n"
        "``AtlasResampling`` and the run's report), or 4-D probabilistic maps\n"
        "(one map per volume, resampled linearly; region series as nilearn's\n"
        "``NiftiMapsMasker``: :func:`connscale.denoise.map_signals`). Checked\n"
        "once before any run (:func:`connscale.bidsapp.atlas.check_atlas`).\n"
        "Or the name of a TemplateFlow atlas (``Schaefer2018``, ``DiFuMo``:\n"
        "letters and digits, not an existing file), taken in each run's space\n"
        "and resolution with its ``.tsv`` of region names\n"
        "(:mod:`connscale.bidsapp.named_atlas`; its first use downloads it into\n"
        "``TEMPLATEFLOW_HOME``). CIFTI runs: a ``.dlabel.nii`` (its first label\n"
        "map) on the runs' brain model.",
        flag=Flag(("--atlas",), group=ATLAS, type="atlas_input", levels=("participant",),
                  help="participant: 3-D labels NIfTI (0 = background) or 4-D probabilistic "
                  "maps, or a TemplateFlow atlas name (e.g. Schaefer2018, DiFuMo; downloaded "
                  "into TEMPLATEFLOW_HOME on first use) taken in each run's space; CIFTI runs: "
                  "a .dlabel.nii on their grayordinates."),
    )  # fmt: skip
    atlas_name: str = param(
        constraints=[str],
        doc="The ``seg-`` entity of the outputs (letters and digits).",
        flag=Flag(("--atlas-name",), group=ATLAS, type="bids_label",
                  levels=("participant", "group"),
                  help="The seg- entity of the outputs (letters and digits); group: which "
                  "atlas to read."),
    )  # fmt: skip
    _: KW_ONLY
    atlas_space: str | None = param(
        None,
        constraints=[str, None],
        doc="The atlas's space (``MNI152NLin2009cAsym``, ``T1w``...; ``native``\n"
        "for runs without a ``space-`` entity); None: the ``space-`` or\n"
        "``tpl-`` entity of its file name, and without one the call is\n"
        "refused. A run in another space is refused (recorded, naming both\n"
        "spaces); the others go on.",
        flag=Flag(("--atlas-space",), group=ATLAS, type="bids_label", metavar="SPACE",
                  levels=("participant",),
                  help="participant: the atlas's space (e.g. MNI152NLin2009cAsym, T1w; native "
                  "for runs without a space- entity); default: the space- or tpl- entity of its "
                  "file name. Runs in another space are refused."),
    )  # fmt: skip
    atlas_desc: str | None = param(
        None,
        fingerprint=False,  # the file it selects is the run's atlas, fingerprinted
        constraints=[str, None],
        doc="The ``desc-`` entity of a TemplateFlow atlas named by ``atlas``\n"
        "(``400Parcels7Networks``, ``256dimensions``); needed when it has\n"
        "several versions.",
        flag=Flag(("--atlas-desc",), group=ATLAS, type="bids_label", metavar="DESC",
                  levels=("participant",),
                  help="participant: the desc- of a TemplateFlow atlas named by --atlas "
                  "(e.g. 400Parcels7Networks)."),
    )  # fmt: skip
    atlas_labels: str | None = param(
        None,
        constraints=["path", None],
        doc="Region names (BIDS ``dseg.tsv``: ``index``, ``name``), used as\n"
        "headers; without it the headers are ``label-<value>``.",
        flag=Flag(("--atlas-labels",), group=ATLAS, type="input_file",
                  levels=("participant",),
                  help="Region names, a BIDS dseg.tsv (index, name): matrix headers."),
    )  # fmt: skip
    strategy: str = param(
        "simple",
        constraints=[StrategyOptions()],
        doc_type="str or path",
        doc="The denoising strategy (its label is the ``desc-`` entity,\n"
        ":func:`connscale.io.bids.strategy_desc`): one of nilearn's presets\n"
        "(``simple``, ``scrubbing``, ``compcor``, ``ica_aroma``), ``none``,\n"
        "one of XCP-D's nuisance sets (``24P``, ``27P``, ``36P``,\n"
        "``acompcor``, ``acompcor_gsr``, ``aroma``, ``aroma_gsr``,\n"
        "``gsr_only``) or a custom nuisance file (YAML or JSON: columns by\n"
        "name or pattern, as XCP-D's ``--nuisance-regressors`` file); see\n"
        ":mod:`connscale.nuisance`.",
        flag=Flag(("--denoise", "--nuisance-regressors"), group=ATLAS, type="nuisance",
                  default=None, metavar="STRATEGY",
                  levels=("participant", "group"),
                  help=f"participant: denoising strategy, one of {', '.join(STRATEGIES)} "
                  "(nilearn's presets, none, XCP-D's nuisance sets), or a .yml/.yaml/.json file "
                  "of confounds columns (names, ^patterns, _derivative1/_power2 expansions; "
                  "XCP-D's --nuisance-regressors format); group: which strategy to read."),
    )  # fmt: skip
    measures: tuple = param(
        ("fc", "timeseries"),
        constraints=[SequenceOf(StrOptions(MEASURES))],
        doc_type="list or tuple of {" + ", ".join(repr(m) for m in MEASURES) + "}",
        doc="Atlas level: ``fc`` (``_relmat.tsv``), ``timeseries``, ``dfc``\n"
        "(sliding-window correlation of all region pairs, ``_dfc.h5``) and\n"
        "``pairs`` (each pair's windowed course and summaries, ``_pairs.h5``);\n"
        "voxel level: ``voxelfc`` (every pair of in-mask voxels,\n"
        "``_relmat.h5`` with the mask and the voxel coordinates), ``maps``\n"
        "(degree, eigenvector centrality and global correlation maps,\n"
        "``_boldmap.nii.gz``) and ``networks`` (r1DL spatial maps and time\n"
        "courses, ``_components.nii.gz`` and ``_mixing.tsv``); see\n"
        ":mod:`connscale.bidsapp.voxel_measures`; ``alff`` (ALFF and fALFF) and\n"
        "``reho`` (ReHo) maps, XCP-D's, with their parcel means in the atlas-level\n"
        "set (:mod:`connscale.bidsapp.local_maps`).",
        flag=Flag(("--measures",), group=ATLAS, convert=participant_measures,
                  levels=("participant", "group"),
                  help=f"Comma-separated, among {', '.join(MEASURES)}: fc and timeseries "
                  "(atlas level, TSV), dfc (sliding window FC of all region pairs) "
                  "and pairs (each region pair's windowed course and summaries), "
                  "HDF5; voxelfc: the voxel level, every pair of voxels in the mask "
                  "(_relmat.h5 with the mask and voxel coordinates); maps: degree "
                  "(binary, weighted), eigenvector centrality and global correlation "
                  "maps of the voxels (_boldmap.nii.gz); networks: r1DL spatial maps "
                  "(_components.nii.gz) and time courses (_mixing.tsv); alff (ALFF, fALFF) "
                  "and reho (ReHo): XCP-D's maps, and their parcel means beside the region "
                  "series. states: participant, "
                  "an alias of dfc; group, requires every run's DFC and clusters it into "
                  "--states DFC states (done anyway when every run has DFC)."),
    )  # fmt: skip
    window_length: int | None = param(
        None,
        constraints=[Interval(Integral, MIN_WINDOW_LENGTH, None, closed="left"), None],
        doc="``dfc`` and ``pairs``: the sliding windows' length in kept volumes\n"
        "(required for them).",
        flag=Flag(("--window-length",), group=ATLAS, type="window_length",
                  levels=("participant",),
                  help="dfc, pairs: window length in (kept) volumes."),
    )  # fmt: skip
    step: int = param(
        1,
        constraints=[_COUNT],
        doc="``dfc`` and ``pairs``: the windows' step in kept volumes.",
        flag=Flag(("--step",), group=ATLAS, type="count", levels=("participant",),
                  help="dfc, pairs: window step (volumes)."),
    )  # fmt: skip
    pairs_threshold: float = param(
        0.5,
        constraints=[_CORRELATION],
        doc="``pairs``: the threshold of the fraction-above summary.",
        flag=Flag(("--pairs-threshold",), group=ATLAS, type="correlation",
                  levels=("participant",),
                  help="pairs: threshold of the fraction-of-windows-above summary."),
    )  # fmt: skip
    degree_thresholds: tuple = param(
        (DEFAULT_THRESHOLD,),
        constraints=[SequenceOf(_CORRELATION)],
        doc="``maps``: binary and weighted degree count the other voxels with\n"
        "r above each threshold (one pass for all).",
        flag=Flag(("--degree-thresholds",), group=ATLAS, type=("numbers", "correlation"),
                  metavar="R[,R...]", levels=("participant",),
                  help="maps: degree centrality counts the voxels with r above each "
                  "threshold."),
    )  # fmt: skip
    precision: str = _fields.precision(
        "``maps``: the arithmetic of the degree's thresholded correlations on\n"
        "CUDA (see :func:`connscale.degree_centrality`).",
        flag_help="maps: arithmetic of the degree's thresholded correlations on CUDA "
        "(exact: TF32 tensor cores with the pairs near a threshold confirmed; the "
        "CPU computes in fp32).",
        group=ATLAS,
        levels=("participant",),
    )
    n_atoms: int = param(
        10,
        constraints=[_COUNT],
        doc="``networks``: the number of r1DL networks.",
        flag=Flag(("--n-atoms",), group=ATLAS, type="count", levels=("participant",),
                  help="networks: number of r1DL networks."),
    )  # fmt: skip
    network_sparsity: int | float = param(
        0.07,
        constraints=[_COUNT, Interval(Real, 0, 1, closed="right")],
        doc="``networks``: voxels per network, a count or a fraction of the\n"
        "in-mask voxels (``connscale r1dl --sparsity``).",
        flag=Flag(("--sparsity",), group=ATLAS, type="sparsity", levels=("participant",),
                  help="networks: voxels per network, a count (e.g. 500) or a fraction "
                  "(e.g. 0.07)."),
    )  # fmt: skip
    surfaces: tuple | None = param(
        None,
        fingerprint=False,
        constraints=[list, tuple, None],
        doc_type="pair of paths or None",
        doc="CIFTI runs' reports: the left and right cortical surface meshes\n"
        "(GIFTI, e.g. fs_LR 32k ``*.midthickness.surf.gii``) their maps are\n"
        "drawn on (nilearn's ``plot_surf_stat_map``); None: a flat\n"
        "per-structure view (:mod:`connscale.report.cifti`). The reports say which.",
        flag=Flag(("--surfaces",), group=ATLAS, nargs=2, type="input_file",
                  metavar="SURF_GII", levels=("participant",),
                  help="CIFTI runs' reports: left and right surface meshes (GIFTI, e.g. fs_LR "
                  "32k midthickness) to draw the maps on; default: a flat per-structure view."),
    )  # fmt: skip
    write_denoised: bool = param(
        False,
        fingerprint=False,
        constraints=["boolean"],
        doc="Also publish the denoised BOLD (``<source>_desc-<strategy>_bold.nii.gz``,\n"
        "through the run's mask, 0 outside; on CIFTI runs the grayordinate series,\n"
        "``_bold.dtseries.nii``): the kept volumes cleaned and standardized as the\n"
        "regions are.",
        flag=Flag(("--write-denoised",), group=ATLAS, action="store_true", default=False,
                  levels=("participant",),
                  help="Also write the denoised BOLD (desc-<STRATEGY>_bold.nii.gz through the "
                  "mask; .dtseries.nii for CIFTI runs)."),
    )  # fmt: skip
    min_coverage: float = param(
        0.5,
        constraints=[Interval(Real, 0, 1, closed="both")],
        doc="Atlas-level measures: a parcel with less than this fraction of its atlas\n"
        "voxels inside the run's mask (of its grayordinates used, on CIFTI runs) is\n"
        "NaN in the region series and the connectome, as XCP-D's ``--min-coverage``;\n"
        "each parcel's coverage is written beside them\n"
        "(:mod:`connscale.bidsapp.coverage`).",
        flag=Flag(("--min-coverage",), group=ATLAS, type=("number", 0.0, 1.0),
                  levels=("participant",),
                  help="Parcels with less of their voxels (grayordinates) inside the run's "
                  "mask are NaN in the region series and relmats (XCP-D's rule)."),
    )  # fmt: skip
    output_spelling: str = param(
        "giga",
        constraints=[StrOptions(set(OUTPUT_SPELLINGS))],
        doc="The output names: ``'giga'`` (giga-connectome's entities, the\n"
        "strategy in ``desc-``) or ``'xcpd'`` (XCP-D's names: ``atlas-``,\n"
        "``stat-pearsoncorrelation_relmat``, ``stat-mean_timeseries``,\n"
        "``desc-denoised_bold``, no strategy; one strategy per output folder).\n"
        "See :mod:`connscale.bidsapp.xcpd_names`.",
        flag=Flag(("--output-spelling",), group=ATLAS, choices=OUTPUT_SPELLINGS,
                  levels=("participant",),
                  help="Output names: connscale's (giga-connectome's entities) or XCP-D's, so "
                  "that scripts written for XCP-D outputs read them."),
    )  # fmt: skip
    low_pass: float | None = param(
        None,
        constraints=_POSITIVE,
        doc="Low-pass cutoff (Hz), as :func:`nilearn.signal.clean` (``t_r``\nfrom each run); "
        "below the runs' Nyquist frequency (else the run fails).",
        flag=Flag(("--low-pass", "--upper-bpf"), group=ATLAS, type="positive", metavar="HZ",
                  levels=("participant",),
                  help="Low-pass cutoff (Hz) of the Butterworth filter, below Nyquist "
                  "(XCP-D's default: 0.08)."),
    )  # fmt: skip
    high_pass: float | None = param(
        None,
        constraints=_POSITIVE,
        doc="High-pass cutoff (Hz), as :func:`nilearn.signal.clean`.",
        flag=Flag(("--high-pass", "--lower-bpf"), group=ATLAS, type="positive", metavar="HZ",
                  levels=("participant",),
                  help="High-pass cutoff (Hz), Butterworth (the presets already regress "
                  "fMRIPrep's cosine drifts; XCP-D's default: 0.01)."),
    )  # fmt: skip
    bpf_order: int | None = param(
        None,
        constraints=[_COUNT, None],
        doc="The Butterworth filter's order with XCP-D's cleaning\n"
        "(:func:`connscale.denoise.xcpd_operator`). Giving it cleans with\n"
        "XCP-D's steps, as ``fd_thresh`` does; None: nilearn's\n"
        ":func:`~nilearn.signal.clean` (order 5), or XCP-D's order 2 when\n"
        "``fd_thresh`` or ``output_type='interpolated'`` asks for XCP-D's cleaning.",
        flag=Flag(("--bpf-order",), group=ATLAS, type="count", levels=("participant",),
                  help="Butterworth order of XCP-D's band-pass; giving it cleans with XCP-D's "
                  "steps. Default: nilearn's clean (order 5), or XCP-D's 2 when --fd-thresh or "
                  "--output-type interpolated selects XCP-D's cleaning."),
    )  # fmt: skip
    strategy_params: dict | None = param(
        None,
        constraints=[dict, None],
        doc="Extra parameters of ``load_confounds_strategy`` (e.g.\n"
        "``{'fd_threshold': mm, 'scrub': 0}`` of 'scrubbing'; ``fd_thresh`` gives\n"
        "'scrubbing' its ``fd_threshold``).",
    )
    dummy_scans: int | str = param(
        0,
        constraints=[Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        doc_type="int or 'auto'",
        doc="Volumes dropped at the start of each run before any step (XCP-D's\n"
        "``--dummy-scans``, default 0 there too); 'auto': one past the last\n"
        "volume fMRIPrep's ``non_steady_state_outlier_XX`` columns flag, 0\n"
        "without such columns (:func:`connscale.motion.dummy_scans`). nilearn's\n"
        "presets already leave those volumes out of the sample mask.",
        flag=Flag(("--dummy-scans",), group=ATLAS, type="dummy_scans", metavar="N|auto",
                  levels=("participant",),
                  help="Volumes to drop at the start of each run (auto: fMRIPrep's "
                  "non_steady_state_outlier_XX columns, 0 without them); XCP-D's default: 0."),
    )  # fmt: skip
    motion_filter_type: str | None = param(
        None,
        constraints=[StrOptions(set(MOTION_FILTERS)), None],
        doc="Filter of the six motion parameters before FD\n"
        "(:func:`connscale.motion.filter_motion`): 'lp' (low-pass at\n"
        "``band_stop_min``) or 'notch' (``band_stop_min`` to ``band_stop_max``);\n"
        "None: none (XCP-D's default too).",
        flag=Flag(("--motion-filter-type",), group=ATLAS, choices=MOTION_FILTERS,
                  levels=("participant",),
                  help="Filter respiration out of the motion parameters before FD: lp or "
                  "notch (XCP-D's default: none)."),
    )  # fmt: skip
    band_stop_min: float | None = param(
        None,
        constraints=_POSITIVE,
        doc="The motion filter's stop band's lower edge (breaths per minute);\n"
        "'lp': its cutoff.",
        flag=Flag(("--band-stop-min",), group=ATLAS, type="positive", metavar="BPM",
                  levels=("participant",),
                  help="Motion filter: lower edge of the stop band (breaths per minute); lp: the "
                  "cutoff (e.g. 6, Gratton et al. 2020)."),
    )  # fmt: skip
    band_stop_max: float | None = param(
        None,
        constraints=_POSITIVE,
        doc="The notch motion filter's stop band's upper edge (breaths per minute).",
        flag=Flag(("--band-stop-max",), group=ATLAS, type="positive", metavar="BPM",
                  levels=("participant",),
                  help="Notch motion filter: upper edge of the stop band (breaths per minute)."),
    )  # fmt: skip
    motion_filter_order: int = param(
        4,
        constraints=[_COUNT],
        doc="XCP-D's ``--motion-filter-order`` (default 4 there too): twice the\n"
        "low-pass Butterworth order, four times the notch passes.",
        flag=Flag(("--motion-filter-order",), group=ATLAS, type="count",
                  levels=("participant",),
                  help="Motion filter order: lp, twice the Butterworth order; notch, four times "
                  "the passes (XCP-D's default: 4)."),
    )  # fmt: skip
    head_radius: float = param(
        50.0,
        constraints=[Interval(Real, 0, None, closed="neither")],
        doc="Head radius (mm) turning rotations into displacements in the FD\n"
        "(XCP-D's default 50: adults; 35 for infants). FD is recomputed from\n"
        "the six motion parameters (:func:`connscale.motion.framewise_displacement`)\n"
        "with ``fd_thresh``, a motion filter or another radius; otherwise it is\n"
        "fMRIPrep's ``framewise_displacement`` column (50 mm).",
        flag=Flag(("--head-radius",), group=ATLAS, type="positive", metavar="MM",
                  levels=("participant",),
                  help="Head radius (mm) of the framewise displacement, recomputed from the "
                  "motion parameters (XCP-D's default: 50; 35 for infants)."),
    )  # fmt: skip
    fd_thresh: float | None = param(
        None,
        constraints=_POSITIVE,
        doc="Censor the volumes whose FD (from the filtered motion, with\n"
        "``head_radius``) is above it (mm), for every nuisance set, with\n"
        "XCP-D's cleaning (:func:`connscale.denoise.xcpd_operator`); also\n"
        "'scrubbing''s ``fd_threshold``. None: no censoring (XCP-D's default\n"
        "depends on its mode: 0.3 or none).",
        flag=Flag(("--fd-thresh", "--fd-threshold"), group=ATLAS, type="positive",
                  metavar="MM", levels=("participant",),
                  help="Censor volumes with framewise displacement above it (mm), any "
                  "--denoise, with XCP-D's cleaning; scrubbing: also nilearn's fd_threshold. "
                  "Default: no censoring (XCP-D's: 0.3 or none, by mode)."),
    )  # fmt: skip
    min_time: float = param(
        240.0,
        fingerprint=False,
        constraints=[Interval(Real, 0, None, closed="left")],
        doc="With ``fd_thresh``: the seconds of kept volumes a run must keep\n"
        "(XCP-D's default 240); fewer and the run is refused (status\n"
        "``refused``, recorded with the numbers); longer than the run (after\n"
        "its dummy scans), it fails. 0: no minimum.",
        flag=Flag(("--min-time",), group=ATLAS, type=("number", 0.0), metavar="SECONDS",
                  levels=("participant",),
                  help="With --fd-thresh: seconds of low-motion volumes a run must keep, else it "
                  "is refused; 0: no minimum (XCP-D's default: 240)."),
    )  # fmt: skip
    output_type: str = param(
        "censored",
        constraints=[StrOptions(set(OUTPUT_TYPES))],
        doc="The published series ('timeseries'): the kept volumes\n"
        "('censored'), or every volume after the dummy scans, the censored\n"
        "ones interpolated ('interpolated', with XCP-D's cleaning). The\n"
        "correlations use the kept volumes either way.",
        flag=Flag(("--output-type",), group=ATLAS, choices=OUTPUT_TYPES,
                  levels=("participant",),
                  help="Series published: censored (kept volumes) or interpolated (every volume "
                  "after the dummy scans, censored ones interpolated); correlations use the kept "
                  "volumes. XCP-D's default depends on its mode."),
    )  # fmt: skip
    despike: bool = param(
        False,
        fingerprint=False,  # in the sets' parameters when on (the others' fingerprints stay)
        constraints=["boolean"],
        doc="Despike the voxel series before denoising, as XCP-D's ``--despike``\n"
        "(AFNI ``3dDespike -NEW -nomask``: :func:`connscale.despike.despike`, on\n"
        "the device); the region series are then the means of the despiked\n"
        "voxels, so the voxels are read.",
        flag=Flag(("--despike",), group=ATLAS, action="store_true", default=False,
                  levels=("participant",),
                  help="Despike the BOLD before denoising (AFNI 3dDespike -NEW, as XCP-D)."),
    )  # fmt: skip
    min_dof: float = param(
        10.0,
        fingerprint=False,
        constraints=[Interval(Real, 0, None, closed="left")],
        doc="Fewest residual degrees of freedom a run may keep\n"
        "(:func:`connscale.denoise.residual_dof`: kept volumes minus the\n"
        "mean, the trend, the independent confounds and what the filter\n"
        "removes); a run below it is refused before it is cleaned (status\n"
        "``refused``, the numbers in its record and the errors table). Why\n"
        "10: the correlation of two unrelated series with ``d`` degrees of\n"
        "freedom has standard deviation about ``1/sqrt(d)``, so at ``d = 10``\n"
        "chance alone already reaches ``|r| = 0.6`` (two standard deviations),\n"
        "and at ``d`` near 0 the cleaned series are rounding noise (|r| near 1\n"
        "everywhere). It is a floor against degenerate runs (12 of 120 volumes\n"
        "kept against 36 regressors), not a recommendation: connectomes want\n"
        "far more (minutes of data after censoring).",
        flag=Flag(("--min-dof",), group=ATLAS, type=("number", 0.0), levels=("participant",),
                  help="participant: a run with fewer residual degrees of freedom (kept "
                  "volumes minus the mean, trend, confounds and filter) is refused, not "
                  "cleaned, and recorded in logs/participant_*_errors.tsv with its numbers."),
    )  # fmt: skip
    t_r: float | None = param(
        None,
        fingerprint=False,
        constraints=_POSITIVE,
        doc="Repetition time (s) of the runs whose sidecar has none\n"
        "(:func:`connscale.bidsapp.find_runs`).",
        flag=Flag(("--t-r",), group=ATLAS, type="positive", levels=("participant",),
                  help="Repetition time (s) for runs whose sidecar has none."),
    )  # fmt: skip
    detrend: bool = param(
        True,
        constraints=["boolean"],
        doc="Remove the linear trend, as :func:`nilearn.signal.clean`.",
    )
    standardize: str | None = param(
        "zscore_sample",
        doc_type="str or None",
        doc="Standardization of the cleaned series, as :func:`nilearn.signal.clean`.",
    )
    participant_label: tuple | None = param(
        None,
        fingerprint=False,
        doc_type="sequence of str or None",
        doc="The participants to process (without ``sub-``); None: all\n"
        "(:func:`connscale.bidsapp.find_runs`).",
        flag=Flag(("--participant-label",), group=FILTERS, nargs="+", metavar="LABEL",
                  default=None, levels=("participant",)),
    )  # fmt: skip
    participant_label_file: str | None = param(
        None,
        fingerprint=False,
        constraints=["path", None],
        doc="A participants file instead of ``participant_label``: BIDS\n"
        "``participants.tsv`` (its ``participant_id`` column) or one label a\n"
        "line; the participant at ``array_index``, or all of them\n"
        "(:func:`connscale.bidsapp.selection.select_participants`).",
        flag=Flag(("--participant-label-file",), group=FILTERS, type="input_file",
                  metavar="FILE", levels=("participant",),
                  help="participants.tsv (participant_id) or one label a line: the "
                  "participant at --array-index, else all of them."),
    )  # fmt: skip
    array_index: int | None = param(
        None,
        fingerprint=False,
        constraints=[Interval(Integral, 0, None, closed="left"), None],
        doc="Which participant of ``participant_label_file`` (from 0, in the\n"
        "file's order); None: ``$SLURM_ARRAY_TASK_ID`` when set (an array\n"
        "job's task), else all of the file's participants.",
        flag=Flag(("--array-index",), group=FILTERS, type="natural", metavar="N",
                  levels=("participant",),
                  help="The participant of --participant-label-file to process, counted "
                  "from 0; without it, $SLURM_ARRAY_TASK_ID when set (sbatch "
                  "--array=0-<n-1>)."),
    )  # fmt: skip
    participants_per_task: int = param(
        1,
        fingerprint=False,
        constraints=[_COUNT],
        doc="Participants of ``participant_label_file`` an array task takes:\n"
        "task i the participants i·K to i·K + K − 1 (the last one fewer), so\n"
        "that each call's start (the interpreter, the imports, the readers)\n"
        "is paid once for K participants.",
        flag=Flag(("--participants-per-task",), group=FILTERS, type="natural", metavar="K",
                  levels=("participant",),
                  help="With --participant-label-file and an array index: task i "
                  "processes participants i*K to i*K+K-1 (sbatch --array=0-<ceil(n/K)-1>)."),
    )  # fmt: skip
    session_label: tuple | None = param(
        None,
        fingerprint=False,
        doc_type="sequence of str or None",
        doc="The sessions to process (without ``ses-``); None: all.",
        flag=Flag(("--session-label",), group=FILTERS, nargs="+", metavar="LABEL",
                  default=None, levels=("participant",)),
    )  # fmt: skip
    task: tuple | None = param(
        None,
        fingerprint=False,
        doc_type="sequence of str or None",
        doc="The tasks to process; None: all.",
        flag=Flag(("--task",), group=FILTERS, nargs="+", default=None,
                  levels=("participant",)),
    )  # fmt: skip
    run: tuple | None = param(
        None,
        fingerprint=False,
        doc_type="sequence of str or None",
        doc="The runs to process; None: all.",
        flag=Flag(("--run",), group=FILTERS, nargs="+", default=None, levels=("participant",)),
    )
    space: tuple | None = param(
        None,
        fingerprint=False,
        doc_type="sequence of str or None",
        doc="The spaces of the runs to process (``native``: runs without a\n"
        "``space-`` entity); None: all.",
        flag=Flag(("--space",), group=FILTERS, nargs="+", default=None,
                  levels=("participant",)),
    )  # fmt: skip
    den: tuple | None = param(
        None,
        fingerprint=False,
        constraints=[str, list, tuple, None],
        doc_type="str, sequence of str or None",
        doc="The densities (``den-`` entity, e.g. ``91k``) of the CIFTI runs to\n"
        "process; None: all. Giving it reads CIFTI runs (``file_format``).",
        flag=Flag(("--den",), group=FILTERS, nargs="+", default=None, levels=("participant",),
                  help="CIFTI runs of these densities (e.g. 91k): reads fMRIPrep's "
                  "*_den-<den>_bold.dtseries.nii."),
    )  # fmt: skip
    file_format: str | None = param(
        None,
        fingerprint=False,
        constraints=[StrOptions(FILE_FORMATS), None],
        doc="Which runs to read: ``'nifti'`` (``*_desc-preproc_bold.nii[.gz]``,\n"
        "a 3-D labels atlas) or ``'cifti'`` (fMRIPrep's grayordinates,\n"
        "``*_bold.dtseries.nii``, a ``.dlabel.nii`` atlas on their brain\n"
        "model: :mod:`connscale.bidsapp.cifti_runs`); None: ``'cifti'`` when\n"
        "the atlas is a ``.dlabel.nii``, ``den`` is given or a ``space``\n"
        "starts with ``fsLR``, else ``'nifti'``.",
        flag=Flag(("--file-format",), group=FILTERS, choices=FILE_FORMATS,
                  levels=("participant",),
                  help="nifti (volume runs) or cifti (fMRIPrep's *_bold.dtseries.nii with a "
                  ".dlabel.nii atlas); default: cifti when --atlas is a .dlabel.nii, --den is "
                  "given or --space starts with fsLR."),
    )  # fmt: skip
    backend: str = param(
        "local",
        fingerprint=False,
        constraints=[StrOptions(ENGINES)],
        doc="Where the run tasks execute (:func:`connscale.engines.get_engine`).\n"
        "'serial' runs them in this process, reading the next ``n_jobs``\n"
        "runs (BOLD and confounds) in background threads while this one\n"
        "computes (:func:`connscale.bidsapp.participant.run_serial`).",
        flag=Flag(("--backend",), group=EXECUTION, choices=ENGINES, levels=("participant",),
                  help="serial (this process), local (process pool), dask or spark."),
    )  # fmt: skip
    n_jobs: int | None = param(
        None,
        fingerprint=False,
        constraints=["n_jobs", None],
        doc="Workers (None or -1: every core; -2: all but one, ...); with\n"
        "``backend='serial'``, the readers of the runs ahead (None: 1; at most\n"
        "``n_jobs + 1`` runs in memory): one is a thread, several are processes\n"
        "(:class:`~connscale.engines.readers.ReaderPool`); with ``gpus``, the\n"
        "readers of each GPU worker (None: the cores the GPU workers leave, shared\n"
        "out); with ``cluster='slurm'``, SLURM jobs\n"
        "at once (None: one per run left).",
        flag=Flag(("--n-jobs",), group=EXECUTION, type="n_jobs", levels=("participant",),
                  help="Worker processes (default: every core; -1: every core, -2: all but "
                  "one, ...); with --backend serial, readers of the next runs (default 1, a "
                  "thread; several are processes); with --gpus, readers of each GPU worker "
                  "(default: the cores left, shared out); with --cluster slurm, most jobs at "
                  "once (default: one per run left)."),
    )  # fmt: skip
    cluster: str | None = _fields.cluster(tasks="runs", group=EXECUTION, levels=_PARTICIPANT)
    queue: str | None = _fields.queue(group=EXECUTION, levels=_PARTICIPANT)
    walltime: str | None = _fields.walltime(tasks="runs", group=EXECUTION, levels=_PARTICIPANT)
    cores_per_job: int | None = _fields.cores_per_job(group=EXECUTION, levels=_PARTICIPANT)
    mem_per_job: str | int | None = _fields.mem_per_job(group=EXECUTION, levels=_PARTICIPANT)
    gpus_per_job: int | None = _fields.gpus_per_job(group=EXECUTION, levels=_PARTICIPANT)
    gpus: str | int | None = param(
        None,
        fingerprint=False,
        doc_type="'all', int or None",
        doc="Use every GPU of the node (or the first N): one Dask worker process\n"
        "per GPU (:mod:`connscale.bidsapp.gpus`), ``device='cuda'`` in each\n"
        "(``'cpu'``: CPU stand-ins), ``n_jobs`` readers per worker (None: the\n"
        "host's cores shared out, :func:`~connscale.bidsapp.gpus.plan_readers`;\n"
        "the report's ``gpu_readers``); ``backend`` is then\n"
        "not used. On a node without GPU the report's ``notes`` say so and the\n"
        "runs go to ``backend`` on the CPU.",
        flag=Flag(("--gpus",), group=EXECUTION, type="gpus", metavar="all|N",
                  levels=("participant",),
                  help="participant: every GPU of the node (or the first N), one Dask "
                  "worker per GPU (CUDA_VISIBLE_DEVICES per worker); without a GPU the runs "
                  "go to --backend on the CPU, with a note."),
    )  # fmt: skip
    reports: bool = param(
        True,
        fingerprint=False,
        constraints=["boolean"],
        doc="Write each run's HTML report.",
        flag=Flag(("--no-reports",), group=EXECUTION, action="store_true", default=False,
                  dest="no_reports", convert=_reports, levels=("participant",),
                  help="participant: skip the per-run HTML reports."),
    )  # fmt: skip
    overwrite: bool = _fields.overwrite(
        "Replace a run's published set made with other parameters (without\n"
        "it such a run fails, naming the parameters that differ).",
        flag_help="Replace outputs made with other parameters: a run's (participant) or "
        "the group's, states included (without it such a run fails, naming what "
        "differs).",
        group=EXECUTION,
        levels=("participant", "group"),
    )
    work_dir: str | None = param(
        None,
        fingerprint=False,
        constraints=["path", None],
        doc="Scratch folder (the pybids index).",
        flag=Flag(("--work-dir",), group=EXECUTION, type="output_folder",
                  levels=("participant",),
                  help="Scratch folder (the pybids index); default: none kept."),
    )  # fmt: skip
    device: str = _fields.device(
        "Device of each task's cleaning and correlation. 'auto' is resolved once for the "
        "call: CUDA when present and one run per GPU computes at a time (the 'serial' backend, "
        "or ``gpus``), else the CPU (worker processes sharing the machine); the log records it.",
        group=COMPUTATION,
        levels=("participant", "group"),
    )
    dtype: str = _fields.dtype(group=COMPUTATION, levels=("participant",))
    threads_per_task: int = param(
        1,
        fingerprint=False,
        constraints=[_COUNT],
        doc="Torch threads of each run task.",
    )
    memory_limit: str | int | None = _fields.memory_limit(
        "Most memory the call may use, in bytes or as a string such as ``'8GB'``.\n"
        "It is shared out among the runs computing at once (one per GPU\n"
        "worker, or per job of a local engine) and the runs read ahead, held\n"
        "at the largest run's size; fewer are read ahead when they would take\n"
        "more than half (:mod:`~connscale.bidsapp.read_budget`). Each run's\n"
        "share covers the whole run: the decoded data and the cleaned series\n"
        "are counted, and the measures get what is left\n"
        "(:class:`~connscale.engines.batch.TaskBudget`); a run whose data alone\n"
        "exceed it is recorded as a ``MemoryLimitError``. On a cluster\n"
        "(``cluster``) it is each run's. None: no limit, each computation uses\n"
        "up to 80% of what is free.",
        group=COMPUTATION,
        levels=("participant",),
    )
    verbose: int = _fields.verbose(
        "0: silent; 1: a progress bar and a summary; 2: also debug logs.",
        group=COMPUTATION,
        levels=("participant", "group"),
    )

    # Last: --wait ends the usage line, as every command adds it.
    wait: bool = _fields.wait(
        "When another participant or group run holds ``output``\n"
        "(:func:`connscale.bidsapp.participant.output_lock`), wait for it\n"
        "instead of failing with :class:`connscale.io.lock.OutputLockedError`\n"
        "naming its pid.",
        group=EXECUTION,
        levels=("participant", "group"),
    )

    def __post_init__(self) -> None:
        if self.strategy_params is None:  # the keyword's default: no extra parameters
            object.__setattr__(self, "strategy_params", {})

    @property
    def threads(self) -> int:
        """Torch threads of each run task (``threads_per_task``)."""
        return self.threads_per_task

    @property
    def desc(self) -> str:
        """The ``desc-`` label of the outputs: the strategy's.

        Made by :func:`connscale.io.bids.strategy_desc` (``ica_aroma`` gives ``icaaroma``).
        """
        from connscale.io.bids import strategy_desc

        return strategy_desc(self.strategy)

    def parameters(self) -> dict:
        """Return what changes a run's outputs (not where it ran, nor which runs are refused).

        The temporal steps at their defaults (none asked) are left out: the
        fingerprints of the outputs made before them stay the same.
        """
        kept = asdict(self)
        kept["strategy"] = strategy_fingerprint(self.strategy)  # a file: its columns too
        fields = declared(type(self))
        return {
            name: kept[name]
            for name in fingerprint_fields(type(self))
            if name not in TEMPORAL_FIELDS or kept[name] != fields[name][0].default
        }

    def region_parameters(self) -> dict:
        """Return what changes the run's atlas-level set."""
        kept = self.parameters()
        kept["measures"] = [m for m in self.measures if m in REGION_MEASURES + PARCELLATED_MAPS]
        for key in ("degree_thresholds", "precision", "n_atoms", "network_sparsity"):
            kept.pop(key)
        if not any(m in WINDOWED for m in self.measures):
            for key in ("window_length", "step", "pairs_threshold"):
                kept.pop(key)
        if self.despike:
            kept["despike"] = True
        return kept

    def voxel_parameters(self) -> dict:
        """Return what changes the run's voxel-level set (not the atlas, not the windows)."""
        kept = {
            k: v
            for k, v in self.parameters().items()
            if k
            in (
                "strategy",
                "strategy_params",
                "detrend",
                "standardize",
                "low_pass",
                "high_pass",
                "dtype",
                *TEMPORAL_FIELDS,
            )
        }
        kept["measures"] = [m for m in self.measures if m in VOXEL_MEASURES]
        if self.despike:
            kept["despike"] = True
        return kept


def _participant_flags(name: str) -> tuple[Flag, ...]:
    """Return the flags of a participant-level field that the group level reads too."""
    return declared(ParticipantConfig)[name][1].flags


def _features(text: str) -> list[str]:
    """``features`` of ``--group-features``."""
    return text.split(",")


def _states_asked(measures: str) -> bool | None:
    """``states`` of ``--measures``: True when it names ``states``, None otherwise.

    True: every run's DFC is required; None: states when every run has DFC.
    """
    return True if "states" in [m.strip() for m in measures.split(",")] else None


@dataclass(frozen=True)
class GroupConfig:
    """Every parameter of the group level (:func:`connscale.bidsapp.group.run_group`)."""

    output: str = param(
        positional=True,
        constraints=["path"],
        doc="The participant-level output folder; ``group/`` is written in it.",
        flag=_participant_flags("output"),
    )
    atlas_name: str | None = param(
        None,
        constraints=[str, None],
        doc="Which ``seg-`` outputs to read (needed when several).",
        flag=_participant_flags("atlas_name"),
    )
    strategy: str | None = param(
        None,
        constraints=[str, None],
        doc="Which ``desc-`` outputs to read (needed when several).",
        flag=_participant_flags("strategy"),
    )
    participants: str | None = param(
        None,
        constraints=["path", None],
        doc="``participants.tsv`` with ``participant_id`` and ``target``.",
        flag=Flag(("--participants",), group=GROUP, type="input_file", levels=("group",),
                  help="participants.tsv (participant_id and the target column)."),
    )  # fmt: skip
    target: str | None = param(
        None,
        constraints=[str, None],
        doc="Column to classify (two classes).",
        flag=Flag(("--target",), group=GROUP, levels=("group",),
                  help="Column of participants.tsv to classify."),
    )  # fmt: skip
    folds: int = param(
        5,
        constraints=[Interval(Integral, 2, None, closed="left")],
        doc="Folds of :func:`connscale.classify.cross_validate`. Stratified folds\n"
        "need ``folds`` participants in each class: with fewer in the smaller\n"
        "class, its size is used instead, said in a warning and recorded in\n"
        "the classification JSON (``folds``, ``folds_requested``, ``notes``)\n"
        "and the group report.",
        flag=Flag(("--folds",), group=GROUP, type=("integer", 2), levels=("group",),
                  help="Cross-validation folds."),
    )  # fmt: skip
    repeats: int = param(
        10,
        constraints=[_COUNT],
        doc="Repeats of :func:`connscale.classify.cross_validate`.",
        flag=Flag(("--repeats",), group=GROUP, type="count", levels=("group",),
                  help="Cross-validation repeats."),
    )  # fmt: skip
    features: tuple = param(
        ("edges", "states"),
        constraints=[list, tuple],
        doc_type="sequence of {" + ", ".join(repr(f) for f in GROUP_FEATURES) + "}",
        doc="The columns of the feature table: Fisher-z edges, DFC summaries (each\n"
        "edge's mean and standard deviation of Fisher z over the run's windows;\n"
        "requires every run's DFC), DFC state features\n"
        "(when states are computed), voxel maps inside the common mask\n"
        "(requires every run's maps; one column per voxel and map): ``maps``\n"
        "(degree, ECM, GCOR), ``alff`` (ALFF, fALFF), ``reho``.",
        flag=Flag(("--group-features",), group=GROUP, metavar="KIND[,KIND...]",
                  dest="group_features", convert=_features, levels=("group",),
                  help="Columns of the group feature table (and of the classification), "
                  "among edges, dfc, states, maps, alff, reho: Fisher-z edges, DFC summaries (each "
                  "edge's mean and standard deviation of Fisher z over windows; every run "
                  "needs --measures dfc), DFC state features (when states are computed), the "
                  "voxel maps inside the runs' common mask (every run needs --measures maps; "
                  "one column per voxel and map, large); alff, reho: the ALFF and fALFF, ReHo "
                  "maps so (every run needs --measures alff, reho)."),
    )  # fmt: skip
    n_states: int = param(
        5,
        constraints=[Interval(Integral, 2, None, closed="left")],
        doc="Number of states k.",
        flag=Flag(("--states",), group=GROUP, type="count", metavar="K", dest="states",
                  levels=("group",),
                  help="Number of DFC states, clustered from every run's DFC when the "
                  "participant outputs have DFC (or --measures states is given, which "
                  "requires it)."),
    )  # fmt: skip
    state_metric: str = param(
        "l1",
        constraints=[StrOptions(STATE_METRICS)],
        doc="Distance of the states' k-means (:class:`connscale.states.DFCStates`).",
        flag=Flag(("--state-metric",), group=GROUP, choices=STATE_METRICS, levels=("group",),
                  help="Distance of the states' k-means (l1: medians, as Allen et al. 2014)."),
    )  # fmt: skip
    random_state: int | None = param(
        0,
        constraints=["random_state"],
        doc_type="int or None",
        doc="Of the cross-validation and of the states' k-means.",
        flag=Flag(("--random-state",), group=GROUP, type="natural", levels=("group",),
                  help="Seed of the states' k-means and of the cross-validation."),
    )  # fmt: skip
    states: bool | None = param(
        None,
        constraints=["boolean", None],
        doc="DFC states of the cohort (:mod:`connscale.bidsapp.group_states`):\n"
        "True requires every run's DFC, None computes them when every run has\n"
        "its DFC, False never.",
        flag=Flag(("--measures",), group=ATLAS, dest="measures", convert=_states_asked,
                  levels=("group",)),
    )  # fmt: skip
    device: str = param(
        "auto",
        constraints=["device"],
        doc="Where the k-means runs ('auto': CUDA when present).",
        flag=_participant_flags("device"),
    )
    overwrite: bool = param(
        False,
        constraints=["boolean"],
        doc="Replace group outputs published with other parameters (else refused).",
        flag=_participant_flags("overwrite"),
    )
