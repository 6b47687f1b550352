"""CIFTI-2 reading and writing (connscale.io.cifti) against nibabel and Workbench."""

from __future__ import annotations

import os
import shutil

import nibabel as nib
import numpy as np
import pytest
from nibabel.cifti2 import (
    BrainModelAxis,
    Cifti2Image,
    LabelAxis,
    ParcelsAxis,
    ScalarAxis,
    SeriesAxis,
)

from connscale.io.atomic import InsufficientSpaceError
from connscale.io.cifti import (
    CONVERT_HINT,
    DconnWriter,
    check_same_brain_model,
    cifti_nbytes,
    read_cifti_labels,
    read_cifti_scalars,
    read_cifti_series,
    write_dlabel,
    write_dscalar,
    write_dtseries,
    write_pconn,
    write_pscalar,
    write_ptseries,
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


@pytest.fixture(scope="module")
def small_model():
    """A small brain model: two surfaces and three voxels of one structure."""
    left = BrainModelAxis.from_surface(np.array([0, 2, 5, 7]), nvertex=10, name="CortexLeft")
    right = BrainModelAxis.from_surface(np.array([1, 3, 4]), nvertex=12, name="CortexRight")
    mask = np.zeros((3, 2, 3), dtype=bool)
    mask[0, 0, 0] = mask[1, 0, 2] = mask[2, 1, 1] = True
    volume = BrainModelAxis.from_mask(mask, name="ThalamusLeft", affine=np.diag([2.0, 2, 2, 1]))
    return left + right + volume


@pytest.fixture(scope="module")
def small_parcels(small_model):
    return ParcelsAxis.from_brain_models(
        [("left", small_model[:4]), ("right", small_model[4:7]), ("thalamus", small_model[7:])]
    )


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


def test_read_series_converts_other_dtypes_and_reads_tr(tmp_path, small_model):
    data = np.random.default_rng(0).standard_normal((5, len(small_model)))
    axes = (SeriesAxis(start=0.0, step=0.8, size=5, unit="SECOND"), small_model)
    path = _save(tmp_path / "sub-01_bold.dtseries.nii", data, axes)  # float64 on disk
    series = read_cifti_series(path)
    assert series.data.dtype == np.float32 and series.data.shape == (5, len(small_model))
    np.testing.assert_allclose(series.data, data, rtol=1e-7)
    assert series.t_r == pytest.approx(0.8)
    assert series.brain_model == small_model


def test_read_series_frequency_unit_has_no_tr(tmp_path, small_model):
    axes = (SeriesAxis(start=0.0, step=0.5, size=2, unit="HERTZ"), small_model)
    path = _save(tmp_path / "spectrum.dtseries.nii", np.zeros((2, len(small_model))), axes)
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


# ----------------------------------------------------------------------------- writers


def _files_in(folder):
    return sorted(p.name for p in folder.iterdir())


def _wb_matrix(path, tmp_path):
    """The matrix Workbench reads from ``path`` (its rows: nibabel's transpose).

    Through ``-cifti-convert -to-nifti`` (full precision; rows in the first
    three dimensions, columns in the fourth).
    """
    fake = tmp_path / f"{path.name}.fake.nii"
    run_wb("-cifti-convert", "-to-nifti", path, fake)
    image = nib.load(fake)
    matrix = np.asarray(image.dataobj).reshape(-1, image.shape[3], order="F")
    fake.unlink()
    return matrix


def _wb_info(path):
    info = {}
    for line in run_wb("-file-information", path).splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _roundtrip_cases(model, parcels, rng):
    """(file name, writer, its arguments, the array nibabel must read, the axes, wb's type)."""
    n, p = len(model), len(parcels)
    series = SeriesAxis(start=2.0, step=0.72, size=99, unit="SECOND")  # size replaced by T
    dense = rng.standard_normal((6, n))
    par = rng.standard_normal((6, p))
    pconn = rng.standard_normal((p, p))
    names = ["degree", "gcor"]
    return [
        ("a.dtseries.nii", write_dtseries, (model, series, dense), dense, "Dense Data Series"),
        ("a.ptseries.nii", write_ptseries, (parcels, series, par), par, "Parcel Series"),
        ("a.dscalar.nii", write_dscalar, (model, names, dense[:2]), dense[:2], "Dense Scalar"),
        ("a.pscalar.nii", write_pscalar, (parcels, names, par[:2]), par[:2], "Parcel Scalar"),
        ("a.pconn.nii", write_pconn, (parcels, pconn), pconn, "Parcel"),
    ]


def test_every_type_round_trips_through_nibabel_and_workbench(tmp_path, small_model, small_parcels):
    rng = np.random.default_rng(1)
    for name, writer, args, expected, wb_type in _roundtrip_cases(small_model, small_parcels, rng):
        path = writer(tmp_path / name, *args)
        assert path == tmp_path / name and path.stat().st_size == cifti_nbytes(
            *reversed([nib.load(path).header.get_axis(k) for k in (0, 1)])
        )
        image = nib.load(path)
        assert image.shape == expected.shape and image.get_data_dtype() == np.float32
        np.testing.assert_array_equal(image.get_fdata(), expected.astype(np.float32))
        axes = [image.header.get_axis(k) for k in (0, 1)]
        column = small_parcels if name.startswith("a.p") else small_model
        assert axes[1] == column, name
        if isinstance(axes[0], SeriesAxis):
            assert (axes[0].start, axes[0].step, axes[0].size) == (2.0, 0.72, 6)
            assert read_cifti_series(path).t_r == pytest.approx(0.72)
        if isinstance(axes[0], ScalarAxis):
            assert list(axes[0].name) == ["degree", "gcor"]
            assert read_cifti_scalars(path)[1] == ["degree", "gcor"]
        info = _wb_info(path)
        assert info["Type"] == f"CIFTI - {wb_type}", (name, info["Type"])
        assert int(info["Number of Rows"]) == expected.shape[1]
        assert int(info["Number of Columns"]) == expected.shape[0]
        np.testing.assert_array_equal(_wb_matrix(path, tmp_path).T, expected.astype(np.float32))
    names = [case[0] for case in _roundtrip_cases(small_model, small_parcels, rng)]
    assert _files_in(tmp_path) == sorted(names)


def test_dlabel_round_trips_with_its_label_table(tmp_path, small_model):
    labels = np.array([0, 1, 1, 2, 0, 7, 7, 2, 1, 0])
    names = {1: "visual", 2: "motor", 7: "thalamus"}
    colors = {1: (1.0, 0.0, 0.0, 1.0), 7: (0.0, 0.0, 1.0, 1.0)}
    path = write_dlabel(
        tmp_path / "a.dlabel.nii", small_model, labels, names, colors=colors, map_name="networks"
    )
    atlas = read_cifti_labels(path)
    np.testing.assert_array_equal(atlas.labels, labels)
    assert atlas.names == names and atlas.map_name == "networks"
    assert atlas.colors[1] == (1.0, 0.0, 0.0, 1.0) and atlas.colors[7] == (0.0, 0.0, 1.0, 1.0)
    assert atlas.colors[2] == (0.5, 0.5, 0.5, 1.0) and atlas.brain_model == small_model
    axis = nib.load(path).header.get_axis(0)
    assert isinstance(axis, LabelAxis) and axis.label[0][0][0] == "???"
    info = _wb_info(path)
    assert info["Type"] == "CIFTI - Dense Label" and int(info["Number of Rows"]) == 10
    np.testing.assert_array_equal(_wb_matrix(path, tmp_path)[:, 0], labels)
    with pytest.raises(ValueError, match=r"label keys \[3\] have no name"):
        write_dlabel(tmp_path / "b.dlabel.nii", small_model, labels + (labels == 2), names)
    with pytest.raises(ValueError, match="one integer key"):
        write_dlabel(tmp_path / "b.dlabel.nii", small_model, labels + 0.5, names)
    assert _files_in(tmp_path) == ["a.dlabel.nii"]


def test_dtseries_of_the_91k_brain_model_reads_back(tmp_path, brain_model_91k):
    data = np.random.default_rng(2).standard_normal((4, N_91K)).astype(np.float32)
    path = write_dtseries(tmp_path / "sub-01_den-91k_bold.dtseries.nii", brain_model_91k, 2.0, data)
    series = read_cifti_series(path)
    assert series.brain_model == brain_model_91k and series.t_r == 2.0
    np.testing.assert_array_equal(series.data, data)
    check_same_brain_model(series, brain_model_91k)
    info = _wb_info(path)
    assert info["Type"] == "CIFTI - Dense Data Series"
    assert (int(info["Number of Rows"]), int(info["Number of Columns"])) == (N_91K, 4)


def test_dconn_out_of_order_rows_and_tiles_equal_numpy(tmp_path, small_model):
    n = len(small_model)
    matrix = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    path = tmp_path / "sub-01.dconn.nii"
    with DconnWriter(path, small_model, small_model, memory_limit=64) as out:
        out.write_rows(8, matrix[8:])  # rows 8..9, contiguous: one write
        wide = np.zeros((n, n + 3), np.float32)
        wide[:, :n] = matrix
        out.write_rows(6, wide[6:8, :n])  # whole rows, strided: one write per row
        out.write_block(0, 3, np.asfortranarray(matrix[:6, 3:]))  # a non-contiguous tile
        out.write_block(2, 0, matrix[2:6, :3])
        out.write_block(0, 0, matrix[:2, :3].T.copy().T)
        assert not path.exists()
    image = nib.load(path)
    np.testing.assert_array_equal(
        image.get_fdata(), matrix.T
    )  # nibabel: Workbench's rows are axis 1
    assert path.stat().st_size == cifti_nbytes(small_model, small_model)
    reference = Cifti2Image(matrix.T, header=(small_model, small_model))
    reference.nifti_header.set_intent("ConnDense", name="ConnDense")
    reference.to_filename(tmp_path / "nibabel.dconn.nii")
    assert path.read_bytes() == (tmp_path / "nibabel.dconn.nii").read_bytes()
    info = _wb_info(path)
    assert info["Type"] == "CIFTI - Dense" and int(info["Number of Rows"]) == n
    np.testing.assert_array_equal(_wb_matrix(path, tmp_path), matrix)


def test_dconn_roi_rows_as_workbench(tmp_path, small_model):
    """ROI rows (-roi-override): Workbench's rows are the ROI, nibabel's axis 1."""
    roi = small_model[:4]
    block = np.random.default_rng(4).standard_normal((4, len(small_model))).astype(np.float32)
    path = tmp_path / "roi.dconn.nii"
    with DconnWriter(path, roi, small_model) as out:
        out.write_rows(0, block)
    image = nib.load(path)
    assert image.shape == (len(small_model), 4)
    assert image.header.get_axis(0) == small_model and image.header.get_axis(1) == roi
    np.testing.assert_array_equal(image.get_fdata(), block.T)
    info = _wb_info(path)
    assert (int(info["Number of Rows"]), int(info["Number of Columns"])) == (4, len(small_model))


def test_dconn_refuses_bad_writes_and_publishes_nothing(tmp_path, small_model):
    n = len(small_model)
    path = tmp_path / "x.dconn.nii"
    good = np.zeros((2, n), np.float32)
    cases = [
        (lambda out: out.write_rows(n - 1, good), "lies outside the 10 x 10 matrix"),
        (lambda out: out.write_block(0, -1, good[:, :3]), "lies outside"),
        (lambda out: out.write_block(4, 8, good[:, :3]), "lies outside"),
        (lambda out: out.write_rows(0, good.astype(np.float64)), "stores float32; got a float64"),
        (lambda out: out.write_rows(0, good[0]), "2-D numpy array"),
        (lambda out: (out.write_rows(0, good), out.write_block(1, 4, good[:, :2])), "overlaps"),
        (lambda out: out.write_rows(0, good), "80 of the 10 x 10 values were never written"),
    ]
    for action, message in cases:
        with pytest.raises(ValueError, match=message):
            with DconnWriter(path, small_model, small_model) as out:
                action(out)
        assert _files_in(tmp_path) == []  # neither the file nor its staging copy


def test_dconn_exception_inside_with_leaves_nothing(tmp_path, small_model):
    path = tmp_path / "x.dconn.nii"
    with pytest.raises(KeyboardInterrupt):
        with DconnWriter(path, small_model, small_model) as out:
            out.write_rows(0, np.ones((len(small_model), len(small_model)), np.float32))
            raise KeyboardInterrupt
    assert _files_in(tmp_path) == []


def test_dconn_checks_free_space_before_writing(tmp_path, small_model, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        shutil, "disk_usage", lambda _: usage._replace(free=cifti_nbytes(small_model, small_model))
    )
    with pytest.raises(InsufficientSpaceError, match="not enough free space .* x.dconn.nii"):
        with DconnWriter(tmp_path / "x.dconn.nii", small_model, small_model):
            pytest.fail("the writer opened without the space for its file")
    assert _files_in(tmp_path) == []


def test_writers_refuse_wrong_names_shapes_and_dtypes(tmp_path, small_model, small_parcels):
    with pytest.raises(ValueError, match=r"would hold a dense connectome .* must end with \.dconn"):
        DconnWriter(tmp_path / "x.pconn.nii", small_model, small_model)
    with pytest.raises(ValueError, match="float32 or float64; got int32"):
        DconnWriter(tmp_path / "x.dconn.nii", small_model, small_model, dtype=np.int32)
    with pytest.raises(ValueError, match=r"the data are \(3, 9\), the axes need \(3, 10\)"):
        write_dtseries(tmp_path / "x.dtseries.nii", small_model, 1.0, np.zeros((3, 9)))
    with pytest.raises(ValueError, match=r"the data are \(1, 10\), the axes need \(2, 10\)"):
        write_dscalar(tmp_path / "x.dscalar.nii", small_model, ["a", "b"], np.zeros((1, 10)))
    with pytest.raises(ValueError, match="positive number of seconds"):
        write_ptseries(tmp_path / "x.ptseries.nii", small_parcels, 0.0, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"x\.pconn\.nii would hold a dense connectome"):
        write_pconn(tmp_path / "x.pconn.nii", small_model, np.zeros((10, 10)))
    with pytest.raises(
        ValueError, match="No CIFTI-2 file type for axes BrainModelAxis x SeriesAxis"
    ):
        DconnWriter(tmp_path / "x.dconn.nii", SeriesAxis(0.0, 1.0, 3), small_model)
    assert _files_in(tmp_path) == []


def test_float64_dconn(tmp_path, small_model):
    matrix = np.random.default_rng(5).standard_normal((10, 10))
    path = tmp_path / "x.dconn.nii"
    with DconnWriter(path, small_model, small_model, dtype=np.float64) as out:
        out.write_rows(0, matrix)
    assert nib.load(path).get_data_dtype() == np.float64
    np.testing.assert_array_equal(nib.load(path).get_fdata(), matrix.T)
    assert os.path.getsize(path) == cifti_nbytes(small_model, small_model, dtype=np.float64)
