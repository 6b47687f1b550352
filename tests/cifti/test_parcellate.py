"""Parcellation of grayordinates (connscale.cifti.parcellate) against wb_command and Conte69."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import torch
from nibabel.cifti2 import Cifti2Image, ScalarAxis

from connscale._compute import MemoryLimitError
from connscale.cifti import parcellate, parcellate_cifti, parcellated_names, write_parcellated
from connscale.io.cifti import read_cifti_labels, read_cifti_scalars, read_cifti_series
from connscale.io.publish import OutputSet
from connscale.io.relmat import read_relmat_tsv
from tests._workbench import CONTE69_DLABEL, CONTE69_DTSERIES, CONTE69_PTSERIES, run_wb
from tests.cifti._models import brain_model, label_keys, save_dlabel, save_dtseries

N_TIMEPOINTS = 12


@pytest.fixture
def small(tmp_path):
    """A 35-grayordinate dtseries (standard normal) and its two-map dlabel."""
    model = brain_model()
    data = np.random.default_rng(1).standard_normal((N_TIMEPOINTS, len(model)))
    dtseries = save_dtseries(tmp_path / "small.dtseries.nii", data, model)
    dlabel = save_dlabel(tmp_path / "small.dlabel.nii", label_keys(len(model)), model)
    return dtseries, dlabel, data.astype(np.float32)


def _workbench(tmp_path, dtseries, dlabel, *options):
    """Return ``wb_command -cifti-parcellate DTSERIES DLABEL COLUMN OUT -method MEAN`` read back."""
    out = tmp_path / "wb.ptseries.nii"
    run_wb("-cifti-parcellate", dtseries, dlabel, "COLUMN", out, "-method", "MEAN", *options)
    return nib.load(out)


def test_equals_workbench_parcels_and_series(small, tmp_path):
    dtseries, dlabel, _ = small
    ours = parcellate_cifti(dtseries, dlabel, device="cpu")
    wb = _workbench(tmp_path, dtseries, dlabel)
    # Names, key order (not name order), vertices per surface, voxels, the volume grid.
    assert ours.parcels == wb.header.get_axis(1)
    assert ours.names == ["Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Empty"]
    assert ours.keys.tolist() == [1, 2, 3, 4, 5, 9]
    assert ours.series == wb.header.get_axis(0)
    expected = np.asarray(wb.dataobj)
    np.testing.assert_allclose(ours.data[:, :5], expected[:, :5], rtol=0, atol=1e-6)
    # The empty parcel is kept, as Workbench keeps it; Workbench fills it with 0, we with NaN.
    assert np.all(expected[:, 5] == 0) and np.all(np.isnan(ours.data[:, 5]))
    np.testing.assert_array_equal(ours.coverage, [1, 1, 1, 1, 1, 0])


def test_any_label_map_equals_workbench_on_that_map(small, tmp_path):
    dtseries, dlabel, _ = small
    second = tmp_path / "second.dlabel.nii"
    run_wb("-cifti-merge", second, "-cifti", dlabel, "-column", "2")
    wb = _workbench(tmp_path, dtseries, second)
    for map_index in (1, "second"):
        ours = parcellate_cifti(dtseries, dlabel, map_index=map_index, device="cpu")
        assert ours.parcels == wb.header.get_axis(1)
        np.testing.assert_allclose(ours.data, np.asarray(wb.dataobj), rtol=0, atol=1e-6)


def test_unusable_grayordinates_left_out_as_workbench_weights(small, tmp_path):
    dtseries, dlabel, data = small
    model = read_cifti_series(dtseries).brain_model
    data[4, 3] = np.nan  # a grayordinate with a missing value
    data[:, 7] = 5.0  # a constant one
    data[:, 30] = 0.0  # an empty one (all zeros)
    save_dtseries(dtseries, data, model)
    usable = np.ones(len(model), bool)
    usable[[3, 7, 30]] = False
    weights = tmp_path / "usable.dscalar.nii"
    nib.save(Cifti2Image(usable[None].astype(np.float32), (ScalarAxis(["usable"]), model)), weights)
    wb = _workbench(tmp_path, dtseries, dlabel, "-cifti-weights", weights, "-only-numeric")
    ours = parcellate_cifti(dtseries, dlabel, device="cpu")
    np.testing.assert_allclose(ours.data[:, :5], np.asarray(wb.dataobj)[:, :5], atol=1e-6)
    labels = read_cifti_labels(dlabel).labels
    for key, coverage in zip(ours.keys, ours.coverage):
        members = labels == key
        count = np.count_nonzero(members & usable)
        assert coverage == (count / members.sum() if members.any() else 0.0)
    assert 0 < ours.coverage.min(where=ours.keys != 9, initial=1) < 1


def test_equals_the_conte69_ptseries():
    """Map 1 of the Conte69 dlabel, matched onto the dtseries by (structure, vertex).

    Its ptseries was made by Workbench's legacy mode (parcels that hold data only).
    """
    dense = read_cifti_series(CONTE69_DTSERIES)
    labels = read_cifti_labels(CONTE69_DLABEL, map_index=0)
    reference = read_cifti_series(CONTE69_PTSERIES)
    model = labels.brain_model
    where = {(str(s), int(v)): i for i, (s, v) in enumerate(zip(model.name, model.vertex))}
    bm = dense.brain_model
    take = [where[(str(s), int(v))] for s, v in zip(bm.name, bm.vertex)]
    ours = parcellate(dense.data, labels.labels[take], device="cpu")
    assert [labels.names[k] for k in ours.keys] == list(reference.brain_model.name)
    np.testing.assert_allclose(ours.series, reference.data, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours.coverage, 1.0)


def test_coverage_counts_and_min_coverage():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 10))
    labels = np.array([1, 1, 1, 1, 2, 2, 3, 3, 3, 0])
    x[3, 0] = np.inf
    x[:, 4] = 2.5
    full = parcellate(x, labels, device="cpu")
    np.testing.assert_array_equal(full.coverage, [0.75, 0.5, 1.0])
    np.testing.assert_array_equal(full.sizes, [4, 2, 3])
    np.testing.assert_allclose(full.series[:, 0], x[:, 1:4].mean(1), atol=1e-12)
    np.testing.assert_allclose(full.series[:, 1], x[:, 5], atol=1e-12)
    kept = parcellate(x, labels, min_coverage=0.75, device="cpu")
    assert np.isnan(kept.series[:, 1]).all() and not np.isnan(kept.series[:, [0, 2]]).any()
    np.testing.assert_array_equal(kept.series[:, [0, 2]], full.series[:, [0, 2]])
    only_full = parcellate(x, labels, min_coverage=0.76, device="cpu")
    assert np.isnan(only_full.series[:, :2]).all() and not np.isnan(only_full.series[:, 2]).any()
    # A mask leaves more out; the coverage counts it.
    mask = np.ones(10, bool)
    mask[6] = False
    masked = parcellate(x, labels, mask=mask, device="cpu")
    np.testing.assert_array_equal(masked.coverage, [0.75, 0.5, 2 / 3])
    np.testing.assert_allclose(masked.series[:, 2], x[:, 7:9].mean(1), atol=1e-12)


def test_blocks_of_grayordinates_under_a_memory_limit():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 1000)).astype(np.float32)
    x[7, 5] = np.nan
    labels = rng.integers(0, 6, 1000)
    whole = parcellate(x, labels, device="cpu")
    blocks = parcellate(x, labels, device="cpu", memory_limit="100KB")  # ~100 grayordinates a block
    np.testing.assert_allclose(blocks.series, whole.series, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(blocks.coverage, whole.coverage)
    with pytest.raises(MemoryLimitError):
        parcellate(x, labels, device="cpu", memory_limit="12KB")


def test_fortran_and_c_ordered_series_agree(tmp_path):
    """Series stored grayordinate by grayordinate (as CIFTI files) or time point by time point."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 600)).astype(np.float32)
    x[:, 3] = 1.0
    x[11, 9] = np.inf
    labels = rng.integers(0, 8, 600)
    stored = np.lib.format.open_memmap(tmp_path / "x.npy", "w+", np.float32, x.shape, True)
    stored[:] = x
    stored.flush()
    fortran = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert fortran.flags.f_contiguous and not fortran.flags.writeable
    c_order = parcellate(x, labels, device="cpu", memory_limit="100KB")
    for series in (np.asfortranarray(x), fortran):
        result = parcellate(series, labels, device="cpu", memory_limit="100KB")
        np.testing.assert_allclose(result.series, c_order.series, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(result.coverage, c_order.coverage)
    reversed_ = parcellate(x[::-1], labels, device="cpu")  # a view torch cannot take
    np.testing.assert_allclose(reversed_.series, c_order.series[::-1], rtol=0, atol=1e-12)
    usable = (labels == 1) & np.isfinite(x).all(0) & (np.ptp(x, axis=0) > 0)
    np.testing.assert_allclose(c_order.series[:, 0], x[:, usable].mean(1), atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_equals_cpu():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 5000)).astype(np.float32)
    x[:, 10] = np.nan
    labels = rng.integers(0, 50, 5000)
    cpu, cuda = (parcellate(x, labels, device=d) for d in ("cpu", "cuda"))
    np.testing.assert_allclose(cuda.series, cpu.series, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(cuda.coverage, cpu.coverage)


def test_written_outputs(small, tmp_path):
    dtseries, dlabel, data = small
    labels = read_cifti_labels(dlabel).labels
    data[:, np.flatnonzero(labels == 1)[0]] = 0.0  # Alpha: 4 of 5 grayordinates with data
    save_dtseries(dtseries, data, read_cifti_series(dtseries).brain_model)
    result = parcellate_cifti(dtseries, dlabel, min_coverage=0.9, device="cpu")
    out = tmp_path / "out"
    out.mkdir()
    stem = "sub-01_task-rest_space-fsLR_seg-small"
    paths = write_parcellated(result, out, stem, source=dtseries)
    assert sorted(p.name for p in out.iterdir()) == sorted(parcellated_names(stem).values())
    assert paths["ptseries"].name == f"{stem}_stat-mean_timeseries.ptseries.nii"
    missing = [0, 5]  # Alpha (coverage 0.8) and Empty (no grayordinate)
    np.testing.assert_array_equal(result.coverage, [0.8, 1, 1, 1, 1, 0])
    assert (
        np.isnan(result.data[:, missing]).all()
        and np.isfinite(np.delete(result.data, missing, 1)).all()
    )
    ptseries = read_cifti_series(paths["ptseries"])
    assert ptseries.brain_model == result.parcels and ptseries.t_r == pytest.approx(0.8)
    np.testing.assert_array_equal(ptseries.data, result.data)
    columns = paths["timeseries"].read_text().splitlines()[0].split("\t")
    assert columns == result.names
    table = np.loadtxt(paths["timeseries"], delimiter="\t", skiprows=1)  # NaN as "nan"
    np.testing.assert_allclose(table, result.data, rtol=1e-7)
    pconn = nib.load(paths["pconn"])
    assert pconn.header.get_axis(0) == result.parcels == pconn.header.get_axis(1)
    matrix = np.asarray(pconn.dataobj)
    kept = [1, 2, 3, 4]
    np.testing.assert_allclose(
        matrix[np.ix_(kept, kept)], np.corrcoef(result.data[:, kept].T), atol=1e-6
    )
    assert np.isnan(matrix[missing]).all() and np.isnan(matrix[:, missing]).all()
    relmat, header = read_relmat_tsv(paths["relmat"])
    assert header == result.names
    np.testing.assert_allclose(relmat, matrix, rtol=1e-6)
    assert json.loads(paths["relmat_sidecar"].read_text())["NumberOfNodes"] == 6
    coverage, names, parcels = read_cifti_scalars(paths["coverage"])
    assert names == ["coverage"] and parcels == result.parcels
    np.testing.assert_allclose(coverage[0], result.coverage)
    for kind, what in (("ptseries", "Parcel Series"), ("pconn", "Parcel"), ("coverage", "Parcel")):
        assert what in run_wb("-file-information", paths[kind])  # Workbench reads them


def test_a_label_file_on_another_brain_model_is_refused(small, tmp_path):
    dtseries, _, _ = small
    other = brain_model(shift_vertex=True)
    dlabel = save_dlabel(tmp_path / "other.dlabel.nii", label_keys(len(other)), other)
    out = tmp_path / "out"
    with OutputSet(out, "sub-01", command="test") as outputs:
        with pytest.raises(ValueError, match="another brain model") as error:
            write_parcellated(parcellate_cifti(dtseries, dlabel, device="cpu"), outputs, "sub-01")
    message = str(error.value)
    assert "\n" not in message and "other.dlabel.nii" in message and "small.dtseries" in message
    assert not [p for p in out.iterdir() if p.name.startswith("sub-01_")]


@pytest.mark.parametrize(
    ("labels", "keys", "match"),
    [
        ([1, 2], None, "one key per grayordinate"),
        ([1.5, 1, 2], None, "integer label keys"),
        ([0, 0, 0], None, "No parcel"),
        ([1, 2, 3], [3, 1], "distinct label keys, ascending"),
    ],
)
def test_bad_labels_are_one_line_errors(labels, keys, match):
    with pytest.raises(ValueError, match=match):
        parcellate(np.ones((4, 3)), labels, keys=keys, device="cpu")


def test_empty_series_are_refused():
    with pytest.raises(ValueError, match="non-empty numeric array"):
        parcellate(np.ones((0, 3)), [1, 1, 2], device="cpu")
