"""Maps as NIfTI images named after BIDS derivatives, with JSON sidecars, written atomically.

The names follow XCP-D's ``<source>_stat-<stat>_boldmap.nii.gz``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from connscale._version import __version__
from connscale.io.atomic import write_json_atomic
from connscale.io.nifti import save_nifti_gz

if TYPE_CHECKING:
    from nibabel.spatialimages import SpatialImage


def threshold_label(value: float, prefix: str = "r") -> str:
    """Return a BIDS label for a threshold: 0.25 gives 'r025', 0.5 'r05', 0.01 'r001'."""
    text = f"{value:.6g}".replace("-", "neg").replace(".", "")
    return re.sub(r"[^A-Za-z0-9]", "", prefix + text)


def map_path(
    out_dir: str | os.PathLike,
    source: str,
    stat: str,
    *,
    desc: str | None = None,
    seg: str | None = None,
) -> Path:
    """``<out_dir>/<source>[_seg-<seg>]_stat-<stat>[_desc-<desc>]_boldmap.nii.gz``.

    A BIDS ``source`` (``sub-01_task-rest_desc-preproc``) keeps its entities but
    ``meas``, ``stat`` and ``desc``, and the name is built by
    :func:`connscale.io.bids.bids_name`; another is kept whole (``fmri1``).
    """
    from connscale.io.bids import bids_name, parse_bids_name

    try:
        entities = parse_bids_name(f"{source}_boldmap.nii.gz")
    except ValueError:
        entities = {}
    if "sub" in entities:
        kept = {
            k: v
            for k, v in entities.items()
            if k not in ("meas", "stat", "desc", "suffix", "extension")
        }
        name = bids_name(
            {**kept, "seg": seg, "stat": stat, "desc": desc or None},
            suffix="boldmap",
            extension=".nii.gz",
        )
        return Path(out_dir) / name
    stem = source if seg is None else f"{source}_seg-{seg}"
    stem += f"_stat-{stat}"
    if desc:
        stem += f"_desc-{desc}"
    return Path(out_dir) / f"{stem}_boldmap.nii.gz"


def map_sidecar(
    measure: str,
    description: str,
    *,
    n_nodes: int,
    source: str | os.PathLike | None = None,
    **parameters,
) -> dict:
    """Return the JSON sidecar of a map (keys after ECOSYSTEM.md's relmat sidecars)."""
    return {
        "Measure": measure,
        "MeasureDescription": description,
        **parameters,
        "NumberOfNodes": int(n_nodes),
        "Sources": [] if source is None else [str(source)],
        "Code": f"connscale {__version__}",
    }


def write_map(path: str | os.PathLike, img: SpatialImage, metadata: dict) -> tuple[Path, Path]:
    """Write ``img`` (gzipped NIfTI) and its sidecar beside it, atomically.

    Returns the image's and the sidecar's paths.
    """
    path = Path(path)
    if not path.name.endswith(".nii.gz"):
        raise ValueError(f"Maps are written as .nii.gz; got {path.name}.")
    save_nifti_gz(path, img)
    sidecar = path.with_name(path.name[: -len(".nii.gz")] + ".json")
    return path, write_json_atomic(sidecar, metadata)
