"""Atlases by name, through TemplateFlow's client.

An atlas of TemplateFlow is named by its ``atlas-`` entity (``Schaefer2018``,
``DiFuMo``...) and, when it has several, its ``desc-`` one
(``400Parcels7Networks``, ``256dimensions``); a file of it lies in one
template (``tpl-``, the space of the runs it parcellates) at one resolution
(``res-``), as a labels image (``_dseg.nii.gz``) or probabilistic maps
(``_probseg.nii.gz``), its region names in the ``.tsv`` beside it::

    tpl-MNI152NLin2009cAsym/tpl-MNI152NLin2009cAsym_res-02_atlas-Schaefer2018_desc-400Parcels7Networks_dseg.nii.gz
    tpl-MNI152NLin2009cAsym/tpl-MNI152NLin2009cAsym_atlas-Schaefer2018_desc-400Parcels7Networks_dseg.tsv

:func:`get_atlas` lists what TemplateFlow holds (its skeleton, installed in
``TEMPLATEFLOW_HOME`` on first use, names every file), picks the file and
has TemplateFlow fetch it: the first use of a file downloads it into
``TEMPLATEFLOW_HOME`` (TemplateFlow's cache; ``$HOME/.cache/templateflow``
by default), later uses read it there. ``templateflow`` is imported here
only, inside the functions.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TemplateFlowAtlas", "check_atlas_name", "get_atlas", "templateflow_home"]

#: The suffixes of an atlas image: labels, then probabilistic maps.
SUFFIXES = ("dseg", "probseg")

_ENTITY = re.compile(r"_(res|desc)-([a-zA-Z0-9]+)")


@dataclass(frozen=True)
class TemplateFlowAtlas:
    """One atlas file of TemplateFlow, fetched.

    Attributes
    ----------
    image : Path
        The ``_dseg.nii.gz`` or ``_probseg.nii.gz`` in ``TEMPLATEFLOW_HOME``.
    labels : Path or None
        The ``.tsv`` of its region names, None where TemplateFlow has none.
    template : str
        Its ``tpl-`` entity (the space).
    resolution : int or None
        Its ``res-`` entity.
    """

    image: Path
    labels: Path | None
    template: str
    resolution: int | None


@dataclass(frozen=True)
class _Entry:
    """A file of the atlas in TemplateFlow's listing."""

    template: str
    resolution: int | None
    desc: str | None
    suffix: str


def templateflow_home() -> Path:
    """Return TemplateFlow's cache folder: ``TEMPLATEFLOW_HOME``, else its default."""
    from templateflow.conf.env import get_templateflow_home

    return get_templateflow_home()


@functools.lru_cache(maxsize=2)
def _client(root: str):
    """TemplateFlow's client on ``root`` (its file index is built once)."""
    from templateflow.client import TemplateFlowClient

    return TemplateFlowClient(root=root)


def _entries(client, name: str) -> list[_Entry]:
    """Return the atlas's images in TemplateFlow's listing."""
    entries = []
    for path in client.ls(None, atlas=name, extension=".nii.gz"):
        suffix = path.name[: -len(".nii.gz")].rsplit("_", 1)[-1]
        if suffix not in SUFFIXES or not path.parent.name.startswith("tpl-"):
            continue
        entities = dict(_ENTITY.findall(path.name))
        res = None if entities.get("res") is None else int(entities["res"])
        entries.append(_Entry(path.parent.name[4:], res, entities.get("desc"), suffix))
    return entries


def _one_of(values) -> str:
    return ", ".join(sorted({str(v) for v in values}))


def _desc_entries(entries: list[_Entry], name: str, desc: str | None, home: Path) -> list[_Entry]:
    """Return the entries of ``desc``; a one-line error listing what exists when none."""
    if not entries:
        raise ValueError(
            f"TemplateFlow has no atlas {name!r} (TEMPLATEFLOW_HOME={home}); see "
            "https://www.templateflow.org for its atlases, or give --atlas a file."
        )
    descs = {e.desc for e in entries}
    if desc is None and len(descs) > 1:
        raise ValueError(
            f"TemplateFlow's atlas {name} has several versions; choose one with --atlas-desc: "
            f"{_one_of(d for d in descs if d is not None)}."
        )
    if desc is not None and desc not in descs:
        raise ValueError(
            f"TemplateFlow's atlas {name} has no desc {desc!r}; it has: "
            f"{_one_of(d for d in descs if d is not None) or '(no desc)'}."
        )
    return [e for e in entries if e.desc == (desc if desc is not None else next(iter(descs)))]


def _what(name: str, desc: str | None) -> str:
    return f"atlas-{name}" + ("" if desc is None else f"_desc-{desc}")


def _resolution(client, chosen: list[_Entry], template: str, zooms) -> int | None:
    """Return the resolution whose voxel size is nearest ``zooms`` (ties: the finer)."""
    resolutions = sorted({e.resolution for e in chosen}, key=lambda r: -1 if r is None else r)
    if len(resolutions) == 1 or zooms is None:
        return resolutions[0]
    grids = client.get_metadata(template).get("res", {})
    sizes = {int(k): v.get("zooms") for k, v in grids.items() if isinstance(v, dict)}

    def distance(res):
        size = sizes.get(res)
        if size is None:
            return float("inf")
        return max(abs(float(a) - float(b)) for a, b in zip(size, zooms))

    return min(resolutions, key=lambda r: (distance(r), -1 if r is None else r))


def check_atlas_name(name: str, desc: str | None = None) -> list[str]:
    """Check that TemplateFlow has the atlas (and its desc); return the templates that hold it.

    Raises
    ------
    ValueError
        One line listing what TemplateFlow has: no such atlas, no such desc,
        or several descs and none chosen.
    """
    home = templateflow_home()
    entries = _desc_entries(_entries(_client(str(home)), name), name, desc, home)
    return sorted({e.template for e in entries})


def get_atlas(
    name: str,
    *,
    template: str,
    desc: str | None = None,
    resolution: int | None = None,
    zooms=None,
) -> TemplateFlowAtlas:
    """Return an atlas of TemplateFlow in a template, fetching it on its first use.

    Parameters
    ----------
    name : str
        The ``atlas-`` entity (``Schaefer2018``, ``DiFuMo``...).
    template : str
        The template (the runs' space, e.g. ``MNI152NLin2009cAsym``).
    desc : str or None
        The ``desc-`` entity; None when the atlas has one version only.
    resolution : int or None
        The ``res-`` entity wanted (fMRIPrep's ``res-2`` is TemplateFlow's
        ``res-02``); None: the resolution whose voxel size (the template's
        ``template_description.json``) is nearest ``zooms``.
    zooms : sequence of 3 float or None
        The runs' voxel size in mm, when ``resolution`` is None.

    Returns
    -------
    TemplateFlowAtlas
        Labels (``dseg``) where TemplateFlow has both for this version.

    Raises
    ------
    ValueError
        One line listing what TemplateFlow has: no such atlas, desc,
        template or resolution.
    RuntimeError
        The file is not in ``TEMPLATEFLOW_HOME`` and could not be downloaded
        (no network): the message says how to pre-fetch it.
    """
    home = templateflow_home()
    client = _client(str(home))
    chosen = _desc_entries(_entries(client, name), name, desc, home)
    desc = chosen[0].desc
    here = [e for e in chosen if e.template == template]
    if not here:
        raise ValueError(
            f"TemplateFlow has {_what(name, desc)} in {_one_of(e.template for e in chosen)}, "
            f"not in {template}."
        )
    if resolution is None:
        resolution = _resolution(client, here, template, zooms)
    elif resolution not in {e.resolution for e in here}:
        raise ValueError(
            f"TemplateFlow has {_what(name, desc)} in {template} at res "
            f"{_one_of(e.resolution for e in here)}, not at res {resolution}."
        )
    suffix = min((e.suffix for e in here if e.resolution == resolution), key=SUFFIXES.index)
    query = {"atlas": name, "desc": desc, "resolution": resolution, "suffix": suffix}
    image = _fetch(client, template, {**query, "extension": ".nii.gz"}, home)
    tables = [p for p in client.ls(template, **{**query, "resolution": None}, extension=".tsv")]
    tables += [p for p in client.ls(template, **query, extension=".tsv")]
    labels = None
    if tables:
        labels = _fetch(client, template, _query_of(tables[-1], query), home)
    return TemplateFlowAtlas(image, labels, template, resolution)


def _query_of(table: Path, query: dict) -> dict:
    """Return the query of one labels table (with or without a res- entity)."""
    res = dict(_ENTITY.findall(table.name)).get("res")
    return {**query, "resolution": None if res is None else int(res), "extension": ".tsv"}


def _prefetch_command(template: str, query: dict) -> str:
    args = ", ".join([repr(template)] + [f"{k}={v!r}" for k, v in query.items()])
    return f'python -c "import templateflow.api as t; t.get({args})"'


def _fetch(client, template: str, query: dict, home: Path) -> Path:
    """``client.get`` of one file, its download failure said in one line."""
    try:
        path = client.get(template, **query)
    except (OSError, RuntimeError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise RuntimeError(
            f"TemplateFlow could not download tpl-{template} {query} into "
            f"TEMPLATEFLOW_HOME={home} ({reason}): the first use of an atlas downloads it; on a "
            f"machine with network, pre-fetch it with the same TEMPLATEFLOW_HOME: "
            f"{_prefetch_command(template, query)}"
        ) from exc
    if isinstance(path, list):  # several files matched: TemplateFlow's listing is ambiguous
        raise ValueError(
            f"TemplateFlow matches {len(path)} files for tpl-{template} {query}: "
            f"{', '.join(p.name for p in path)}."
        )
    return Path(path)
