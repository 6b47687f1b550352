"""CIFTI-2 reading and writing (connscale.io.cifti) against nibabel and Workbench."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest
from nibabel.cifti2 import BrainModelAxis, Cifti2Image, LabelAxis, ParcelsAxis, SeriesAxis

from connscale.io.cifti import (
    CONVERT_HINT,
    check_same_brain_model,
    read_cifti_labels,
    read_cifti_scalars,
    read_cifti_series,
)
from tests._workbench import (
    CONTE69_DLABEL,
    CONTE69_DSCALAR,
    CONTE69_DTSERIES,
    CONTE69_PTSERIES,
    ONES_DSCALAR,
    run_wb,
)

N_91K = 91282


@pytest.fixture(scope="module")
def brain_model_91k():
    return read_cifti_scalars(ONES_DSCALAR)[2]


def _save(path, data, axes):
    """Write a CIFTI-2 file with nibabel itself (the reference writer)."""
    nib.save(Cifti2Image(np.asarray(data), header=axes), path)
    return path


# ----------------------------------------------------------------------------- readers


def test_read_series_memory_maps_float32():
    series = read_cifti_series(CONTE69_DTSERIES)
    assert isinstance(series.data, np.memmap)
    assert series.data.dtype == np.float32 and series.data.shape == (2, 60951)
    assert not series.data.flags.writeable
    assert isinstance(series.brain_model, BrainModelAxis) and isinstance(series.series, SeriesAxis)
    assert series.t_r == 1.0 and series.path == CONTE69_DTSERIES
    reference = nib.load(CONTE69_DTSERIES).get_fdata(dtype=np.float32)
    np.testing.assert_array_equal(series.data, reference)
    in_memory = read_cifti_series(CONTE69_DTSERIES, mmap=False)
    assert not isinstance(in_memory.data, np.memmap)
    np.testing.assert_array_equal(in_memory.data, reference)


def test_read_series_converts_other_dtypes_and_reads_tr(tmp_path, brain_model_91k):
    data = np.random.default_rng(0).standard_normal((5, N_91K))
    axes = (SeriesAxis(start=0.0, step=0.8, size=5, unit="SECOND"), brain_model_91k)
    path = _save(tmp_path / "sub-01_bold.dtseries.nii", data, axes)  # float64 on disk
    series = read_cifti_series(path)
    assert series.data.dtype == np.float32 and series.data.shape == (5, N_91K)
    np.testing.assert_allclose(series.data, data, rtol=1e-7)
    assert series.t_r == pytest.approx(0.8)
    assert series.brain_model == brain_model_91k


def test_read_series_frequency_unit_has_no_tr(tmp_path, brain_model_91k):
    axes = (SeriesAxis(start=0.0, step=0.5, size=2, unit="HERTZ"), brain_model_91k)
    path = _save(tmp_path / "spectrum.dtseries.nii", np.zeros((2, N_91K), np.float32), axes)
    assert read_cifti_series(path).t_r is None


def test_conte69_ptseries_is_the_parcel_mean_of_the_dtseries():
    """The readers' brain models: Conte69's ptseries is each parcel's mean of the
    dtseries under the dlabel's first map, matched by (structure, vertex)."""
    dense = read_cifti_series(CONTE69_DTSERIES)
    parcels = read_cifti_series(CONTE69_PTSERIES)
    atlas = read_cifti_labels(CONTE69_DLABEL, map_index=0)
    assert isinstance(parcels.brain_model, ParcelsAxis)
    with pytest.raises(ValueError, match="another brain model"):
        check_same_brain_model(dense, atlas, what="the atlas")
    key_of = {
        (str(name), int(vertex)): key
        for name, vertex, key in zip(
            atlas.brain_model.name, atlas.brain_model.vertex, atlas.labels, strict=True
        )
    }
    dense_keys = np.array(
        [key_of[(str(n), int(v))] for n, v in zip(dense.brain_model.name, dense.brain_model.vertex)]
    )
    key_by_name = {name: key for key, name in atlas.names.items()}
    for column, parcel in enumerate(parcels.brain_model.name):
        members = dense_keys == key_by_name[str(parcel)]
        assert members.any(), parcel
        np.testing.assert_allclose(
            parcels.data[:, column],
            dense.data[:, members].mean(axis=1, dtype=np.float64),
            rtol=0,
            atol=1.2e-6,
        )


def test_read_labels_by_index_and_name():
    first = read_cifti_labels(CONTE69_DLABEL)
    assert first.labels.dtype == np.int32 and first.labels.shape == (64984,)
    assert first.map_name.startswith("Composite Parcellation-lh")
    assert 0 not in first.names and 0 not in first.colors
    assert first.names[1] == "MEDIAL.WALL" and len(first.colors[1]) == 4
    axis = nib.load(CONTE69_DLABEL).header.get_axis(0)
    assert isinstance(axis, LabelAxis)
    third = read_cifti_labels(CONTE69_DLABEL, map_index=axis.name[2])
    assert third.map_name == axis.name[2]
    np.testing.assert_array_equal(
        third.labels, read_cifti_labels(CONTE69_DLABEL, map_index=2).labels
    )
    np.testing.assert_array_equal(
        third.labels, np.asarray(nib.load(CONTE69_DLABEL).dataobj[2]).astype(np.int32)
    )
    with pytest.raises(ValueError, match="no map named 'nope'"):
        read_cifti_labels(CONTE69_DLABEL, map_index="nope")
    with pytest.raises(ValueError, match="has 3 maps; map index 3 does not exist"):
        read_cifti_labels(CONTE69_DLABEL, map_index=3)


def test_read_scalars():
    data, names, brain_model = read_cifti_scalars(CONTE69_DSCALAR)
    assert data.dtype == np.float32 and data.shape == (2, 60951) and len(names) == 2
    np.testing.assert_array_equal(data, read_cifti_series(CONTE69_DTSERIES).data)
    assert brain_model == read_cifti_series(CONTE69_DTSERIES).brain_model
    ones, _, model_91k = read_cifti_scalars(ONES_DSCALAR)
    assert ones.shape == (1, N_91K) and len(model_91k) == N_91K and np.all(ones == 1)


def test_wrong_axes_name_what_was_found_and_what_is_needed():
    with pytest.raises(ValueError) as info:
        read_cifti_series(ONES_DSCALAR)
    message = str(info.value)
    assert "\n" not in message
    assert ".dscalar.nii: ScalarAxis x BrainModelAxis" in message
    assert "a time series is needed" in message and ".dtseries.nii or .ptseries.nii" in message
    with pytest.raises(ValueError, match=r"\.dtseries\.nii.*a label file is needed"):
        read_cifti_labels(CONTE69_DTSERIES)
    with pytest.raises(ValueError, match=r"\.dlabel\.nii.*a scalar file is needed"):
        read_cifti_scalars(CONTE69_DLABEL)


def test_cifti1_gets_a_one_line_error_with_the_conversion(tmp_path):
    cifti1 = tmp_path / "old.dtseries.nii"
    run_wb("-file-convert", "-cifti-version-convert", CONTE69_DTSERIES, "1", cifti1)
    with pytest.raises(ValueError) as info:
        read_cifti_series(cifti1)
    message = str(info.value)
    assert "\n" not in message and "CIFTI-1" in message and "CIFTI-2 only" in message
    assert CONVERT_HINT in message


@pytest.mark.parametrize("nifti", [nib.Nifti1Image, nib.Nifti2Image])
def test_plain_nifti_is_not_cifti(tmp_path, nifti):
    path = tmp_path / "bold.nii"
    nib.save(nifti(np.zeros((4, 4, 4, 3), np.float32), np.eye(4)), path)
    with pytest.raises(ValueError) as info:
        read_cifti_series(path)
    message = str(info.value)
    assert "\n" not in message and "not a CIFTI-2 file" in message
    assert nifti.__name__.removesuffix("Image") in message and CONVERT_HINT in message


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="No CIFTI file"):
        read_cifti_series(CONTE69_DTSERIES.with_name("absent.dtseries.nii"))


def test_check_same_brain_model(tmp_path, brain_model_91k):
    check_same_brain_model(brain_model_91k, read_cifti_scalars(ONES_DSCALAR)[2])
    cortex = brain_model_91k[:59412]
    labels = LabelAxis(["atlas"], {0: ("???", (0, 0, 0, 0)), 1: ("A", (1, 0, 0, 1))})
    path = _save(tmp_path / "atlas.dlabel.nii", np.ones((1, 59412), np.float32), (labels, cortex))
    atlas = read_cifti_labels(path)
    with pytest.raises(ValueError) as info:
        check_same_brain_model(brain_model_91k, atlas, what="the atlas")
    message = str(info.value)
    assert "\n" not in message and message.startswith("the atlas:") and str(path) in message
    assert "59412 grayordinates" in message and "91282 grayordinates" in message
    assert "19 volume structures 31870 voxels" in message
    left = BrainModelAxis.from_surface(np.arange(10), nvertex=32492, name="CortexLeft")
    moved = BrainModelAxis.from_surface(np.arange(1, 11), nvertex=32492, name="CortexLeft")
    with pytest.raises(ValueError, match="same counts"):
        check_same_brain_model(left, moved)
