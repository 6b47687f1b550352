"""The same networks on every backend: local torch, serial, Dask, Spark."""

import numpy as np
import pytest
import r1dl_funcs as rf
from numpy.testing import assert_allclose

from connscale.engines import SerialEngine
from connscale.networks import _blocks, r1dl, spatial_similarity
from connscale.networks._r1dl import _AtomSettings, _run_engine

from .conftest import SIZE

K = 2  # Spark runs each pass as a job (~0.1-1 s): keep them few


ENGINES = [
    "serial_engine",
    pytest.param("dask_engine", marks=pytest.mark.cluster),
    pytest.param("spark_engine", marks=pytest.mark.cluster),
]


@pytest.fixture(scope="module")
def serial_engine():
    return SerialEngine()


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def local_results(planted):
    S = planted[0]
    return {
        dtype: r1dl(S, K, SIZE, random_state=11, device="cpu", dtype=dtype)
        for dtype in ("float32", "float64")
    }


def _diag_similarity(a, b):
    return np.diag(spatial_similarity(a, b))


def test_engine_matches_local(engine, planted, local_results):
    S = planted[0]
    # In-memory data, shipped once with the load tasks; float32 as by default.
    res = r1dl(S, K, SIZE, random_state=11, backend=engine, block_size=375)
    assert res.info["mode"] == "engine" and res.info["n_blocks"] == 4
    ref = local_results["float32"]
    assert _diag_similarity(res.loadings, ref.loadings).min() >= 0.99
    assert_allclose(res.dictionary, ref.dictionary, atol=1e-4)


@pytest.mark.parametrize("engine", ENGINES[:2], indirect=True)
def test_engine_file_blocks_float64(engine, planted, local_results, tmp_path):
    # Spark's float64 file path is exercised by the failure tests below.
    S = planted[0]
    np.save(tmp_path / "S.npy", S)
    res64 = r1dl(
        tmp_path / "S.npy",
        K,
        SIZE,
        random_state=11,
        backend=engine,
        dtype="float64",
        block_size=500,
    )
    ref = local_results["float64"]
    assert_allclose(res64.dictionary, ref.dictionary, atol=1e-10)
    assert_allclose(res64.loadings.toarray(), ref.loadings.toarray(), atol=1e-10)
    np.testing.assert_array_equal(res64.n_iter, ref.n_iter)


def _loader(S, bounds, tmp_path):
    np.save(tmp_path / "S.npy", S)
    source = _blocks.open_source(tmp_path / "S.npy")
    return source.loader(bounds, standardize=True, dtype="float64")


def _run(engine, loader, S, n_blocks):
    out, _ = _run_engine(
        engine,
        loader,
        S.shape,
        n_blocks,
        dtype=__import__("torch").float64,
        settings=_AtomSettings(n_atoms=K, r=SIZE, tol=0.01, max_iter=100, selection="magnitude"),
        rng=np.random.default_rng(11),
    )
    return out


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["dask_engine", "spark_engine"])
def test_failed_load_is_retried(request, name, planted, local_results, tmp_path):
    engine = request.getfixturevalue(name)
    S = planted[0]
    bounds = _blocks.block_bounds(S.shape[1], 500)
    marker = tmp_path / "marker"
    loader = rf.FailOnceLoader(_loader(S, bounds, tmp_path), str(marker), block=1)
    U, idx, val, n_iter, _ = _run(engine, loader, S, len(bounds) - 1)
    assert marker.exists()  # the failure happened, and was retried
    ref = local_results["float64"]
    assert_allclose(U.numpy(), ref.dictionary, atol=1e-10)
    np.testing.assert_array_equal(n_iter, ref.n_iter)


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["dask_engine", "spark_engine"])
def test_worker_lost_mid_run_is_recomputed(request, name, planted, local_results, tmp_path):
    engine = request.getfixturevalue(name)
    S = planted[0]
    bounds = _blocks.block_bounds(S.shape[1], 500)
    marker = tmp_path / "marker"
    loader = rf.CrashOnceLoader(_loader(S, bounds, tmp_path), str(marker), block=2)
    U, idx, val, n_iter, _ = _run(engine, loader, S, len(bounds) - 1)
    assert marker.exists()  # a worker died during the first pass
    ref = local_results["float64"]
    assert_allclose(U.numpy(), ref.dictionary, atol=1e-10)
    np.testing.assert_array_equal(n_iter, ref.n_iter)


@pytest.mark.cluster
def test_backend_name_and_address(dask_engine, planted, local_results):
    S = planted[0]
    address = dask_engine.client.scheduler.address
    res = r1dl(
        S,
        K,
        SIZE,
        random_state=11,
        backend="dask",
        cluster=address,
        dtype="float64",
        block_size=500,
    )
    assert res.info["backend"] == "dask" and res.info["engine"] == "dask"
    assert_allclose(res.dictionary, local_results["float64"].dictionary, atol=1e-10)
