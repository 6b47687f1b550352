"""A small TemplateFlow home, in TemplateFlow's own layout, for tests without network.

``tpl-MNI152NLin2009cAsym`` holds a labels atlas ``Test`` (two versions,
``desc-4Parcels`` and ``desc-2Parcels``, at res-02; the second also at res-03,
that file empty as in TemplateFlow's skeleton: not downloaded yet) with its
``.tsv``, and probabilistic maps ``TestMaps`` (``desc-3Maps``, 4-D) with a
DiFuMo-style ``.tsv`` (``Component``, ``Difumo_names``). The atlases cover the
grid of :mod:`tests.bids._fmriprep`'s runs (3 mm voxels from the origin) at
2 mm.
"""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np

TEMPLATE = "MNI152NLin2009cAsym"
SHAPE_2MM = (9, 9, 8)
AFFINE_2MM = np.diag([2.0, 2.0, 2.0, 1.0])


def _labels(n_regions: int) -> np.ndarray:
    """Labels 1..n in slabs along x (background at the border), each on the runs' 3 mm grid."""
    labels = np.zeros(SHAPE_2MM, dtype=np.int16)
    inner = np.arange(1, SHAPE_2MM[0] - 1)
    for x in inner:
        labels[x, 1:-1, 1:-1] = 1 + int((x - 0.5) * n_regions / len(inner))
    return labels


def test_maps(shape=SHAPE_2MM, n_maps: int = 3, seed: int = 0) -> np.ndarray:
    """Overlapping smooth maps along x, plus a little noise (float32, >= 0)."""
    rng = np.random.default_rng(seed)
    x = np.arange(shape[0])[:, None, None, None]
    centres = np.linspace(1, shape[0] - 2, n_maps)
    maps = np.exp(-((x - centres) ** 2) / 4.0) * np.ones((1, *shape[1:], 1))
    maps = maps + 0.05 * rng.random((*shape, n_maps))
    maps[0], maps[-1] = 0, 0
    return maps.astype(np.float32)


def make_templateflow(home: Path) -> Path:
    """Write the TemplateFlow home; return it."""
    folder = home / f"tpl-{TEMPLATE}"
    folder.mkdir(parents=True, exist_ok=True)
    (home / "dataset_description.json").write_text(
        json.dumps({"Name": "TemplateFlow (test)", "BIDSVersion": "1.1.0"})
    )
    zooms = {"02": [2.0, 2.0, 2.0], "03": [3.0, 3.0, 3.0]}
    (folder / "template_description.json").write_text(
        json.dumps({"Name": TEMPLATE, "res": {k: {"zooms": v} for k, v in zooms.items()}})
    )
    prefix = f"tpl-{TEMPLATE}"
    for n in (4, 2):
        nib.save(
            nib.Nifti1Image(_labels(n), AFFINE_2MM),
            folder / f"{prefix}_res-02_atlas-Test_desc-{n}Parcels_dseg.nii.gz",
        )
        rows = "".join(f"{i}\tParcel{i}of{n}\t#000000\n" for i in range(1, n + 1))
        (folder / f"{prefix}_atlas-Test_desc-{n}Parcels_dseg.tsv").write_text(
            "index\tname\tcolor\n" + rows
        )
    (folder / f"{prefix}_res-03_atlas-Test_desc-2Parcels_dseg.nii.gz").write_bytes(b"")
    nib.save(
        nib.Nifti1Image(test_maps(), AFFINE_2MM),
        folder / f"{prefix}_res-02_atlas-TestMaps_desc-3Maps_probseg.nii.gz",
    )
    rows = "".join(f"{i}\tMap {i} LH\tVis\n" for i in range(1, 4))
    (folder / f"{prefix}_atlas-TestMaps_desc-3Maps_probseg.tsv").write_text(
        "Component\tDifumo_names\tYeo_networks7\n" + rows
    )
    return home
