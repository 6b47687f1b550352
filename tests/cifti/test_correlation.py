"""connscale.cifti.cifti_correlation against wb_command -cifti-correlation and numpy float64."""

from __future__ import annotations

import logging
import os
import shutil
import time

import nibabel as nib
import numpy as np
import pytest
import torch
from nibabel.cifti2 import BrainModelAxis, Cifti2Image, ParcelsAxis, ScalarAxis, SeriesAxis

from connscale._compute import planner_for
from connscale.cifti import cifti_correlation, read_relmat_brain_model
from connscale.fc.matrix_stream import stream_matrix
from connscale.fc.normalize import ConstantSeriesWarning
from connscale.fc.row_products import FISHER_Z_MAX, RowMeasure

from .._workbench import CONTE69_PTSERIES, ONES_DSCALAR, run_wb

AFFINE = np.diag([2.0, 2.0, 2.0, 1.0])
VOLUME_SHAPE = (4, 4, 3)
N_TIMEPOINTS = 24
CONSTANT = 4  # a grayordinate whose series is constant
ATOL = 1e-6

pytestmark = pytest.mark.filterwarnings("ignore::connscale.fc.normalize.ConstantSeriesWarning")


def _brain_model() -> BrainModelAxis:
    """10 of 16 left vertices, 7 of 12 right ones, 5 thalamus and 4 putamen voxels."""
    thalamus = np.zeros(VOLUME_SHAPE, bool)
    thalamus[[0, 1, 1, 2, 3], [0, 1, 2, 2, 3], [0, 1, 1, 2, 0]] = True
    putamen = np.zeros(VOLUME_SHAPE, bool)
    putamen[[3, 3, 2, 0], [0, 1, 3, 3], [2, 2, 1, 1]] = True
    return (
        BrainModelAxis.from_surface(np.array([0, 1, 3, 4, 6, 7, 9, 11, 12, 15]), 16, "CortexLeft")
        + BrainModelAxis.from_surface(np.array([0, 2, 3, 5, 8, 9, 11]), 12, "CortexRight")
        + BrainModelAxis.from_mask(thalamus, name="ThalamusLeft", affine=AFFINE)
        + BrainModelAxis.from_mask(putamen, name="PutamenRight", affine=AFFINE)
    )


def _series(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((N_TIMEPOINTS, 3))
    x = shared @ rng.standard_normal((3, n)) + rng.standard_normal((N_TIMEPOINTS, n)) + 5.0
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def dtseries(tmp_path_factory):
    """A dtseries on a small brain model of surfaces and volume, one grayordinate constant."""
    bm = _brain_model()
    x = _series(len(bm))
    x[:, CONSTANT] = 2.5
    path = tmp_path_factory.mktemp("dense") / "small.dtseries.nii"
    Cifti2Image(x, header=(SeriesAxis(0, 0.8, N_TIMEPOINTS, unit="SECOND"), bm)).to_filename(path)
    return path, x


@pytest.fixture(scope="module")
def ptseries(tmp_path_factory):
    """A ptseries on the 54 parcels of the Conte69 ptseries, simulated signals."""
    parcels = nib.load(CONTE69_PTSERIES).header.get_axis(1)
    assert isinstance(parcels, ParcelsAxis)
    x = _series(len(parcels), seed=1)
    path = tmp_path_factory.mktemp("parcels") / "small.ptseries.nii"
    Cifti2Image(x, header=(SeriesAxis(0, 0.8, N_TIMEPOINTS, unit="SECOND"), parcels)).to_filename(
        path
    )
    return path, x


@pytest.fixture(scope="module")
def weights_files(tmp_path_factory):
    """Weights in (0, 2] with two zeros, and censoring weights (0 and 1)."""
    folder = tmp_path_factory.mktemp("weights")
    rng = np.random.default_rng(2)
    weights = rng.uniform(0.2, 2.0, N_TIMEPOINTS)
    weights[[3, 10]] = 0
    censor = np.ones(N_TIMEPOINTS)
    censor[[0, 7, 8, 20]] = 0
    np.savetxt(folder / "weights.txt", weights)
    np.savetxt(folder / "censor.txt", censor, fmt="%d")
    return {"weights": (folder / "weights.txt", weights), "censor": (folder / "censor.txt", censor)}


def _read(path) -> np.ndarray:
    """The matrix as Workbench's rows x columns (nibabel reads the transpose)."""
    return np.asarray(nib.load(path).get_fdata(dtype=np.float64)).T


def _reference(x, *, weights=None, demean=True, covariance=False, fisher_z=False, rows=None):
    """Workbench's formulas (fc.row_products' docstring) in float64 numpy: ``rows`` x all."""
    x = x.astype(np.float64)
    rows = np.arange(x.shape[1]) if rows is None else np.asarray(rows)
    w = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = w > 0
    x, w = x[keep], w[keep]
    if demean:
        x = x - (w[:, None] * x).sum(0) / w.sum()
    u = np.sqrt(w)[:, None] * x
    products = u[:, rows].T @ u
    if covariance:
        return products / w.sum()
    norm = np.linalg.norm(u, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = np.clip(products / np.outer(norm[rows], norm), -1, 1)
    matrix[np.arange(len(rows)), rows] = 1.0
    if fisher_z:
        matrix = np.arctanh(np.clip(matrix, -0.999999, 0.999999))
    return matrix


def _assert_same(ours, reference, *, rtol=0.0):
    """Equal within ATOL (and ``rtol``: covariances are not within [-1, 1]), NaN alike."""
    assert ours.shape == reference.shape
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(reference))
    np.testing.assert_allclose(ours, reference, rtol=rtol, atol=ATOL, equal_nan=True)


# Workbench options -> our keywords (weights by name: the fixture's files).
CASES = {
    "plain": ([], {}),
    "fisher-z": (["-fisher-z"], {"fisher_z": True}),
    "no-demean": (["-no-demean"], {"demean": False}),
    "covariance": (["-covariance"], {"covariance": True}),
    "weights": (["-weights", "weights"], {"weights": "weights"}),
    "censor": (["-weights", "censor"], {"weights": "censor"}),
    "covariance-weights": (["-covariance", "-weights", "weights"], {"covariance": True,
                                                                    "weights": "weights"}),
    "fisher-z-censor": (["-fisher-z", "-weights", "censor"], {"fisher_z": True,
                                                              "weights": "censor"}),
    "no-demean-covariance": (["-no-demean", "-covariance"], {"demean": False,
                                                             "covariance": True}),
}  # fmt: skip


def _resolve(options, keywords, weights_files):
    options = [str(weights_files[o][0]) if o in weights_files else o for o in options]
    keywords = dict(keywords)
    if "weights" in keywords:
        keywords["weights"] = weights_files[keywords["weights"]][0]
    return options, keywords


@pytest.mark.parametrize("case", CASES)
def test_dconn_equals_workbench_and_numpy(dtseries, weights_files, tmp_path, case):
    path, x = dtseries
    options, keywords = _resolve(*CASES[case], weights_files)
    run_wb("-cifti-correlation", path, tmp_path / "wb.dconn.nii", *options)
    result = cifti_correlation(path, tmp_path / "ours.dconn.nii", device="cpu", **keywords)
    assert result.path == tmp_path / "ours.dconn.nii" and result.n_rows == x.shape[1]
    ours, theirs = nib.load(result.path), nib.load(tmp_path / "wb.dconn.nii")
    assert ours.header.get_axis(0) == theirs.header.get_axis(0)
    assert ours.header.get_axis(1) == theirs.header.get_axis(1)
    rtol = 1e-6 if keywords.get("covariance") else 0.0
    _assert_same(_read(result.path), _read(tmp_path / "wb.dconn.nii"), rtol=rtol)
    weights = keywords.get("weights")
    reference = _reference(
        x,
        weights=None if weights is None else np.loadtxt(weights),
        **{k: v for k, v in keywords.items() if k != "weights"},
    )
    _assert_same(_read(result.path), reference, rtol=rtol)


def test_constant_grayordinate_as_workbench(dtseries, tmp_path):
    """NaN against every other series, 1 on the diagonal (7.25... with Fisher z)."""
    path, x = dtseries
    with pytest.warns(ConstantSeriesWarning, match="1 of"):
        cifti_correlation(path, tmp_path / "r.dconn.nii", device="cpu")
    matrix = _read(tmp_path / "r.dconn.nii")
    others = np.arange(x.shape[1]) != CONSTANT
    assert np.isnan(matrix[CONSTANT, others]).all() and np.isnan(matrix[others, CONSTANT]).all()
    assert matrix[CONSTANT, CONSTANT] == 1.0
    cifti_correlation(path, tmp_path / "z.dconn.nii", device="cpu", fisher_z=True)
    z = _read(tmp_path / "z.dconn.nii")
    np.testing.assert_allclose(np.diag(z), np.float32(FISHER_Z_MAX))
    cifti_correlation(path, tmp_path / "c.dconn.nii", device="cpu", covariance=True)
    assert (_read(tmp_path / "c.dconn.nii")[CONSTANT] == 0).all()  # defined: 0


def test_pconn_equals_workbench(ptseries, weights_files, tmp_path):
    path, x = ptseries
    weights = weights_files["weights"][0]
    run_wb("-cifti-correlation", path, tmp_path / "wb.pconn.nii", "-fisher-z", "-weights", weights)
    cifti_correlation(path, tmp_path / "ours.pconn.nii", fisher_z=True, weights=weights)
    ours, theirs = nib.load(tmp_path / "ours.pconn.nii"), nib.load(tmp_path / "wb.pconn.nii")
    assert ours.header.get_axis(0) == theirs.header.get_axis(0)
    _assert_same(_read(tmp_path / "ours.pconn.nii"), _read(tmp_path / "wb.pconn.nii"))
    reference = _reference(x, weights=np.loadtxt(weights), fisher_z=True)
    _assert_same(_read(tmp_path / "ours.pconn.nii"), reference)


def _metric(path, values, structure):
    array = nib.gifti.GiftiDataArray(np.asarray(values, np.float32), datatype="NIFTI_TYPE_FLOAT32")
    image = nib.gifti.GiftiImage(darrays=[array])
    image.meta = nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": structure})
    nib.save(image, path)
    return path


def test_roi_structures_equal_workbench_roi_override(dtseries, tmp_path):
    """Whole structures = -roi-override with an all-ones left metric and the thalamus volume."""
    path, x = dtseries
    bm = _brain_model()
    left = _metric(tmp_path / "left.func.gii", np.ones(16), "CortexLeft")
    thalamus = np.zeros(VOLUME_SHAPE, np.float32)
    voxels = bm.voxel[bm.name == "CIFTI_STRUCTURE_THALAMUS_LEFT"]
    thalamus[tuple(voxels.T)] = 1
    nib.save(nib.Nifti1Image(thalamus, AFFINE), tmp_path / "thalamus.nii")
    run_wb("-cifti-correlation", path, tmp_path / "wb.dconn.nii", "-roi-override",
           "-left-roi", left, "-vol-roi", tmp_path / "thalamus.nii")  # fmt: skip
    result = cifti_correlation(path, tmp_path / "ours.dconn.nii",
                               roi_structures="THALAMUS_LEFT, CORTEX_LEFT")  # fmt: skip
    ours, theirs = nib.load(result.path), nib.load(tmp_path / "wb.dconn.nii")
    assert ours.shape == theirs.shape == (x.shape[1], 15)
    assert ours.header.get_axis(1) == theirs.header.get_axis(1)  # the ROI rows
    assert ours.header.get_axis(0) == theirs.header.get_axis(0)
    _assert_same(_read(result.path), _read(tmp_path / "wb.dconn.nii"))
    rows = np.flatnonzero(np.isin(bm.name, ["CIFTI_STRUCTURE_CORTEX_LEFT",
                                           "CIFTI_STRUCTURE_THALAMUS_LEFT"]))  # fmt: skip
    _assert_same(_read(result.path), _reference(x, rows=rows))


def test_roi_cifti_equals_workbench(dtseries, weights_files, tmp_path):
    """Grayordinates of both surfaces and the volume, in Workbench's order and brain model."""
    path, x = dtseries
    bm = _brain_model()
    chosen = np.array([23, 1, 12, 3, 19, CONSTANT, 20])  # volume, left, right, left...
    values = np.zeros(len(bm), np.float32)
    values[chosen] = 1.0
    roi = tmp_path / "roi.dscalar.nii"
    Cifti2Image(values[None], header=(ScalarAxis(["roi"]), bm)).to_filename(roi)
    censor = weights_files["censor"][0]
    run_wb("-cifti-correlation", path, tmp_path / "wb.dconn.nii", "-roi-override",
           "-cifti-roi", roi, "-weights", censor)  # fmt: skip
    result = cifti_correlation(path, tmp_path / "ours.dconn.nii", roi_cifti=roi, weights=censor,
                               memory_limit=20_000)  # fmt: skip
    ours, theirs = nib.load(result.path), nib.load(tmp_path / "wb.dconn.nii")
    assert ours.header.get_axis(1) == theirs.header.get_axis(1)
    _assert_same(_read(result.path), _read(tmp_path / "wb.dconn.nii"))
    rows = np.sort(chosen)  # surfaces first, then volume: here file order
    _assert_same(_read(result.path), _reference(x, weights=np.loadtxt(censor), rows=rows))


def test_roi_rows_with_covariance(dtseries, tmp_path):
    """Covariance of ROI rows (Workbench 1.5.0 ignores -covariance with ROIs; 2023 fixed it)."""
    path, x = dtseries
    result = cifti_correlation(path, tmp_path / "c.dconn.nii", roi_structures=["CORTEX_RIGHT"],
                               covariance=True)  # fmt: skip
    rows = np.arange(10, 17)
    _assert_same(_read(result.path), _reference(x, covariance=True, rows=rows), rtol=1e-6)


def test_weights_without_demean_are_the_weighted_cosine(dtseries, weights_files, tmp_path):
    """Our one deliberate difference from Workbench 1.5.0 (fc.row_products' docstring)."""
    path, x = dtseries
    weights, values = weights_files["weights"]
    result = cifti_correlation(path, tmp_path / "r.dconn.nii", weights=weights, demean=False)
    _assert_same(_read(result.path), _reference(x, weights=values, demean=False))


def test_many_blocks_give_the_same_file(tmp_path):
    """600 grayordinates of the 91k model: the triangle and ROI rows, in few or many blocks."""
    bm = nib.load(ONES_DSCALAR).header.get_axis(1)[:600]
    path = tmp_path / "left.dtseries.nii"
    series = SeriesAxis(0, 0.8, N_TIMEPOINTS, unit="SECOND")
    Cifti2Image(_series(600, seed=5), header=(series, bm)).to_filename(path)
    for keywords in ({"fisher_z": True}, {"roi_structures": "CORTEX_LEFT"}):
        few = cifti_correlation(path, tmp_path / "few.dconn.nii", **keywords)
        many = cifti_correlation(path, tmp_path / "many.dconn.nii", memory_limit=100_000,
                                 **keywords)  # fmt: skip
        assert many.plan.n_rounds >= few.plan.n_rounds + 15
        assert nib.load(few.path).header.get_axis(0) == nib.load(many.path).header.get_axis(0)
        # rtol: a GEMM of other block shapes rounds r differently by an ulp, which
        # artanh near the clamp turns into ~1e-6 (seen on CUDA).
        np.testing.assert_allclose(_read(many.path), _read(few.path), atol=ATOL, rtol=1e-6)
        assert few.path.stat().st_size == many.path.stat().st_size
        few.path.unlink()
        many.path.unlink()


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_assembled_rows_give_the_tiles_file(tmp_path, monkeypatch, backend):
    """The triangle's two ways of mirroring, chosen by memory_limit: same file, numpy's values.

    2 MB holds the transposed strips (< N²/2 values) and whole-row blocks: one write per
    block (write_rows); 400 kB does not: tiles, one write per row of each (write_block).
    """
    from connscale.fc import matrix_stream
    from connscale.io import cifti as io_cifti

    gemm = matrix_stream.gemm_nt
    monkeypatch.setattr(
        matrix_stream, "gemm_nt", lambda a, b, out: gemm(a, b, out, backend=backend)
    )
    calls = {"write_rows": 0, "write_block": 0}
    for name in calls:
        original = getattr(io_cifti.DconnWriter, name)

        def counted(self, *args, _name=name, _original=original):
            calls[_name] += 1
            return _original(self, *args)

        monkeypatch.setattr(io_cifti.DconnWriter, name, counted)
    bm = nib.load(ONES_DSCALAR).header.get_axis(1)[:600]
    path = tmp_path / "left.dtseries.nii"
    x = _series(600, seed=6)
    Cifti2Image(x, header=(SeriesAxis(0, 0.8, N_TIMEPOINTS, unit="SECOND"), bm)).to_filename(path)
    files = {}
    for way, limit in (("rows", 2_000_000), ("tiles", 400_000)):
        before = dict(calls)
        files[way] = cifti_correlation(path, tmp_path / f"{way}.dconn.nii", fisher_z=True,
                                       memory_limit=limit).path  # fmt: skip
        rows, tiles = (calls[k] - before[k] for k in ("write_rows", "write_block"))
        # write_rows goes through write_block; the tiles: 16 blocks and 15 transposed ones.
        assert (rows, tiles) == ((16, 16) if way == "rows" else (0, 31))
    ours = _read(files["rows"])
    np.testing.assert_allclose(ours, _read(files["tiles"]), atol=ATOL)
    np.testing.assert_array_equal(ours, ours.T)
    _assert_same(ours, _reference(x, fisher_z=True), rtol=2e-6)  # artanh: up to 3x r's error
    assert files["rows"].stat().st_size == files["tiles"].stat().st_size
    assert nib.load(files["rows"]).header.get_axis(0) == nib.load(files["tiles"]).header.get_axis(0)


def test_non_finite_series_are_named_and_huge_finite_ones_pass():
    """Series are tested through their float64 sums first: one that overflows is tested exactly."""

    class Null:
        def write_rows(self, row0, block):
            pass

        def write_block(self, row0, col0, block):
            pass

    planner = planner_for(torch.device("cpu"))
    x = _series(20, seed=7).astype(np.float64)
    x[:, 11] = np.linspace(1e307, 1.7e308, N_TIMEPOINTS)  # finite; its sum is inf
    stream_matrix(x, Null(), measure=RowMeasure(covariance=True), planner=planner,
                  dtype=torch.float64)  # fmt: skip
    for bad in (np.nan, np.inf):
        y = x.copy()
        y[5, 7] = bad
        with pytest.raises(ValueError, match="Series 7 holds NaN or infinite values"):
            stream_matrix(y, Null(), measure=RowMeasure(), planner=planner)


@pytest.mark.parametrize("mirror", [True, False])
def test_schedules_agree_with_numpy(monkeypatch, mirror):
    """The CPU's triangle (mirrored) and the CUDA schedule (full rows, copies overlapped)."""
    from ..fc._fake_cuda import fake_cuda_copies

    if not mirror:
        fake_cuda_copies(monkeypatch)
    x = _series(300, seed=3)
    measure = RowMeasure(weights=np.linspace(0, 2, N_TIMEPOINTS))

    class Matrix:
        def __init__(self):
            self.values = np.full((300, 300), np.nan)
            self.written = np.zeros((300, 300), int)

        def write_rows(self, row0, block):
            self.write_block(row0, 0, block)

        def write_block(self, row0, col0, block):
            index = np.s_[row0 : row0 + block.shape[0], col0 : col0 + block.shape[1]]
            self.values[index] = block
            self.written[index] += 1

    out = Matrix()
    plan, _ = stream_matrix(x, out, measure=measure, planner=planner_for(torch.device("cpu"),
                            120_000), mirror=mirror)  # fmt: skip
    assert plan.n_rounds > 3 and (out.written == 1).all()
    _assert_same(out.values, _reference(x, weights=measure.weights))
    if mirror:
        np.testing.assert_array_equal(out.values, out.values.T)


def test_triu_relmat_keeps_the_brain_model(dtseries, weights_files, tmp_path):
    from connscale.io.hdf5 import load_relmat

    path, x = dtseries
    censor, values = weights_files["censor"]
    out = cifti_correlation(path, tmp_path / "r.h5", kind="triu", weights=censor).path
    assert read_relmat_brain_model(out) == _brain_model()
    stored, _ = load_relmat(out)
    reference = _reference(x, weights=values)
    np.testing.assert_allclose(stored, reference[np.triu_indices(len(x.T), 1)], atol=ATOL)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"kind": "triu", "fisher_z": True}, "fisher_z need kind='dense'"),
        ({"kind": "sparse", "threshold": 0.5, "roi_structures": "CORTEX_LEFT"}, "ROI rows"),
        ({"fisher_z": True, "covariance": True}, "cannot be used with covariance"),
        ({"weights": [1.0, 2.0]}, "2 weights for 24 time points"),
        ({"weights": [-1.0] + [1.0] * 23}, "weights cannot be negative"),
        ({"weights": [0.0] * 24}, "weights are all 0"),
        ({"roi_structures": "HIPPOCAMPUS_LEFT"}, "No structure 'HIPPOCAMPUS_LEFT'"),
        ({"roi_structures": "CORTEX_LEFT", "roi_cifti": "x.dscalar.nii"}, "not both"),
    ],
)
def test_bad_options_are_one_line_errors_and_publish_nothing(dtseries, tmp_path, keywords,
                                                             message):  # fmt: skip
    path, _ = dtseries
    out = tmp_path / ("r.h5" if "kind" in keywords else "r.dconn.nii")
    with pytest.raises(ValueError, match=message) as error:
        cifti_correlation(path, out, **keywords)
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_roi_on_parcels_and_wrong_suffix_are_refused(ptseries, dtseries, tmp_path):
    with pytest.raises(ValueError, match="ROI rows need a dense input"):
        cifti_correlation(ptseries[0], tmp_path / "r.pconn.nii", roi_structures="CORTEX_LEFT")
    with pytest.raises(ValueError, match=r"is a \.dconn\.nii"):
        cifti_correlation(dtseries[0], tmp_path / "r.pconn.nii")
    assert list(tmp_path.iterdir()) == []


def test_an_error_mid_write_publishes_nothing(dtseries, tmp_path, monkeypatch):
    from connscale.io import cifti as io_cifti

    path, _ = dtseries
    calls = []
    original = io_cifti.DconnWriter.write_block

    def failing(self, row0, col0, block):
        calls.append(row0)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        original(self, row0, col0, block)

    monkeypatch.setattr(io_cifti.DconnWriter, "write_block", failing)
    with pytest.raises(OSError, match="No space left"):
        cifti_correlation(path, tmp_path / "r.dconn.nii", memory_limit=4_000)
    assert len(calls) == 2
    assert list(tmp_path.iterdir()) == []


#: The dconn written out of core. By default a 32,800-grayordinate subset of the exact HCP
#: brain model (every 2.8th grayordinate: all 21 structures, surfaces and voxels) under a
#: 512 MB limit: 4.3 GB, past 2**32 bytes (a 32-bit file offset would wrap), and its
#: triangle's strips (N²/2 values, 2.2 GB) do not fit the limit, so the CPU writes tiles,
#: each at its offset and transposed row by row, in rounds the budget bounds - the path,
#: and the file layout, of the full model's 91,282² dconn (33 GB, 16.7 GB of strips under
#: 2 GB), which adds no code path, only 8x the bytes (~3 min of the suite on 2 cores).
#: CONNSCALE_FULL_DCONN=1 writes the full one.
_DCONN = (91_282, "2GB") if os.environ.get("CONNSCALE_FULL_DCONN") else (32_800, "512MB")


@pytest.mark.slow
def test_hcp_dconn_out_of_core_on_the_cpu(tmp_path, caplog):
    """The HCP brain model (or a subset of all its structures), T = 16, under a memory limit."""
    n, memory_limit = _DCONN
    nbytes = n * n * 4  # float32: CIFTI's dconn
    free = shutil.disk_usage(tmp_path).free
    if free < nbytes * 1.2:
        pytest.skip(
            f"needs {nbytes * 1.2 / 1e9:.0f} GB free disk for the dconn; {free / 1e9:.0f} GB free"
        )
    hcp = nib.load(ONES_DSCALAR).header.get_axis(1)
    assert len(hcp) == 91_282
    bm = hcp[np.linspace(0, len(hcp) - 1, n).round().astype(int)]
    assert len(bm) == n and len(list(bm.iter_structures())) == 21
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((16, 4)) @ rng.standard_normal((4, n))).astype(np.float32)
    x += rng.standard_normal((16, n)).astype(np.float32)
    dtseries = tmp_path / "hcp.dtseries.nii"
    Cifti2Image(x, header=(SeriesAxis(0, 0.72, 16, unit="SECOND"), bm)).to_filename(dtseries)
    start = time.perf_counter()
    with caplog.at_level(logging.DEBUG, logger="connscale.fc.matrix_stream"):
        result = cifti_correlation(dtseries, tmp_path / "hcp.dconn.nii", device="cpu",
                                   memory_limit=memory_limit)  # fmt: skip
    print(f"{n} dconn: {time.perf_counter() - start:.1f} s, {result.plan.n_rounds} rounds")
    assert "rows assembled: False" in caplog.text  # tiles: the strips do not fit
    assert result.plan.n_rounds > 1
    image = nib.load(result.path)
    assert image.shape == (n, n) and image.get_data_dtype() == np.float32
    assert image.header.get_axis(0) == bm and image.header.get_axis(1) == bm
    assert result.path.stat().st_size >= nbytes > 2**32
    info = run_wb("-file-information", result.path, "-no-map-info", timeout=600)
    assert "Dense" in info and str(n) in info
    n_surface = int(bm.surface_mask.sum())  # the cortices, then the voxels
    sample = np.array([0, 1, n_surface // 2, n_surface - 1, n_surface, n - 1])
    data = image.dataobj  # memory-mapped: only the sampled rows are read
    reference = _reference(x, rows=sample)
    for row, expected in zip(sample, reference):
        np.testing.assert_allclose(np.asarray(data[:, row]), expected, atol=ATOL)
