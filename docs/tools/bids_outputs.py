"""List what the BIDS-App writes, from a real run: ``docs/bids_outputs.md``'s tables.

Runs ``connscale bids`` (participant level with every measure, then the group
level) on a small fMRIPrep-shaped tree made by ``tests/bids/_fmriprep.py``, in
connscale's and in XCP-D's spelling, and prints one Markdown table per level:
each file name with the run's entities replaced by placeholders, and the keys
of its JSON sidecar. Run from the repository root::

    PYTHONPATH=src python docs/tools/bids_outputs.py > /tmp/tables.md
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import warnings
from pathlib import Path

import nibabel as nib

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bids._fmriprep import ATLAS, atlas_img, make_fmriprep  # noqa: E402

from connscale.bidsapp.group import run_group  # noqa: E402
from connscale.bidsapp.participant import run_participant  # noqa: E402

RUNS = [("01", None, "rest", None), ("02", None, "rest", None), ("03", None, "rest", None)]
RUNS += [("04", None, "rest", None)]
MEASURES = ["fc", "timeseries", "dfc", "pairs", "voxelfc", "maps", "networks", "alff", "reho"]

_GENERIC = [
    (r"sub-0[1-4]", "sub-<label>"),
    (r"task-rest", "task-<task>"),
    (r"space-MNI152NLin2009cAsym", "space-<space>"),
    (r"seg-Slab4", "seg-<atlas>"),
    (r"atlas-Slab4", "atlas-<atlas>"),
    (r"desc-scrubbing", "desc-<strategy>"),
    (r"_\d{8}T\d{6}Z?", "_<when>"),
    (r"pid\d+", "pid<pid>"),
    (r"state\d+", "state<j>"),
]


def _generic(name: str) -> str:
    for pattern, placeholder in _GENERIC:
        name = re.sub(pattern, placeholder, name)
    return name


def _run(folder: Path, spelling: str) -> Path:
    tree = make_fmriprep(folder / "fmriprep", RUNS)
    nib.save(atlas_img(), folder / ATLAS)
    participants = folder / "participants.tsv"
    participants.write_text("participant_id\tdx\nsub-01\tA\nsub-02\tB\nsub-03\tA\nsub-04\tB\n")
    out = folder / f"out-{spelling}"
    run_participant(
        tree,
        out,
        atlas=folder / ATLAS,
        atlas_name="Slab4",
        strategy="scrubbing",
        strategy_params={"motion": "basic", "wm_csf": "basic", "fd_threshold": 0.5, "scrub": 0},
        measures=MEASURES,
        window_length=20,
        n_atoms=2,
        output_spelling=spelling,
        backend="serial",
    )
    if spelling == "giga":
        run_group(
            out,
            atlas_name="Slab4",
            strategy="scrubbing",
            participants=participants,
            target="dx",
            folds=2,
            repeats=1,
            n_states=2,
        )
    return out


def _rows(out: Path) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if path.is_dir() or any(p.startswith(".") for p in rel.parts):
            continue
        keys: list[str] = []
        if path.suffix == ".json" and not path.name.endswith(("_manifest.json", "_log.json")):
            data = json.loads(path.read_text())
            keys = sorted(data) if isinstance(data, dict) else []
        rows.setdefault(_generic(str(rel)), keys)
    return rows


def _table(rows: dict[str, list[str]]) -> str:
    lines = ["| file | sidecar keys (JSON files) |", "| --- | --- |"]
    for name, keys in rows.items():
        shown = ", ".join(f"`{k}`" for k in keys)
        lines.append(f"| `{name}` | {shown} |")
    return "\n".join(lines)


def main() -> None:
    """Print the tables of both spellings."""
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        for spelling in ("giga", "xcpd"):
            out = _run(Path(tmp) / spelling, spelling)
            print(f"## {spelling}\n\n{_table(_rows(out))}\n")


if __name__ == "__main__":
    main()
