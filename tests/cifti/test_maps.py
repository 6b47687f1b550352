"""``connscale maps X.dtseries.nii``: the maps of grayordinates in one dscalar, and seeds."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

import connscale
from connscale.cifti import parse_grayordinate, seed_index
from connscale.cli.main import main
from tests._workbench import CONTE69_DSCALAR, run_wb
from tests.cifti._models import AFFINE, brain_model, save_dtseries

N_TIMEPOINTS = 40
STEM = "sub-01_task-rest_space-fsLR_den-91k"


@pytest.fixture
def dense(tmp_path):
    """A 35-grayordinate dtseries of two networks (surfaces and voxels mixed)."""
    model = brain_model()
    rng = np.random.default_rng(5)
    signals = rng.standard_normal((N_TIMEPOINTS, 2))
    network = np.arange(len(model)) % 2
    x = rng.standard_normal((N_TIMEPOINTS, len(model))) + 1.2 * signals[:, network]
    x = x.astype(np.float32)
    return save_dtseries(tmp_path / f"{STEM}_bold.dtseries.nii", x, model), x, model


def _maps(out):
    """Return the dscalar's maps by name, its brain model and its sidecar."""
    image = nib.load(out / f"{STEM}_boldmap.dscalar.nii")
    names = list(image.header.get_axis(0).name)
    data = np.asarray(image.dataobj)
    sidecar = json.loads((out / f"{STEM}_boldmap.json").read_text())
    return dict(zip(names, data)), image.header.get_axis(1), sidecar


def test_dscalar_maps_equal_the_maps_of_the_array(dense, tmp_path):
    path, x, model = dense
    out = tmp_path / "out"
    options = ["--degree", "0.2", "--weighted", "--ecm", "--gcor", "--device", "cpu", "-q"]
    assert main(["maps", str(path), "--out", str(out), *options]) == 0
    maps, axis, sidecar = _maps(out)
    assert axis == model
    assert list(maps) == [
        "stat-degree_desc-r02",
        "stat-weighteddegree_desc-r02",
        "stat-ecm",
        "stat-gcor",
    ]
    binary = connscale.degree_centrality(x, 0.2, device="cpu")
    weighted = connscale.degree_centrality(x, 0.2, weighted=True, device="cpu")
    np.testing.assert_array_equal(maps["stat-degree_desc-r02"], binary)
    np.testing.assert_allclose(maps["stat-weighteddegree_desc-r02"], weighted, rtol=1e-6)
    r = np.corrcoef(x.T.astype(np.float64))
    np.testing.assert_array_equal(maps["stat-degree_desc-r02"], (r > 0.2).sum(1) - 1)
    ecm = connscale.eigenvector_centrality(x, device="cpu")
    np.testing.assert_allclose(maps["stat-ecm"], ecm, rtol=1e-6, atol=1e-7)
    gcor = connscale.global_correlation(x, device="cpu")
    np.testing.assert_allclose(maps["stat-gcor"], gcor, rtol=1e-6, atol=1e-7)
    assert "Dense Scalar" in run_wb("-file-information", out / f"{STEM}_boldmap.dscalar.nii")
    entries = sidecar["Maps"]
    assert [e["MapName"] for e in entries] == list(maps)
    assert entries[0]["Nodes"] == "grayordinates" and entries[0]["NumberOfNodes"] == len(model)


def test_seeds_by_index_vertex_and_coordinate(dense, tmp_path):
    path, x, model = dense
    thalamus = np.flatnonzero(model.volume_mask)[2]
    xyz = AFFINE[:3, :3] @ model.voxel[thalamus] + AFFINE[:3, 3] + [0.4, -0.3, 0.2]
    right_vertex_8 = 10 + 3  # CortexRight's vertices are 1, 2, 4, 8, ... after 10 left ones
    out = tmp_path / "out"
    command = ["maps", str(path), "--out", str(out), "--device", "cpu", "-q"]
    command += ["--seed=" + ",".join(f"{v:g}" for v in xyz)]
    command += ["--seed-grayordinate", "12", "--seed-grayordinate", "CORTEX_RIGHT:8"]
    assert main(command) == 0
    maps, _, sidecar = _maps(out)
    r = np.corrcoef(x.T.astype(np.float64))
    for name, column in (("seed1", thalamus), ("seed2", 12), ("seed3", right_vertex_8)):
        np.testing.assert_allclose(maps[f"stat-seedcorr_desc-{name}"], r[column], atol=1e-6)
    described = [e["MeasureDescription"] for e in sidecar["Maps"]]
    assert f"grayordinate {thalamus} (THALAMUS_LEFT voxel" in described[0]
    assert "grayordinate 13 (CORTEX_RIGHT vertex 8; seed CORTEX_RIGHT:8)" in described[2]


def test_seed_index_resolves_each_form():
    model = brain_model()
    assert seed_index(model, 34) == 34
    assert seed_index(model, "7") == 7
    assert seed_index(model, "CortexLeft:14") == 9
    assert seed_index(model, ("CIFTI_STRUCTURE_CORTEX_RIGHT", 17)) == 17
    first_voxel = np.flatnonzero(model.volume_mask)[0]
    xyz = AFFINE[:3, :3] @ model.voxel[first_voxel] + AFFINE[:3, 3]
    assert seed_index(model, tuple(xyz)) == first_voxel
    assert parse_grayordinate(" CORTEX_LEFT : 3 ") == ("CORTEX_LEFT", 3)


@pytest.mark.parametrize(
    ("seed", "match"),
    [
        (35, "out of range"),
        ("CORTEX_LEFT:1", "Vertex 1 of CORTEX_LEFT is not a grayordinate"),
        ("THALAMUS_LEFT:1", "THALAMUS_LEFT is not a surface structure"),
        ("NOWHERE:1", "not a CIFTI brain structure"),
        ("left", "INDEX or STRUCTURE:VERTEX"),
        ((60.0, 0.0, 0.0), "outside the volume part"),
    ],
)
def test_seeds_outside_the_brain_model_are_one_line_errors(seed, match):
    with pytest.raises(ValueError, match=match) as error:
        seed_index(brain_model(), seed)
    assert "\n" not in str(error.value)


def test_cli_refuses_bad_seeds_and_nifti_options_publishing_nothing(dense, tmp_path, capsys):
    path, _, _ = dense
    out = tmp_path / "out"
    common = ["maps", str(path), "--out", str(out), "--device", "cpu", "-q"]
    assert main([*common, "--seed=60,0,0"]) == 2
    assert "outside the volume part" in capsys.readouterr().err
    assert not list(out.glob("*.dscalar.nii"))
    assert main([*common, "--gcor", "--seed-radius", "4", "--seed=0,0,0"]) == 2
    assert "--seed-radius applies to a NIfTI INPUT" in capsys.readouterr().err
    assert main([*common, "--seed-grayordinate", "CORTEX_LEFT-3"]) == 2
    assert "INDEX or STRUCTURE:VERTEX" in capsys.readouterr().err
    assert main([*common, "--gcor", "--memory-limit", "4KB"]) == 2  # the series: 40 x 35 x 4 B
    assert f"Reading {STEM}_bold.dtseries.nii" in capsys.readouterr().err
    assert not list(out.glob("*.dscalar.nii"))
    assert main(["maps", str(CONTE69_DSCALAR), "--gcor", "--out", str(out), "-q"]) == 2
    assert "dense time series (.dtseries.nii)" in capsys.readouterr().err
