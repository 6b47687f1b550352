"""Index a connscale output tree with pybids, as a user would, and check what it reads.

``BIDSLayout(out, validate=False, derivatives=True)`` and ``BIDSLayout(source,
validate=False, derivatives=[out])`` (metadata indexed, pybids' default) must load;
every suffix written is found by a query; the entities pybids reads from each name
(connscale's configuration for ``meas`` and ``stat``) are those it was written with;
no sidecar key is an entity name; no path in a sidecar or in ``DatasetLinks`` is
absolute; ``NonNegative`` is a boolean.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from connscale.io.bids import CONFIG_PATH, from_pybids, parse_bids_name


def _entity_names() -> set:
    from bids.layout.models import Config

    names = {"meas", "stat"}
    for config in ("bids", "derivatives"):
        names |= set(Config.load(config).entities)
    return names


def _written(out: Path) -> dict:
    """``{path: entities}`` of every BIDS-named file under ``out`` (hidden ones left out)."""
    found = {}
    for path in out.rglob("*"):
        if not path.is_file() or any(p.startswith(".") for p in path.relative_to(out).parts):
            continue
        try:
            found[path] = parse_bids_name(path)
        except ValueError:
            continue
    return found


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _check_sidecars(out: Path, written: dict, entity_names: set) -> None:
    stems = {str(p).split(".")[0] for p in written if not p.name.endswith(".json")}
    for path in written:
        if not path.name.endswith(".json") or str(path)[: -len(".json")] not in stems:
            continue
        meta = json.loads(path.read_text())
        assert not set(meta) & entity_names, (path.name, set(meta) & entity_names)
        assert not [s for s in _strings(meta) if os.path.isabs(s)], (path.name, meta)
        if "NonNegative" in meta:
            assert isinstance(meta["NonNegative"], bool), path.name
    description = json.loads((out / "dataset_description.json").read_text())
    links = description.get("DatasetLinks", {})
    assert not [v for v in links.values() if os.path.isabs(v) or v.startswith("file:")], links


def _check_layout(layout, written: dict, *, known: set) -> None:
    files = {Path(f.path): f for f in layout.get(return_type="object") if Path(f.path) in written}
    assert set(files) == set(written), sorted(p.name for p in set(written) - set(files))
    for path, entities in written.items():
        read = files[path].get_entities(metadata=False)
        expected = {k: v for k, v in entities.items() if k not in ("suffix", "extension")}
        assert from_pybids(read) == {k: v for k, v in expected.items() if k in known}, path.name
        assert (read["suffix"], read["extension"]) == (entities["suffix"], entities["extension"])
    for suffix in {e["suffix"] for e in written.values()}:
        found = {Path(p) for p in layout.get(suffix=suffix, return_type="filename")}
        assert {p for p, e in written.items() if e["suffix"] == suffix} <= found, suffix
    for path in written:
        layout.get_metadata(str(path))


def assert_pybids_reads(out, *, source=None) -> None:
    """Check that pybids indexes the output tree ``out`` (of the dataset ``source``)."""
    from bids import BIDSLayout

    out = Path(out)
    written = _written(out)
    assert written, f"no BIDS-named file under {out}"
    names = _entity_names()
    _check_sidecars(out, written, names)
    everything = {e for entities in written.values() for e in entities}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # derivatives=True: out has no derivatives/ folder
        alone = BIDSLayout(out, validate=False, derivatives=True)
    _check_layout(alone, written, known=everything - {"meas", "stat"})
    own = BIDSLayout(out, validate=False, config=[str(CONFIG_PATH)])
    _check_layout(own, written, known=everything)
    if source is not None:
        layout = BIDSLayout(source, validate=False, derivatives=[out])
        [derivative] = layout.derivatives.values()
        _check_layout(derivative, written, known=everything - {"meas", "stat"})
