"""BIDS derivative names: entities to a path, and a path back to entities.

One function builds every connscale output name, in the BIDS entity order,
with giga-connectome's spelling of the connectivity entities (BEP017)::

    sub-01/ses-1/func/sub-01_ses-1_task-rest_run-1_space-MNI152NLin2009cAsym
        _seg-Schaefer100_meas-PearsonCorrelation_desc-simple_relmat.tsv

``seg`` (the atlas), ``meas`` (the measure) and ``stat`` come after the source
entities and before ``desc``; nothing else is invented. pybids builds the names
(``build_path``) and reads them back (``parse_file_entities``, in
:func:`parse_bids_name`) with one configuration, ``bids_config.json`` beside this
module (:data:`CONFIG_PATH`: the entities and the path patterns of every suffix
connscale writes); ``BIDSLayout(out, config=[CONFIG_PATH])`` reads the outputs
alone, and :func:`pybids_config` gives pybids' own configurations the two
entities they do not know (``meas``, ``stat``). pybids is imported when a name is
built or read, never by the numerical core.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from connscale._choices import STRATEGIES
from connscale._version import __version__
from connscale.io.atomic import write_json_atomic

__all__ = [
    "CONFIG_PATH",
    "ENTITY_ORDER",
    "bids_name",
    "bids_prefix",
    "dataset_relative",
    "derivative_path",
    "from_pybids",
    "is_label",
    "parse_bids_name",
    "pybids_config",
    "read_participants",
    "seg_label",
    "source_entities",
    "spelling",
    "strategy_desc",
    "write_dataset_description",
]

#: connscale's pybids configuration: every entity (pybids' name, BIDS key) and
#: the path patterns of the files it writes (participant level, group level).
CONFIG_PATH = Path(__file__).with_name("bids_config.json")


@functools.lru_cache(maxsize=1)
def _config() -> dict:
    return json.loads(CONFIG_PATH.read_text())


def _entity_keys() -> dict:
    """Return pybids entity names -> BIDS keys, in the order of the configuration."""
    keys = {}
    for entity in _config()["entities"]:
        match = re.search(r"([a-z]+)-\(", entity["pattern"])
        if match:
            keys[entity["name"]] = match.group(1)
    return keys


# pybids entity names -> BIDS keys.
_PYBIDS = _entity_keys()
# BIDS keys -> pybids entity names.
_NAMES = {key: name for name, key in _PYBIDS.items()}

#: Entity keys in the order of the BIDS specification (derivatives included),
#: with giga-connectome's ``meas`` and BEP017's ``stat`` before ``desc``.
ENTITY_ORDER = tuple(_PYBIDS.values())

_LABEL = re.compile(r"^[A-Za-z0-9+]+$")


def _choices(placeholder: str) -> list[str]:
    """Return the values a path pattern allows for ``{placeholder<a|b|...>}``."""
    pattern = _config()["default_path_patterns"][0]
    return re.search(r"\{" + placeholder + r"<([^>]+)>", pattern).group(1).split("|")


def is_label(text: str) -> bool:
    """Whether ``text`` is a BIDS entity label (letters, digits or '+')."""
    return bool(_LABEL.match(text))


def _check_label(key: str, value: object) -> str:
    text = str(value)
    if not is_label(text):
        raise ValueError(f"The BIDS entity {key}- must be letters, digits or '+'; got {text!r}.")
    return text


def strategy_desc(strategy: str | os.PathLike) -> str:
    """Return the ``desc-`` label of a denoising strategy.

    A named strategy without its underscores: ``ica_aroma`` gives
    ``icaaroma`` (giga-connectome's name), ``acompcor_gsr`` gives
    ``acompcorgsr``, ``36P`` is its own label. A custom nuisance file
    (:mod:`connscale.nuisance`) gives its ``desc`` key, else its file name
    without the extension, letters and digits only (``my_model.yml`` gives
    ``mymodel``). Any other label is returned as is (the group level reads
    outputs by their label).

    Examples
    --------
    >>> strategy_desc("ica_aroma"), strategy_desc("scrubbing"), strategy_desc("acompcor_gsr")
    ('icaaroma', 'scrubbing', 'acompcorgsr')
    """
    from connscale.nuisance import is_nuisance_file, read_nuisance_file

    if is_nuisance_file(strategy):
        return _check_label("desc", read_nuisance_file(strategy).desc)
    strategy = str(strategy)
    return _check_label("desc", strategy.replace("_", "") if strategy in STRATEGIES else strategy)


#: The rewrite of every name built here, ``(entities, suffix, extension) ->
#: (entities, suffix)``, in the current context (None: connscale's spelling).
_SPELLING: contextvars.ContextVar = contextvars.ContextVar("connscale_spelling", default=None)


@contextlib.contextmanager
def spelling(rewrite):
    """Build every name inside the block through ``rewrite`` (None: connscale's own names).

    ``rewrite(entities, suffix, extension)`` returns the entities and suffix
    to name the file with (:mod:`connscale.bidsapp.xcpd_names`: XCP-D's
    spelling). It holds in the current thread (a :mod:`contextvars` value).
    """
    token = _SPELLING.set(rewrite)
    try:
        yield
    finally:
        _SPELLING.reset(token)


def _build(entities: Mapping[str, object], suffix: str, extension: str, **extra) -> str:
    """Return the path of an output relative to its dataset root.

    It is built by pybids' ``build_path`` with the patterns of :data:`CONFIG_PATH`,
    after the :func:`spelling` in effect.
    """
    from bids.layout.writing import build_path

    rewrite = _SPELLING.get()
    if rewrite is not None:
        entities, suffix = rewrite(dict(entities), suffix, extension)
    unknown = sorted(set(entities) - set(ENTITY_ORDER))
    if unknown:
        raise ValueError(f"Unknown BIDS entities {unknown}; known: {', '.join(ENTITY_ORDER)}.")
    values = {
        _NAMES[key]: _check_label(key, value)
        for key, value in entities.items()
        if value is not None
    }
    path = build_path(
        {**values, "suffix": suffix, "extension": extension, **extra},
        _config()["default_path_patterns"],
        strict=True,
    )
    if path is None:
        raise ValueError(
            f"connscale writes no '_{suffix}{extension}' file; suffixes: "
            f"{', '.join(_choices('suffix'))}; extensions: {', '.join(_choices('extension'))}."
        )
    return path


def bids_name(
    entities: Mapping[str, object], *, suffix: str, extension: str, require_subject: bool = True
) -> str:
    """``<key>-<value>_..._<suffix><extension>`` with keys in BIDS order.

    Built by pybids (``bids.layout.writing.build_path``) with the path
    patterns of connscale's configuration (:data:`CONFIG_PATH`).

    Parameters
    ----------
    entities : mapping
        BIDS keys (``sub``, ``ses``, ``task``, ``run``, ``space``, ``seg``,
        ``meas``, ``desc``...; see :data:`ENTITY_ORDER`) to values; None
        values are left out.
    suffix : str
        ``relmat``, ``timeseries``, ``report``... (those of the configuration).
    extension : str
        With its dot: ``.tsv``, ``.json``, ``.h5``.
    require_subject : bool, default=True
        False for group-level names (no ``sub``).

    Returns
    -------
    str
    """
    if require_subject and entities.get("sub") is None:
        raise ValueError("A BIDS derivative name needs a subject ('sub').")
    return PurePosixPath(_build(entities, suffix, extension)).name


def bids_prefix(entities: Mapping[str, object], *, require_subject: bool = True) -> str:
    """Return the entities part of a name (``sub-01_task-rest_desc-simple``).

    It is the name of an output set (its lock, staging folder and manifest).
    """
    return bids_name(
        entities, suffix="relmat", extension=".tsv", require_subject=require_subject
    ).removesuffix("_relmat.tsv")


#: Entities connscale sets on its outputs rather than copying them from an input.
_DERIVED = ("meas", "stat", "desc")


def source_entities(path: str | os.PathLike, *, subject: str | None = None) -> dict:
    """Return the entities of an input's BIDS name that an output of it keeps.

    Everything but ``meas``, ``stat`` and ``desc`` is kept; ``desc`` is kept
    from a ``_timeseries`` input only (there it names the denoising strategy;
    on a BOLD image it is fMRIPrep's ``desc-preproc``). A name that is not
    BIDS (``fmri1.nii.gz``) gives ``{'sub': subject}``, or without
    ``subject`` ``{'sub': 'fmri1'}``: the letters and digits of its stem.

    Examples
    --------
    >>> source_entities("sub-01_task-rest_space-MNI_desc-preproc_bold.nii.gz")
    {'sub': '01', 'task': 'rest', 'space': 'MNI'}
    """
    stem, _, extension = Path(path).name.partition(".")
    try:
        # A name of entities only (sub-02.nii.gz) has no suffix: read it with one.
        suffix = "_x" if "-" in stem.split("_")[-1] else ""
        entities = parse_bids_name(f"{stem}{suffix}.{extension or 'x'}")
    except ValueError:
        entities = {}
    if entities.get("sub") is None:
        if subject is not None:
            return {"sub": _check_label("sub", subject)}
        label = re.sub(r"[^A-Za-z0-9]", "", stem)
        if not label:
            raise ValueError(
                f"Cannot name outputs after {Path(path).name!r}: it has neither a "
                "BIDS subject entity (sub-<label>) nor letters or digits."
            )
        return {"sub": label}
    suffix = entities.pop("suffix")
    entities.pop("extension")
    dropped = _DERIVED if suffix != "timeseries" else ("meas", "stat")
    return {k: v for k, v in entities.items() if k not in dropped}


def seg_label(atlas: str | os.PathLike) -> str:
    """Return the ``seg-`` label of an atlas file.

    It is its BIDS ``atlas-`` value when it has one
    (``tpl-MNI_atlas-Schaefer2018_desc-100Parcels_dseg.nii.gz`` gives
    ``Schaefer2018``), else the letters and digits of its stem
    (``Schaefer_100.nii.gz`` gives ``Schaefer100``).
    """
    match = re.search(r"(?:^|_)atlas-([A-Za-z0-9+]+)(?:_|\.|$)", Path(atlas).name)
    label = match.group(1) if match else None
    if label is None:
        label = re.sub(r"[^A-Za-z0-9]", "", Path(atlas).name.split(".")[0])
    if not label:
        raise ValueError(
            f"Cannot derive a seg- label from the atlas file name "
            f"{Path(atlas).name!r}; pass --atlas-name."
        )
    return label


def dataset_relative(path: str | os.PathLike, root: str | os.PathLike) -> str:
    """Return ``path`` relative to the dataset root ``root`` (``'../fmriprep'``).

    This is how a BIDS sidecar or ``DatasetLinks`` gives a file outside the dataset.
    """
    return Path(os.path.relpath(Path(path).resolve(), Path(root).resolve())).as_posix()


def derivative_path(
    root: str | os.PathLike,
    entities: Mapping[str, object],
    *,
    suffix: str,
    extension: str,
    datatype: str = "func",
) -> Path:
    """``<root>/sub-<sub>/[ses-<ses>/]<datatype>/<bids_name(...)>``, built by pybids."""
    if entities.get("sub") is None:
        raise ValueError("A BIDS derivative name needs a subject ('sub').")
    return Path(root) / _build(entities, suffix, extension, datatype=datatype)


@functools.lru_cache(maxsize=1)
def _pybids_configuration():
    from bids.layout.models import Config

    return Config.load(str(CONFIG_PATH))


def parse_bids_name(path: str | os.PathLike) -> dict:
    """Entities, ``suffix`` and ``extension`` of a BIDS file name.

    Read by pybids (``bids.layout.parse_file_entities``) with connscale's
    configuration (:data:`CONFIG_PATH`); every ``<key>-<value>`` part of the
    name must be an entity it knows.

    Examples
    --------
    >>> parse_bids_name("sub-01_task-rest_seg-A_meas-PearsonCorrelation_relmat.tsv")
    {'sub': '01', 'task': 'rest', 'seg': 'A', 'meas': 'PearsonCorrelation', \
'suffix': 'relmat', 'extension': '.tsv'}
    """
    from bids.layout import parse_file_entities

    name = Path(path).name
    stem, dot, _ = name.partition(".")
    parts = stem.split("_")
    if len(parts) < 2 or "-" in parts[-1] or not dot:
        raise ValueError(f"{name} is not a BIDS name (<key>-<value>_..._<suffix>.<ext>).")
    parsed = parse_file_entities(name, config=[_pybids_configuration()])
    out = {_PYBIDS[k]: str(parsed[k]) for k in _PYBIDS if k in parsed}
    found = {f"{key}-{value}" for key, value in out.items()}
    for part in parts[:-1]:
        if part not in found:
            raise ValueError(f"{name}: {part!r} is not a known BIDS entity.")
    if len(parts) - 1 != len(found):
        raise ValueError(f"{name}: an entity is given twice.")
    out["suffix"] = parsed["suffix"]
    out["extension"] = parsed["extension"]
    return out


def from_pybids(entities: Mapping[str, object]) -> dict:
    """Return pybids entities (``subject``, ``session``, ``run``...) as BIDS keys.

    Entities pybids adds that are not in a name (``datatype``, ``suffix``,
    ``extension``) are dropped; a run keeps its zero padding.
    """
    return {_PYBIDS[k]: str(v) for k, v in entities.items() if k in _PYBIDS and v is not None}


def pybids_config() -> dict:
    """Return a pybids configuration adding ``meas`` and ``stat`` (pybids knows the rest).

    Use it with ``config=['bids', 'derivatives', pybids_config()]`` in
    ``BIDSLayout`` or ``bids.layout.parse_file_entities``; connscale's own
    configuration (:data:`CONFIG_PATH`) reads its outputs alone.
    """
    return {
        "name": "connscale-entities",
        "entities": [
            # After the start, a '_' or a folder separator (a group-level
            # name at the output root may start with meas- or stat-).
            {"name": "meas", "pattern": r"(?:^|[_/\\])meas-([a-zA-Z0-9+]+)"},
            {"name": "stat", "pattern": r"(?:^|[_/\\])stat-([a-zA-Z0-9+]+)"},
        ],
    }


def _read_tsv(path: Path, what: str) -> tuple[list, list]:
    """Column names and rows (dicts) of a tab-separated table with a header."""
    if not path.is_file():
        raise FileNotFoundError(f"No such {what} file: {str(path)!r}.")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        return list(reader.fieldnames or []), list(reader)


def read_participants(path: str | os.PathLike, *, label: str) -> dict:
    r"""Map subject label -> value of column ``label`` in a participants TSV.

    Parameters
    ----------
    path : str or path
        BIDS ``participants.tsv`` with a ``participant_id`` column
        (``sub-01`` or ``01``).
    label : str
        Column holding the class of each participant.

    Returns
    -------
    dict of str -> str
        Subjects whose value is empty or ``n/a`` are left out.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.classify import read_participants
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "participants.tsv"
    ...     rows = ["participant_id\tgroup", "sub-01\tpatient", "sub-02\tn/a", "03\tcontrol"]
    ...     _ = path.write_text("\n".join(rows) + "\n")
    ...     groups = read_participants(path, label="group")
    >>> groups
    {'01': 'patient', '03': 'control'}
    """
    path = Path(path)
    columns, rows = _read_tsv(path, "participants")
    if "participant_id" not in columns:
        raise ValueError(f"{str(path)!r} has no 'participant_id' column; got columns {columns}.")
    if label not in columns:
        others = [c for c in columns if c != "participant_id"]
        raise ValueError(f"{str(path)!r} has no column {label!r}; choose the label among {others}.")
    mapping = {}
    for row in rows:
        pid = (row["participant_id"] or "").strip()
        if not pid:
            continue
        pid = pid.removeprefix("sub-")
        value = (row[label] or "").strip()
        if value.lower() in ("", "n/a", "nan"):
            continue
        if pid in mapping and mapping[pid] != value:
            raise ValueError(
                f"{str(path)!r}: participant 'sub-{pid}' is listed twice with different labels."
            )
        mapping[pid] = value
    return mapping


def write_dataset_description(
    out_dir: str | os.PathLike,
    *,
    name: str = "connscale outputs",
    links: Mapping[str, str] | None = None,
    exclusive: bool = False,
) -> Path:
    """``dataset_description.json`` of a BIDS derivatives folder written by connscale.

    Parameters
    ----------
    out_dir : str or path
    name : str, default="connscale outputs"
    links : mapping or None
        ``DatasetLinks`` (name -> location of the input dataset, a URI or a
        path relative to ``out_dir``: see :func:`dataset_relative`). Without
        links, a description already in the folder is kept as it is.
    exclusive : bool, default=False
        Refuse a folder whose description names another generator.

    Returns
    -------
    Path

    Raises
    ------
    FileExistsError
        With ``exclusive``, when the folder is another tool's dataset.

    Notes
    -----
    Calls racing on one folder (an array job's tasks) are safe: the file is
    replaced atomically, so each call reads a whole description, and one
    that already says what this call would write is left untouched.
    """
    path = Path(out_dir) / "dataset_description.json"
    try:
        old = json.loads(path.read_text())
    except FileNotFoundError:
        old = None
    except ValueError:
        old = {}
    if old is not None:
        names = [g.get("Name") for g in old.get("GeneratedBy", []) if isinstance(g, dict)]
        if exclusive and "connscale" not in names:
            raise FileExistsError(
                f"{out_dir} is another tool's dataset ({path.name} names "
                f"{names or 'no generator'}); choose an empty output folder."
            )
        if links is None:
            return path
    description = {
        "Name": name,
        "BIDSVersion": "1.9.0",
        "DatasetType": "derivative",
        "GeneratedBy": [
            {
                "Name": "connscale",
                "Version": __version__,
                "CodeURL": "https://github.com/connscale/connscale",
            }
        ],
    }
    if links:
        description["DatasetLinks"] = dict(links)
    if old == description:
        return path
    return write_json_atomic(path, description)
