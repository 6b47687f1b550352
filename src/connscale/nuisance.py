"""Nuisance regressor sets: XCP-D's by name, or a custom set from a YAML/JSON file.

XCP-D's built-in sets (``xcp_d/data/nuisance/<name>.yml``) are selected
through nilearn's :func:`~nilearn.interfaces.fmriprep.load_confounds`, each
with the parameters of :data:`SET_PARAMETERS`, so that the columns are those
XCP-D's files list (for the AROMA sets, see below):

========================  ==============================================================
``24P``                   the 6 motion parameters, their derivatives, the squares of both
``27P``                   ``24P`` + ``global_signal``, ``csf``, ``white_matter``
``36P``                   ``24P`` + the 3 tissue/global signals, their derivatives and
                          the squares of both
``acompcor``              the 6 motion parameters and their derivatives, the first 5
                          aCompCor components of the WM and of the CSF mask
                          (``w_comp_cor_0[0-4]``, ``c_comp_cor_0[0-4]``) and fMRIPrep's
                          cosine drifts (the components were made on high-passed data)
``acompcor_gsr``          ``acompcor`` + ``global_signal``
``aroma``                 ``csf``, ``white_matter`` on fMRIPrep's ICA-AROMA output
``aroma_gsr``             ``aroma`` + ``global_signal``
``gsr_only``              ``global_signal``
========================  ==============================================================

Where nilearn cannot say what XCP-D says:

- ``aroma`` and ``aroma_gsr``: XCP-D (>= 0.10) adds the motion components of
  fMRIPost-AROMA, orthogonalised against its signal components
  (``^aroma_orth_motion_.*$`` of a ``desc-aroma_timeseries.tsv`` in another
  derivatives dataset), to the regression of ``desc-preproc`` BOLD: a
  non-aggressive AROMA denoising done in the same regression. nilearn reads
  no such file; its ``ica_aroma='full'`` reads fMRIPrep's own non-aggressive
  AROMA result instead (``*_desc-smoothAROMAnonaggr_bold``, fMRIPrep
  ``--use-aroma`` up to 23.0, spatially smoothed by fMRIPrep's AROMA step),
  and regresses the tissue (and global) signals from it. The tissue columns
  are XCP-D's; the AROMA part is removed before, not in the same regression
  (the same as today's ``ica_aroma`` preset, giga-connectome's).
- ``acompcor``: nilearn's ``compcor='anat_separated', n_compcor=5`` also
  reads fMRIPrep < 21's ``a_comp_cor_XX`` of the WM and CSF masks (named
  through the confounds JSON), where XCP-D's patterns find nothing.
- First volumes: nilearn fills the first (n/a) value of a derivative with
  the second one; XCP-D fills it with 0. Both drop the volume only when it
  is a non-steady-state one (nilearn drops fMRIPrep's
  ``non_steady_state_outlier_XX`` volumes, as for every preset).

A custom set comes from a small YAML or JSON file (:func:`read_nuisance_file`),
XCP-D's ``--nuisance-regressors`` format or a shorter one::

    desc: motionwmcsf          # optional: the outputs' desc- label
    columns:
      - trans_x                # a column of the confounds TSV, by name
      - trans_x_derivative1    # computed from trans_x when the TSV lacks it
      - trans_x_power2
      - trans_x_derivative1_power2
      - ^a_comp_cor_0[0-4]$    # a regular expression (starts with ^, as XCP-D's)

A name ending in fMRIPrep's ``_derivative1``, ``_power2`` or
``_derivative1_power2`` that the TSV lacks is computed from its base column
as fMRIPrep does (backward difference, square). The columns are read from
the confounds TSV with pandas; the volumes kept (non-steady-state ones
dropped) are nilearn's. Host side only: nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from connscale._choices import STRATEGIES
from connscale._validation import StrOptions

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = [
    "AROMA_STRATEGIES",
    "FILE_SUFFIXES",
    "SET_PARAMETERS",
    "NuisanceError",
    "NuisanceFile",
    "StrategyOptions",
    "bold_desc",
    "check_strategy",
    "is_nuisance_file",
    "load_nuisance",
    "read_nuisance_file",
    "set_columns",
    "strategy_fingerprint",
]

#: nilearn ``load_confounds`` parameters of each of XCP-D's sets.
SET_PARAMETERS = {
    "24P": {"strategy": ("motion",), "motion": "full"},
    "27P": {
        "strategy": ("motion", "wm_csf", "global_signal"),
        "motion": "full",
        "wm_csf": "basic",
        "global_signal": "basic",
    },
    "36P": {
        "strategy": ("motion", "wm_csf", "global_signal"),
        "motion": "full",
        "wm_csf": "full",
        "global_signal": "full",
    },
    "acompcor": {
        "strategy": ("motion", "high_pass", "compcor"),
        "motion": "derivatives",
        "compcor": "anat_separated",
        "n_compcor": 5,
    },
    "acompcor_gsr": {
        "strategy": ("motion", "high_pass", "compcor", "global_signal"),
        "motion": "derivatives",
        "compcor": "anat_separated",
        "n_compcor": 5,
        "global_signal": "basic",
    },
    "aroma": {"strategy": ("wm_csf", "ica_aroma"), "wm_csf": "basic", "ica_aroma": "full"},
    "aroma_gsr": {
        "strategy": ("wm_csf", "ica_aroma", "global_signal"),
        "wm_csf": "basic",
        "ica_aroma": "full",
        "global_signal": "basic",
    },
    "gsr_only": {"strategy": ("global_signal",), "global_signal": "basic"},
}

#: The strategies that read fMRIPrep's ICA-AROMA output (``desc-smoothAROMAnonaggr``).
AROMA_STRATEGIES = ("ica_aroma", "aroma", "aroma_gsr")

#: The file name endings of a custom nuisance file.
FILE_SUFFIXES = (".yml", ".yaml", ".json")

#: The base columns of nilearn's noise components, and the suffixes of its models.
_BASES = {
    "motion": ("trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z"),
    "wm_csf": ("csf", "white_matter"),
    "global_signal": ("global_signal",),
}
_MODELS = {
    "basic": ("",),
    "derivatives": ("", "_derivative1"),
    "power2": ("", "_power2"),
    "full": ("", "_derivative1", "_power2", "_derivative1_power2"),
}
#: fMRIPrep's expansions of a column: derivative, square, square of the derivative.
_EXPANSION = re.compile(r"^(?P<base>.+?)(?P<suffix>_derivative1_power2|_derivative1|_power2)$")
#: The top-level keys of a nuisance file (XCP-D's ``name``/``description``/``confounds``).
_FILE_KEYS = ("name", "description", "desc", "confounds", "columns")
_LABEL = re.compile(r"^[A-Za-z0-9]+$")


class NuisanceError(ValueError):
    """A nuisance set a run cannot have, or a nuisance file that cannot be read (one line)."""


@dataclass(frozen=True)
class NuisanceFile:
    """A custom nuisance set read from its file.

    Attributes
    ----------
    path : str
        The file (absolute).
    desc : str
        The outputs' ``desc-`` label: the file's ``desc`` key, else its name
        without the extension, letters and digits only.
    columns : tuple of str
        Column names and regular expressions (``^...``), in the file's order.

    Examples
    --------
    >>> from connscale.nuisance import NuisanceFile
    >>> NuisanceFile("/data/motion.yml", "motion", ("trans_x", "^rot_.*$")).desc
    'motion'
    """

    path: str
    desc: str
    columns: tuple[str, ...]


def is_nuisance_file(strategy: object) -> bool:
    """Return whether ``strategy`` is a custom nuisance file (an existing .yml, .yaml or .json).

    Parameters
    ----------
    strategy : object
        A strategy's name or a path.

    Returns
    -------
    bool

    Examples
    --------
    >>> import json
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.nuisance import is_nuisance_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "motion.json"
    ...     _ = path.write_text(json.dumps({"columns": ["trans_x"]}))
    ...     print(is_nuisance_file(path), is_nuisance_file("36P"))
    True False
    """
    if not isinstance(strategy, (str, os.PathLike)) or str(strategy) in STRATEGIES:
        return False
    path = Path(strategy)
    return path.suffix.lower() in FILE_SUFFIXES and path.is_file()


class StrategyOptions(StrOptions):
    """A denoising strategy of ``STRATEGIES``, or the path of a nuisance file.

    The parameter constraint of a ``strategy`` argument.

    Examples
    --------
    >>> from connscale.nuisance import StrategyOptions
    >>> StrategyOptions().is_satisfied_by("acompcor")
    True
    """

    def __init__(self) -> None:
        super().__init__(STRATEGIES)

    def is_satisfied_by(self, value) -> bool:
        """Return whether ``value`` is a strategy's name or a nuisance file's path.

        Parameters
        ----------
        value : object
            The argument given.

        Returns
        -------
        bool

        Examples
        --------
        >>> from connscale.nuisance import StrategyOptions
        >>> StrategyOptions().is_satisfied_by("24P"), StrategyOptions().is_satisfied_by("42P")
        (True, False)
        """
        return super().is_satisfied_by(value) or is_nuisance_file(value)

    def __str__(self) -> str:
        return f"{super().__str__()} or an existing .yml, .yaml or .json nuisance file"


def check_strategy(strategy: str | os.PathLike) -> str:
    """Return a strategy name as is, or a nuisance file's absolute path once it is read.

    Parameters
    ----------
    strategy : str or path
        A name of ``STRATEGIES``, or a nuisance file.

    Returns
    -------
    str
        The name, or the file's absolute path.

    Raises
    ------
    ValueError
        One line: neither a strategy nor an existing nuisance file, or a
        file :func:`read_nuisance_file` refuses.

    Examples
    --------
    >>> from connscale.nuisance import check_strategy
    >>> check_strategy("36P")
    '36P'
    >>> check_strategy("36p")
    Traceback (most recent call last):
    ...
    ValueError: strategy must be one of ...
    """
    if isinstance(strategy, str) and strategy in STRATEGIES:
        return strategy
    if not is_nuisance_file(strategy):
        raise ValueError(
            f"strategy must be one of {', '.join(STRATEGIES)}, or a .yml, .yaml or .json "
            f"nuisance file; got {str(strategy)!r}."
        )
    return read_nuisance_file(strategy).path


def bold_desc(strategy: str) -> str:
    """Return the ``desc-`` of the fMRIPrep BOLD a strategy reads.

    ``smoothAROMAnonaggr`` (fMRIPrep's ICA-AROMA output) for
    :data:`AROMA_STRATEGIES`, ``preproc`` otherwise (custom files included).

    Parameters
    ----------
    strategy : str
        A strategy's name, or a nuisance file's path.

    Returns
    -------
    str

    Examples
    --------
    >>> from connscale.nuisance import bold_desc
    >>> bold_desc("aroma"), bold_desc("36P")
    ('smoothAROMAnonaggr', 'preproc')
    """
    return "smoothAROMAnonaggr" if strategy in AROMA_STRATEGIES else "preproc"


def set_columns(name: str) -> list[str]:
    """Return the fixed columns a named set needs (motion, tissue and global signals).

    Its aCompCor components and cosines are counted by nilearn from the
    confounds JSON and TSV; they are not listed.

    Parameters
    ----------
    name : str
        A name of :data:`SET_PARAMETERS`.

    Returns
    -------
    list of str
        fMRIPrep's column names.

    Examples
    --------
    >>> set_columns("gsr_only")
    ['global_signal']
    """
    params = SET_PARAMETERS[name]
    return [
        base + suffix
        for component in params["strategy"]
        if component in _BASES
        for base in _BASES[component]
        for suffix in _MODELS[params[component]]
    ]


def _label(text: str, path: Path) -> str:
    label = re.sub(r"[^A-Za-z0-9]", "", text)
    if not label:
        raise NuisanceError(
            f"{path.name}: its name gives no desc- label (letters and digits); add a "
            "'desc' key (e.g. desc: mymodel)."
        )
    return label


def _load_mapping(path: Path) -> dict:
    """Return the file's top-level mapping (YAML or JSON)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            content = json.loads(text)
        except ValueError as exc:
            raise NuisanceError(f"{path.name} is not JSON: {exc}.") from None
    else:
        import yaml

        try:
            content = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise NuisanceError(f"{path.name} is not YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(content, dict):
        raise NuisanceError(f"{path.name} must hold a mapping (e.g. columns: [...]).")
    unknown = sorted(set(map(str, content)) - set(_FILE_KEYS))
    if unknown:
        raise NuisanceError(
            f"{path.name}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_FILE_KEYS)}."
        )
    return content


def _entries(content: dict, path: Path) -> list:
    """Return the column entries of a file: ``columns``, or XCP-D's ``confounds``."""
    if "columns" in content and "confounds" in content:
        raise NuisanceError(f"{path.name}: give 'columns' or 'confounds', not both.")
    if "columns" in content:
        return _listed(content["columns"], "columns", path)
    confounds = content.get("confounds")
    if not isinstance(confounds, dict) or not confounds:
        raise NuisanceError(f"{path.name} names no column: no 'columns' list, no 'confounds'.")
    entries = []
    for key, entry in confounds.items():
        if not isinstance(entry, dict):
            raise NuisanceError(f"{path.name}: confounds entry {key!r} must be a mapping.")
        dataset = entry.get("dataset", "preprocessed")
        if dataset != "preprocessed" or "columns" not in entry:
            raise NuisanceError(
                f"{path.name}: confounds entry {key!r} reads dataset {dataset!r}"
                + ("" if "columns" in entry else " and names no columns")
                + "; connscale reads columns of fMRIPrep's confounds TSV only (dataset: "
                "preprocessed)."
            )
        entries.extend(_listed(entry["columns"], f"confounds entry {key!r}'s columns", path))
    return entries


def _listed(columns, what: str, path: Path) -> list:
    """Return a file's list of columns (None: none)."""
    if columns is None:
        return []
    if not isinstance(columns, list):
        raise NuisanceError(f"{path.name}: {what} must be a list; got {columns!r}.")
    return columns


def read_nuisance_file(path: str | os.PathLike) -> NuisanceFile:
    """Read a custom nuisance set (YAML or JSON; see the module's docstring).

    Raises
    ------
    NuisanceError
        One line naming the file: not YAML/JSON, not a mapping, an unknown
        key, no column, a column that is not a string, a bad regular
        expression, an entry of another dataset than fMRIPrep's, a ``desc``
        that is not letters and digits.

    Parameters
    ----------
    path : str or path
        A ``.yml``, ``.yaml`` or ``.json`` file.

    Returns
    -------
    NuisanceFile

    Examples
    --------
    >>> import json
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.nuisance import read_nuisance_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "motion_wm.json"
    ...     _ = path.write_text(json.dumps({"columns": ["trans_x", "^rot_.$", "white_matter"]}))
    ...     spec = read_nuisance_file(path)
    >>> spec.desc, spec.columns
    ('motionwm', ('trans_x', '^rot_.$', 'white_matter'))
    """
    path = Path(path).resolve()
    content = _load_mapping(path)
    columns = _entries(content, path)
    if not columns:
        raise NuisanceError(f"{path.name} names no column.")
    for column in columns:
        if not isinstance(column, str) or not column.strip():
            raise NuisanceError(f"{path.name}: columns must be names or patterns; got {column!r}.")
        if column.startswith("^"):
            try:
                re.compile(column)
            except re.error as exc:
                raise NuisanceError(f"{path.name}: bad pattern {column!r}: {exc}.") from None
    desc = content.get("desc")
    if desc is not None and not _LABEL.match(str(desc)):
        raise NuisanceError(f"{path.name}: desc must be letters and digits; got {desc!r}.")
    label = str(desc) if desc is not None else _label(path.stem, path)
    return NuisanceFile(str(path), label, tuple(dict.fromkeys(columns)))


def strategy_fingerprint(strategy: str) -> str | dict:
    """Return what a strategy changes in the outputs: its name, or a file's set.

    A file's path, label and columns, so that editing the file changes the
    fingerprint of the outputs made with it.

    Parameters
    ----------
    strategy : str
        A strategy's name, or a nuisance file's path.

    Returns
    -------
    str or dict
        The name, or ``{"file", "desc", "columns"}`` of the file.

    Examples
    --------
    >>> import json
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.nuisance import strategy_fingerprint
    >>> strategy_fingerprint("27P")
    '27P'
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "gs.json"
    ...     _ = path.write_text(json.dumps({"desc": "gs", "columns": ["global_signal"]}))
    ...     fingerprint = strategy_fingerprint(str(path))
    >>> fingerprint["desc"], fingerprint["columns"]
    ('gs', ['global_signal'])
    """
    if not is_nuisance_file(strategy):
        return strategy
    spec = read_nuisance_file(strategy)
    return {"file": spec.path, "desc": spec.desc, "columns": list(spec.columns)}


def _select(table: pd.DataFrame, spec: NuisanceFile, run: str, source: str) -> pd.DataFrame:
    """Return the file's columns of a confounds table, expansions computed."""
    import pandas as pd

    chosen: dict[str, pd.Series] = {}
    for column in spec.columns:
        if column.startswith("^"):
            found = [c for c in table.columns if re.match(column, c, re.IGNORECASE)]
            if not found:
                raise NuisanceError(
                    f"{run}: pattern {column!r} of {Path(spec.path).name} matches no column "
                    f"of {source}."
                )
            chosen.update((c, table[c]) for c in found if c not in chosen)
        elif column in table.columns:
            chosen.setdefault(column, table[column])
        else:
            chosen.setdefault(column, _expansion(table, column, run, spec, source))
    return pd.DataFrame(chosen)


def _expansion(table: pd.DataFrame, column: str, run: str, spec: NuisanceFile, source: str):
    """Return fMRIPrep's ``_derivative1``/``_power2`` expansion of a base column."""
    match = _EXPANSION.match(column)
    if match is None or match["base"] not in table.columns:
        raise NuisanceError(
            f"{run}: column {column!r} of {Path(spec.path).name} is absent from {source}"
            + (f" (and so is its base {match['base']!r})" if match else "")
            + "."
        )
    values = table[match["base"]].astype(float)
    if "derivative1" in match["suffix"]:
        values = values.diff()
    return values**2 if match["suffix"].endswith("power2") else values


def _nilearn(bold: str, run: str, **params) -> tuple:
    """Call nilearn's ``load_confounds``, its refusals one line naming the run."""
    import warnings

    from nilearn.interfaces.fmriprep import load_confounds

    try:
        with warnings.catch_warnings():
            # strategy=(): only the kept volumes are asked for (nilearn warns: no confound).
            warnings.filterwarnings("ignore", message="strategy is empty")
            return load_confounds(bold, **params)
    except (ValueError, TypeError, KeyError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise NuisanceError(f"{run}: nilearn cannot load the confounds: {message}") from exc


def load_nuisance(
    bold: str | os.PathLike, strategy: str, *, confounds_file: str | os.PathLike | None = None
) -> tuple[pd.DataFrame | None, np.ndarray | None]:
    """Return the confounds and sample mask of a run for a named set or a nuisance file.

    Parameters
    ----------
    bold : path
        The run's fMRIPrep BOLD (``desc-smoothAROMAnonaggr`` for the AROMA
        sets, see :func:`bold_desc`).
    strategy : str
        A name of :data:`SET_PARAMETERS`, or a nuisance file's path.
    confounds_file : path or None
        The run's confounds TSV; None: the one nilearn finds beside ``bold``.

    Returns
    -------
    confounds : pandas.DataFrame
        (T, n_confounds), fMRIPrep's column names.
    sample_mask : ndarray of int or None
        The volumes kept (fMRIPrep's non-steady-state volumes dropped), or None.

    Raises
    ------
    NuisanceError
        One line naming the run: a named set's column(s) missing from the
        confounds file, a file's pattern that matches no column or column
        that is absent, what nilearn cannot load.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from connscale.datasets.fmriprep import make_fmriprep_tree
    >>> from connscale.nuisance import load_nuisance
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     tree = make_fmriprep_tree(tmp, n_subjects=2)
    ...     bold = next(Path(tree.derivatives).glob("sub-01/func/*_desc-preproc_bold.nii.gz"))
    ...     confounds, sample_mask = load_nuisance(bold, "27P")
    >>> sorted(confounds.columns)[:3]
    ['csf', 'global_signal', 'rot_x']
    """
    import pandas as pd
    from nilearn.interfaces.fmriprep.load_confounds_utils import get_confounds_file

    run = Path(bold).name
    if confounds_file is None:
        aroma = bold_desc(strategy) != "preproc"
        try:
            confounds_file = get_confounds_file(str(bold), flag_full_aroma=aroma, flag_tedana=False)
        except ValueError as exc:
            raise NuisanceError(f"{run}: nilearn finds no confounds file: {exc}") from exc
    source = Path(confounds_file).name
    if strategy in SET_PARAMETERS:
        header = pd.read_csv(confounds_file, sep="\t", nrows=0).columns
        missing = [c for c in set_columns(strategy) if c not in header]
        if missing:
            raise NuisanceError(
                f"{run}: nuisance set {strategy} needs column(s) {', '.join(missing)}, absent "
                f"from {source}."
            )
        return _nilearn(str(bold), run, **SET_PARAMETERS[strategy])
    spec = read_nuisance_file(strategy)
    confounds = _select(pd.read_csv(confounds_file, sep="\t"), spec, run, source)
    _, sample_mask = _nilearn(str(bold), run, strategy=())
    if len(confounds) > 1:  # derivatives' first n/a: nilearn's fill, the second volume's value
        first = confounds.iloc[0].isna()
        confounds.loc[confounds.index[0], first] = confounds.iloc[1][first]
    return confounds, sample_mask
