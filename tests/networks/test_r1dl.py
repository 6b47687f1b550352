import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

import connscale
from connscale.engines import SerialEngine
from connscale.networks import R1DL, match_networks, r1dl, spatial_similarity
from connscale.networks._r1dl import ConvergenceWarning
from connscale.networks._reference import r1dl_reference

from .conftest import DEVICES, N_NETWORKS, N_VOXELS, SIZE


def _support_similarity(a, b):
    return np.diag(spatial_similarity(a, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_planted_networks_recovered(planted, device, dtype):
    S, tc, maps = planted
    res = r1dl(S, N_NETWORKS, SIZE, random_state=0, device=device, dtype=dtype)
    assert res.dictionary.shape == (S.shape[0], N_NETWORKS)
    assert res.loadings.shape == (N_NETWORKS, N_VOXELS)
    assert sp.isspmatrix_csr(res.loadings)
    assert res.dictionary.dtype == np.dtype(dtype)
    assert_allclose(np.linalg.norm(res.dictionary, axis=0), 1, rtol=1e-5)
    _, t_idx, sim = match_networks(res.loadings, maps)
    assert sim.min() >= 0.9
    assert sorted(t_idx) == list(range(N_NETWORKS))
    # Time courses match the planted ones (up to sign) for matched pairs.
    m_idx, t_idx, _ = match_networks(res.loadings, maps)
    corr = [abs(np.corrcoef(res.dictionary[:, m], tc[:, t])[0, 1]) for m, t in zip(m_idx, t_idx)]
    assert min(corr) > 0.95
    assert res.n_iter.shape == (N_NETWORKS,)
    assert np.all(res.n_iter >= 1) and res.converged.all()


@pytest.mark.parametrize("selection", ["magnitude", "signed"])
@pytest.mark.parametrize("standardize", [True, False])
def test_float64_equals_numpy_reference(planted, selection, standardize):
    S = planted[0][:, :600]
    U_ref, V_ref, it_ref = r1dl_reference(
        S, 5, 40, selection=selection, standardize=standardize, random_state=3
    )
    res = r1dl(
        S,
        5,
        40,
        selection=selection,
        standardize=standardize,
        random_state=3,
        device="cpu",
        dtype="float64",
    )
    assert_allclose(res.dictionary, U_ref, atol=1e-10)
    assert_allclose(res.loadings.toarray(), V_ref, atol=1e-10)
    np.testing.assert_array_equal(res.n_iter, it_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_close_to_reference(planted, device):
    S = planted[0]
    U_ref, V_ref, _ = r1dl_reference(S, N_NETWORKS, SIZE, random_state=1)
    res = r1dl(S, N_NETWORKS, SIZE, random_state=1, device=device, dtype="float32")
    assert _support_similarity(res.loadings, V_ref).min() >= 0.99
    assert_allclose(res.dictionary, U_ref, atol=1e-3)
    assert_allclose(res.loadings.toarray(), V_ref, atol=1e-3)


def test_n_init_matches_reference(planted):
    S = planted[0][:, :400]
    U_ref, V_ref, _ = r1dl_reference(S, 3, 30, n_init=4, random_state=5)
    res = r1dl(S, 3, 30, n_init=4, random_state=5, device="cpu", dtype="float64")
    assert_allclose(res.dictionary, U_ref, atol=1e-10)
    assert_allclose(res.loadings.toarray(), V_ref, atol=1e-10)


def test_signed_selection_nonnegative(planted):
    res = r1dl(planted[0], 3, SIZE, selection="signed", random_state=0, device="cpu")
    assert (res.loadings.data > 0).all()
    assert np.all(np.diff(res.loadings.indptr) <= SIZE)


def test_sparsity_fraction_and_count(planted):
    S = planted[0]
    res = r1dl(S, 2, 0.04, random_state=0, device="cpu")
    assert res.sparsity == round(0.04 * N_VOXELS)
    assert np.all(np.diff(res.loadings.indptr) <= res.sparsity)
    res = r1dl(S, 2, 7, random_state=0, device="cpu")
    assert res.sparsity == 7 and np.all(np.diff(res.loadings.indptr) <= 7)


def test_input_not_modified_and_seed_reproducible(planted):
    S = planted[0].copy()
    before = S.copy()
    a = r1dl(S, 3, 50, random_state=7, device="cpu")
    b = r1dl(S, 3, 50, random_state=7, device="cpu")
    np.testing.assert_array_equal(S, before)
    np.testing.assert_array_equal(a.dictionary, b.dictionary)
    assert (a.loadings != b.loadings).nnz == 0


def test_mmap_streamed_equals_in_memory(planted, tmp_path):
    S = planted[0].astype(np.float32)
    path = tmp_path / "S.npy"
    np.save(path, S)
    mem = r1dl(S, 3, SIZE, random_state=2, device="cpu", dtype="float64")
    streamed = r1dl(
        str(path),
        3,
        SIZE,
        random_state=2,
        device="cpu",
        dtype="float64",
        memory_limit=700_000,
        block_size=256,
    )
    assert mem.info["mode"] == "resident"
    assert streamed.info["mode"] == "streamed" and streamed.info["n_blocks"] == 6
    assert_allclose(streamed.dictionary, mem.dictionary, atol=1e-10)
    assert_allclose(streamed.loadings.toarray(), mem.loadings.toarray(), atol=1e-10)
    # float32 streamed vs resident: same networks.
    mem32 = r1dl(str(path), 3, SIZE, random_state=2, device="cpu")
    st32 = r1dl(
        str(path), 3, SIZE, random_state=2, device="cpu", memory_limit=700_000, block_size=256
    )
    assert _support_similarity(st32.loadings, mem32.loadings).min() >= 0.99


def test_hdf5_input(planted, tmp_path):
    h5py = pytest.importorskip("h5py")
    S = planted[0]
    path = tmp_path / "S.h5"
    with h5py.File(path, "w") as f:
        f["bold"] = S
    ref = r1dl(S, 2, SIZE, random_state=0, device="cpu", dtype="float64")
    res = r1dl(f"{path}:bold", 2, SIZE, random_state=0, device="cpu", dtype="float64")
    assert_allclose(res.dictionary, ref.dictionary, atol=1e-12)
    res = r1dl(
        path,
        2,
        SIZE,
        random_state=0,
        device="cpu",
        dtype="float64",
        memory_limit=1_100_000,
        block_size=500,
    )
    assert res.info["mode"] == "streamed"
    assert_allclose(res.dictionary, ref.dictionary, atol=1e-10)


def test_serial_engine_equals_local(planted):
    S = planted[0]
    local = r1dl(S, 3, SIZE, random_state=4, device="cpu", dtype="float64")
    with SerialEngine() as engine:
        res = r1dl(S, 3, SIZE, random_state=4, backend=engine, dtype="float64", block_size=200)
    assert res.info["mode"] == "engine" and res.info["n_blocks"] == 8
    assert_allclose(res.dictionary, local.dictionary, atol=1e-10)
    assert_allclose(res.loadings.toarray(), local.loadings.toarray(), atol=1e-10)
    np.testing.assert_array_equal(res.n_iter, local.n_iter)


def test_serial_engine_file_blocks(planted, tmp_path):
    S = planted[0]
    np.save(tmp_path / "S.npy", S)
    local = r1dl(S, 2, SIZE, random_state=4, device="cpu", dtype="float64")
    res = r1dl(
        tmp_path / "S.npy",
        2,
        SIZE,
        random_state=4,
        backend=SerialEngine(),
        dtype="float64",
        block_size=333,
    )
    assert_allclose(res.dictionary, local.dictionary, atol=1e-10)


def test_constant_voxels_and_zero_residual():
    rng = np.random.default_rng(0)
    S = rng.standard_normal((30, 50))
    S[:, :5] = 3.0  # constant voxels standardise to 0 and are never picked first
    res = r1dl(S, 2, 10, random_state=0, device="cpu", dtype="float64")
    assert not np.isin(res.loadings.indices, np.arange(5)).any()
    # Rank-1 data: the first atom is the data's u.
    u = rng.standard_normal(20)
    v = rng.standard_normal(8)
    res = r1dl(
        np.outer(u, v), 1, 8, standardize=False, random_state=0, device="cpu", dtype="float64"
    )
    assert_allclose(abs(res.dictionary[:, 0] @ u) / np.linalg.norm(u), 1, atol=1e-8)


def test_convergence_warning_and_iterations(planted):
    with pytest.warns(ConvergenceWarning, match="reached max_iter=1"):
        res = r1dl(planted[0], 2, SIZE, max_iter=1, tol=1e-12, random_state=0, device="cpu")
    np.testing.assert_array_equal(res.n_iter, [1, 1])
    assert not res.converged.any()


_SPARSITY = (
    r"'sparsity' parameter of r1dl must be an int in the range \[1, inf\) or a "
    r"float in the range \(0, 1\]. Got "
)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sparsity=0), _SPARSITY + r"0 instead"),
        (dict(sparsity=1.5), _SPARSITY + r"1.5 instead"),
        (dict(sparsity=N_VOXELS + 1), "'sparsity' as a count must lie in"),
        (dict(sparsity="a"), _SPARSITY + r"'a' instead"),
        (
            dict(n_components=0),
            r"'n_components' parameter of r1dl must be an int in the range \[1, inf\)",
        ),
        (dict(selection="abs"), "'selection' parameter of r1dl must be a str among"),
        (dict(backend="mpi"), "'backend' parameter of r1dl must be a str among .* or an Engine"),
        (dict(tol=-1), r"'tol' parameter of r1dl must be a float in the range \(0, inf\)"),
        (dict(max_iter=0), r"'max_iter' parameter of r1dl must be an int in the range \[1, inf\)"),
        (dict(n_init=0), r"'n_init' parameter of r1dl must be an int in the range \[1, inf\)"),
        (dict(dtype="int8"), "'dtype' parameter of r1dl must be"),
        (dict(device="tpu"), "'device' parameter of r1dl must be"),
        (dict(cluster="tcp://host:8786"), "'cluster' is only used by the 'dask' and 'spark'"),
        (
            dict(block_size=0),
            r"'block_size' parameter of r1dl must be an int in the range \[1, inf\)",
        ),
    ],
)
def test_bad_parameters(planted, kwargs, match):
    args = dict(n_components=2, sparsity=10)
    args.update(kwargs)
    S = planted[0]
    with pytest.raises(ValueError, match=match):
        r1dl(S, args.pop("n_components"), args.pop("sparsity"), **args)


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="must be a 2-D matrix"):
        r1dl(np.zeros((3, 4, 5)), 1, 2)
    bad = np.ones((10, 6))
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        r1dl(bad, 1, 2)
    with pytest.raises(FileNotFoundError, match="not found"):
        r1dl(tmp_path / "missing.npy", 1, 2)
    (tmp_path / "S.txt").write_text("1 2")
    with pytest.raises(ValueError, match="path to a .npy or HDF5"):
        r1dl(tmp_path / "S.txt", 1, 2)
    with pytest.raises(ValueError, match="at least 2 time points"):
        r1dl(np.ones((1, 5)), 1, 2)
    bad32 = np.ones((10, 6), dtype=np.float32)
    bad32[0, 5] = np.inf
    np.save(tmp_path / "bad.npy", bad32)
    with pytest.raises(ValueError, match="NaN or infinite"):
        r1dl(tmp_path / "bad.npy", 1, 2, device="cpu")


def test_estimator_fit_transform(planted):
    S, tc, maps = planted
    est = R1DL(N_NETWORKS, SIZE, random_state=0, device="cpu")
    with pytest.raises(ValueError, match="not fitted"):
        est.transform(S)
    courses = est.fit_transform(S)
    assert courses.shape == (S.shape[0], N_NETWORKS)
    assert est.components_.shape == (N_NETWORKS, N_VOXELS)
    assert est.dictionary_.shape == (S.shape[0], N_NETWORKS)
    assert est.n_iter_.shape == (N_NETWORKS,)
    assert est.n_features_in_ == N_VOXELS
    m_idx, t_idx, sim = match_networks(est.components_, maps)
    assert sim.min() >= 0.9
    corr = [abs(np.corrcoef(courses[:, m], tc[:, t])[0, 1]) for m, t in zip(m_idx, t_idx)]
    assert min(corr) > 0.95
    with pytest.raises(ValueError, match="voxels; this R1DL was fitted on"):
        est.transform(S[:, :10])


def test_top_level_exports():
    for name in ("r1dl", "R1DL", "spatial_similarity", "match_networks"):
        assert name in connscale.__all__
        assert getattr(connscale, name) is getattr(connscale.networks, name)


@pytest.mark.parametrize("selection", ["magnitude", "signed"])
def test_streamed_unstandardized_equals_reference(planted, tmp_path, selection):
    S = planted[0][:, :700]
    np.save(tmp_path / "S.npy", S)
    U_ref, V_ref, it_ref = r1dl_reference(
        S, 3, 30, standardize=False, selection=selection, random_state=8
    )
    res = r1dl(
        tmp_path / "S.npy",
        3,
        30,
        standardize=False,
        selection=selection,
        random_state=8,
        device="cpu",
        dtype="float64",
        memory_limit=300_000,
        block_size=128,
    )
    assert res.info["mode"] == "streamed"
    assert_allclose(res.dictionary, U_ref, atol=1e-10)
    assert_allclose(res.loadings.toarray(), V_ref, atol=1e-10)
    np.testing.assert_array_equal(res.n_iter, it_ref)
