"""The runs of an fMRIPrep derivatives tree, found with pybids.

Each run is its preprocessed BOLD, its own brain mask, its confounds TSV and
JSON, and the repetition time from the BOLD's JSON sidecar. A CIFTI run
(``file_format='cifti'``) is fMRIPrep's grayordinate series
(``*_space-fsLR_den-91k_bold.dtseries.nii``, no ``desc-``) with its confounds
and TR, and no mask (the brain model is the mask). pybids indexes
the tree (``BIDSLayout(root, validate=False, config=['bids',
'derivatives'])``: the folder itself is the derivatives dataset, with or
without a ``dataset_description.json``); no regular expression is applied to
file names here.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path

from connscale._validation import Interval, StrOptions, validate_params
from connscale.io.bids import from_pybids
from connscale.nuisance import AROMA_STRATEGIES, StrategyOptions, bold_desc

__all__ = ["BoldRun", "find_runs", "load_layout"]

logger = logging.getLogger("connscale")

# Entities that tell runs apart (what a run's mask and confounds share with its BOLD).
_RUN_ENTITIES = (
    "subject",
    "session",
    "task",
    "acquisition",
    "ceagent",
    "reconstruction",
    "direction",
    "run",
    "echo",
    "part",
)
_SOURCE_ENTITIES = (*_RUN_ENTITIES, "space", "res", "den")
_FILTERS = {
    "subject": "participant",
    "session": "session",
    "task": "task",
    "run": "run",
    "space": "space",
    "den": "den",
}


@dataclass(frozen=True)
class BoldRun:
    """One preprocessed run and its companions.

    Attributes
    ----------
    bold, mask, confounds, confounds_json : Path or None
        The preprocessed BOLD, its brain mask (same space), its confounds
        TSV and JSON sidecar.
    t_r : float or None
        Repetition time in seconds (``RepetitionTime`` of the BOLD sidecar).
    entities : dict
        The run's BIDS entities as BIDS keys (``sub``, ``ses``, ``task``,
        ``run``, ``space``...), what output names are built from.
    problem : str or None
        Why the run cannot be processed (a missing companion file); such a
        run is reported as failed, the others still run.
    """

    bold: Path
    mask: Path | None
    confounds: Path | None
    confounds_json: Path | None
    t_r: float | None
    entities: dict = field(default_factory=dict)
    problem: str | None = None

    @property
    def is_cifti(self) -> bool:
        """Whether the run is a CIFTI dense series (``.dtseries.nii``)."""
        return str(self.bold).endswith(".dtseries.nii")

    @property
    def name(self) -> str:
        """The source entities joined, e.g. ``sub-01_task-rest_run-1_space-MNI``."""
        from connscale.io.bids import ENTITY_ORDER

        return "_".join(f"{k}-{self.entities[k]}" for k in ENTITY_ORDER if k in self.entities)


def load_layout(
    derivatives: str | os.PathLike, *, database_path=None, participants: list[str] | None = None
):
    """Return the pybids ``BIDSLayout`` of a derivatives folder (not validated).

    What the participant level reads, only: the BOLD series, masks and
    confounds of the participants' ``func`` folders with their sidecars, the
    files outside ``sub-*`` (sidecars that BIDS inheritance applies to every
    run), and the metadata of the BOLD files alone
    (pybids' ``get_metadata`` of another file gives nothing).
    ``participants`` (labels without ``sub-``): index only their folders, so
    that a call for one participant of a large cohort (a SLURM array job)
    does not index the whole tree: ~20 ms a run otherwise.
    ``database_path``: a folder where pybids keeps its index (rebuilt on
    every call, so it never describes an older tree).
    """
    root = Path(derivatives)
    if not root.is_dir():
        raise FileNotFoundError(f"No derivatives folder at {root}.")
    try:
        from bids import BIDSLayout
    except ImportError as exc:  # pragma: no cover - pybids is a dependency
        raise ImportError("Reading BIDS derivatives needs pybids: pip install pybids") from exc
    import warnings

    from bids.layout.index import BIDSLayoutIndexer

    kwargs = {}
    if database_path is not None:
        kwargs = {"database_path": str(database_path), "reset_database": True}
    # The BOLD sidecars' metadata only (their RepetitionTime): the confounds'
    # sidecars describe every column, hundreds of keys that pybids would index.
    indexer = BIDSLayoutIndexer(validate=False, ignore=_ignored(participants), suffix="bold")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing dataset_description.json is fine here
        return BIDSLayout(
            root,
            validate=False,
            config=["bids", "derivatives"],
            indexer=indexer,
            **kwargs,
        )


#: The names of a ``func`` folder's files that the participant level reads: BOLD series
#: (NIfTI, CIFTI) and their sidecars, brain masks, confounds and their sidecars.
_READ = (
    r"_(?:bold\.(?:nii|nii\.gz|json|dtseries\.nii|dtseries\.json)|mask\.(?:nii|nii\.gz)"
    r"|(?:timeseries|regressors)\.(?:tsv|json))$"
)


def _ignored(participants: list[str] | None) -> list:
    """Return pybids' ``ignore`` patterns: its defaults, what is not read, other participants.

    A participant's folders other than ``func`` (``anat``, ``figures``,
    ``log``) and the ``func`` files other than BOLD series, masks, confounds
    and their sidecars (references, transforms, segmentations, surfaces):
    most of an fMRIPrep tree's files, never read by the participant level.
    With ``participants`` (labels without ``sub-``), every other ``sub-*``
    folder too.
    """
    import re

    from bids.layout.validation import DEFAULT_LOCATIONS_TO_IGNORE

    ignored = [
        *DEFAULT_LOCATIONS_TO_IGNORE,
        re.compile(r"^/sub-[^/]+/(?:ses-[^/]+/)?(?!func(?:/|$)|ses-)"),
        re.compile(rf"^/sub-[^/]+/(?:ses-[^/]+/)?func/(?!.*{_READ})"),
    ]
    if participants:
        kept = "|".join(re.escape(label) for label in participants)
        ignored.append(re.compile(rf"^/sub-(?!(?:{kept})(?:/|$))"))
    return ignored


def _as_list(values) -> list | None:
    if values is None:
        return None
    if isinstance(values, (str, int)):
        values = [values]
    return [str(v) for v in values]


def _strip(values: list | None, prefix: str) -> list | None:
    if values is None:
        return None
    return [v[len(prefix) :] if v.startswith(prefix) else v for v in values]


#: The extension of fMRIPrep's grayordinate series.
_CIFTI_EXTENSION = ".dtseries.nii"

# --denoise ica_aroma (aroma, aroma_gsr) reads the BOLD that fMRIPrep denoised with ICA-AROMA.
_AROMA_HINT = (
    " (--denoise {} reads fMRIPrep's ICA-AROMA output, *_desc-smoothAROMAnonaggr_bold, "
    "which fMRIPrep writes with --use-aroma, up to version 23.0)"
)


def _found(layout, desc: str, cifti: bool = False) -> str:
    extensions = _CIFTI_EXTENSION if cifti else [".nii.gz", ".nii"]
    files = layout.get(suffix="bold", extension=extensions)
    if not files:
        return f"no *_bold{'.dtseries.nii' if cifti else '.nii[.gz]'} file at all"
    seen: dict[str, set] = {}
    for f in files:
        ents = _name_entities(layout, f)
        for key in ("subject", "session", "task", "run", "space", "den", "desc"):
            if key in ents:
                seen.setdefault(key, set()).add(str(ents[key]))
    listed = "; ".join(f"{k} {', '.join(sorted(v))}" for k, v in seen.items())
    if cifti:
        return f"{len(files)} dtseries file(s) with {listed}"
    return f"{len(files)} BOLD file(s) with {listed} (runs need desc-{desc})"


def _entity_key(entities: dict, keys: tuple) -> tuple:
    """Entity values as pybids compares them (run numbers as integers; None: absent)."""
    return tuple(
        None
        if entities.get(k) is None
        else (int(entities[k]) if isinstance(entities[k], int) else str(entities[k]))
        for k in keys
    )


def _by_entities(layout, files, keys: tuple) -> dict[tuple, list]:
    """Group files by their values of ``keys``.

    One query for every run, then a lookup per run (a pybids query per run costs ~30 ms).
    """
    index: dict[tuple, list] = {}
    for f in files:
        index.setdefault(_entity_key(_name_entities(layout, f), keys), []).append(f)
    return index


def _name_entities(layout, file) -> dict:
    """Return the entities of ``file``'s name, parsed by the layout's configs.

    What ``file.get_entities()`` gives without its database query (~0.5 ms a file).
    """
    return layout.parse_file_entities(file.path)


def _repetition_time(meta: dict, bold: Path, t_r: float | None) -> tuple[float | None, str | None]:
    """Return the run's TR in seconds, or why there is none.

    A TR is missing, not a number, or not positive.
    """
    sidecar = bold.with_name(bold.name.split(".")[0] + ".json")
    sidecar = sidecar.name if sidecar.is_file() else f"the JSON sidecars of {bold.name}"
    if "RepetitionTime" not in meta:
        if t_r is None:
            return None, f"no RepetitionTime in the sidecar of {bold.name} (give --t-r)"
        return float(t_r), None
    value = meta["RepetitionTime"]
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        return None, f"{sidecar}: RepetitionTime {value!r} is not a number of seconds"
    if value <= 0:
        return None, f"{sidecar}: RepetitionTime {value!r} must be positive (seconds)"
    return float(value), None


def _unique_bolds(layout, bolds: list) -> tuple[list, dict]:
    """Keep one BOLD per run.

    A run stored twice (``.nii`` and ``.nii.gz``) is kept once, with the names of both
    files (``{path: problem}``).
    """
    by_run: dict[tuple, list] = {}
    for bold in sorted(bolds, key=lambda f: f.path):
        ents = {k: v for k, v in _name_entities(layout, bold).items() if k != "extension"}
        by_run.setdefault(tuple(sorted((k, str(v)) for k, v in ents.items())), []).append(bold)
    problems = {}
    for files in by_run.values():
        if len(files) > 1:
            names = " and ".join(Path(f.path).name for f in files)
            problems[files[0].path] = f"the run is stored twice, as {names}: keep one"
    return [files[0] for files in by_run.values()], problems


def _one(files: list, what: str, bold_name: str) -> tuple[Path | None, str | None]:
    if len(files) == 1:
        return Path(files[0].path), None
    if not files:
        return None, f"no {what} for {bold_name}"
    names = ", ".join(sorted(Path(f.path).name for f in files))
    return None, f"several {what} files for {bold_name}: {names}"


def _bold_files(layout, derivatives, query: dict, desc: str, *, cifti: bool, strategy: str):
    """Return the BOLD files matching ``query``: ``desc``'s NIfTI, or fMRIPrep's dtseries.

    Raises
    ------
    ValueError
        Nothing matches; the message lists what the tree holds.
    """
    if cifti:  # fMRIPrep's dtseries has no desc- (a desc-denoised one is another tool's)
        from bids.layout import Query

        bolds = layout.get(
            suffix="bold", desc=Query.NONE, extension=_CIFTI_EXTENSION, datatype="func", **query
        )
    else:
        bolds = layout.get(
            suffix="bold", desc=desc, extension=[".nii.gz", ".nii"], datatype="func", **query
        )
    if not bolds:
        asked = ", ".join(f"{_FILTERS[k]}={v}" for k, v in query.items())
        what = "CIFTI BOLD (*_bold.dtseries.nii)" if cifti else f"preprocessed BOLD (desc-{desc})"
        if "subject" in query:  # the layout holds the participants asked for only
            layout = load_layout(derivatives)
        raise ValueError(
            f"No {what} in {derivatives}"
            + (f" matches {asked}" if asked else "")
            + f"; found {_found(layout, desc, cifti)}"
            + (_AROMA_HINT.format(strategy) if strategy in AROMA_STRATEGIES and not cifti else "")
            + "."
        )
    return bolds


@validate_params(
    {
        "derivatives": ["path"],
        "strategy": [StrategyOptions()],
        "t_r": [Interval(Real, 0, None, closed="neither"), None],
        "work_dir": ["path", None],
        "file_format": [StrOptions({"nifti", "cifti"})],
    }
)
def find_runs(
    derivatives,
    *,
    participant_label: Iterable[str] | str | None = None,
    session_label: Iterable[str] | str | None = None,
    task: Iterable[str] | str | None = None,
    run: Iterable | str | None = None,
    space: Iterable[str] | str | None = None,
    strategy: str = "simple",
    t_r: float | None = None,
    layout=None,
    work_dir=None,
    den: Iterable[str] | str | None = None,
    file_format: str = "nifti",
) -> list[BoldRun]:
    """Find the preprocessed runs of an fMRIPrep tree that match the filters.

    Parameters
    ----------
    derivatives : path
        fMRIPrep's output folder.
    participant_label, session_label : str or list of str or None
        Subjects and sessions (with or without ``sub-`` / ``ses-``).
    task, run, space : str or list or None
        Other filters (None: all).
    strategy : str, default='simple'
        The denoising strategy: 'ica_aroma', 'aroma' and 'aroma_gsr' read the
        AROMA-denoised BOLD (``desc-smoothAROMAnonaggr``), the others (and a
        nuisance file) ``desc-preproc``.
    t_r : float or None
        Repetition time to use when a run's sidecar has none.
    layout : bids.BIDSLayout or None
        An already indexed layout of ``derivatives``.
    work_dir : path or None
        Where pybids keeps its index (``<work_dir>/pybids``); None: in memory.
    den : str or list of str or None
        CIFTI runs: their densities (``den-`` entity, e.g. ``91k``); None: all.
    file_format : {'nifti', 'cifti'}, default='nifti'
        'cifti': fMRIPrep's ``*_bold.dtseries.nii`` (no ``desc-``, no mask).

    Returns
    -------
    list of BoldRun
        Sorted by BOLD path. A run missing its mask (NIfTI), confounds or TR
        is returned with ``problem`` set.

    Raises
    ------
    ValueError
        Nothing matches; the message lists what the tree holds.
    """
    desc = bold_desc(strategy)
    filters = {
        "subject": _strip(_as_list(participant_label), "sub-"),
        "session": _strip(_as_list(session_label), "ses-"),
        "task": _strip(_as_list(task), "task-"),
        "run": None if run is None else [int(r) for r in _strip(_as_list(run), "run-")],
        "space": _as_list(space),
        "den": _strip(_as_list(den), "den-"),
    }
    query = {k: v for k, v in filters.items() if v is not None}
    if layout is None:
        database = None if work_dir is None else Path(work_dir) / "pybids"
        layout = load_layout(derivatives, database_path=database, participants=filters["subject"])
    cifti = file_format == "cifti"
    bolds = _bold_files(layout, derivatives, query, desc, cifti=cifti, strategy=strategy)
    # A run's mask has every run entity of its BOLD (and no other), its space and
    # resolution; its confounds the same run entities and no space.
    mask_keys = (*_RUN_ENTITIES, "space", "res")
    masks = _by_entities(
        layout, layout.get(suffix="mask", desc="brain", extension=[".nii.gz", ".nii"]), mask_keys
    )
    confounds_keys = (*_RUN_ENTITIES, "space")
    confounds_files = _by_entities(
        layout,
        layout.get(desc="confounds", suffix=["timeseries", "regressors"], extension=".tsv"),
        confounds_keys,
    )
    bolds, twice = _unique_bolds(layout, bolds)
    runs = []
    for bold in bolds:
        ents = _name_entities(layout, bold)
        name = Path(bold.path).name
        problems = [twice[bold.path]] if bold.path in twice else []
        mask = None
        if not cifti:  # a CIFTI run's brain model is its mask
            mask, why = _one(masks.get(_entity_key(ents, mask_keys), []), "brain mask", name)
            problems += [why] if why else []
        run_only = {k: v for k, v in ents.items() if k in _RUN_ENTITIES}
        confounds, why = _one(
            confounds_files.get(_entity_key(run_only, confounds_keys), []), "confounds TSV", name
        )
        problems += [why] if why else []
        confounds_json = None
        if confounds is not None:
            sidecar = confounds.with_name(confounds.name[: -len(".tsv")] + ".json")
            confounds_json = sidecar if sidecar.is_file() else None
        run_t_r, why = _repetition_time(layout.get_metadata(bold.path), Path(bold.path), t_r)
        problems += [why] if why else []
        source = from_pybids({k: ents[k] for k in _SOURCE_ENTITIES if k in ents})
        runs.append(
            BoldRun(
                bold=Path(bold.path),
                mask=mask,
                confounds=confounds,
                confounds_json=confounds_json,
                t_r=run_t_r,
                entities=source,
                problem="; ".join(problems) or None,
            )
        )
    logger.info("bids: %d run(s) in %s", len(runs), derivatives)
    return runs
