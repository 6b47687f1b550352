"""Every engine gives the serial engine's results, in the same order."""

from __future__ import annotations

import engine_funcs as ef
import numpy as np
import pytest
from numpy.testing import assert_array_equal

from connscale.engines import SerialEngine, get_engine, tree_sum
from connscale.engines.spark_engine import _local_master

ENGINE_FIXTURES = [
    "local_engine",
    pytest.param("dask_engine", marks=pytest.mark.cluster),
    pytest.param("spark_engine", marks=pytest.mark.cluster),
]
N_BLOCKS = 7  # odd, and more than Spark's driver-side tail of the tree


@pytest.fixture(params=ENGINE_FIXTURES)
def engine(request):
    return request.getfixturevalue(request.param)


def test_map_matches_serial(engine):
    rng = np.random.default_rng(0)
    items = [rng.standard_normal(n) for n in (3, 8, 1, 5, 2)]
    expected = SerialEngine().map(ef.item_stats, items)
    assert engine.map(ef.item_stats, items) == expected
    assert engine.map(ef.item_stats, []) == []


def test_blocks_match_serial(engine):
    serial = SerialEngine()
    reference = serial.load_blocks(ef.make_block, N_BLOCKS)
    vector = np.arange(ef.N_COLS, dtype=float) - 1.5
    blocks = engine.load_blocks(ef.make_block, N_BLOCKS)
    try:
        assert blocks.n_blocks == N_BLOCKS
        got = engine.map_blocks(blocks, ef.block_times, vector, 0.5)
        expected = serial.map_blocks(reference, ef.block_times, vector, 0.5)
        assert len(got) == N_BLOCKS
        for g, e in zip(got, expected):
            assert_array_equal(g, e)
        # Blocks are kept: a second call with other arguments works on them.
        got2 = engine.map_blocks(blocks, ef.block_times, -vector, 2.0)
        assert_array_equal(
            np.concatenate(got2),
            np.concatenate(serial.map_blocks(reference, ef.block_times, -vector, 2.0)),
        )
        # Sums: bitwise equal (same pairwise order everywhere) ...
        total = engine.sum_blocks(blocks, ef.block_gram)
        assert_array_equal(total, serial.sum_blocks(reference, ef.block_gram))
        assert_array_equal(
            engine.sum_blocks(blocks, ef.block_times, vector, 1.0),
            serial.sum_blocks(reference, ef.block_times, vector, 1.0),
        )
        # ... and equal to the plain sum up to rounding.
        np.testing.assert_allclose(
            total, sum(ef.block_gram(ef.make_block(i)) for i in range(N_BLOCKS)), rtol=1e-12
        )
    finally:
        engine.release(blocks)
    with pytest.raises(ValueError, match="released"):
        engine.map_blocks(blocks, ef.block_gram)


def test_single_block(engine):
    blocks = engine.load_blocks(ef.make_block, 1)
    try:
        assert_array_equal(
            engine.sum_blocks(blocks, ef.block_gram), ef.block_gram(ef.make_block(0))
        )
    finally:
        engine.release(blocks)


def test_failed_task_is_retried(engine, tmp_path):
    markers = [str(tmp_path / f"{engine.name}_{i}") for i in range(3)]
    assert engine.map(ef.fail_once, markers) == [f"{engine.name}_{i}" for i in range(3)]


def test_task_error_raised_after_retries(engine):
    with pytest.raises(Exception, match="always fails"):
        engine.map(ef.always_fail, [1])


def test_local_engine_without_retries(tmp_path):
    with (
        get_engine("local", n_jobs=1, retries=0) as engine,
        pytest.raises(RuntimeError, match="planned failure"),
    ):
        engine.map(ef.fail_once, [str(tmp_path / "marker")])


def test_tree_sum_order():
    values = [np.float64(v) for v in (1e16, 1.0, -1e16, 1.0, 3.0)]
    # ((a+b) + (c+d)) + e, not the left fold.
    assert tree_sum(values) == ((values[0] + values[1]) + (values[2] + values[3])) + values[4]
    with pytest.raises(ValueError, match="empty"):
        tree_sum([])


@pytest.mark.parametrize(
    "master, expected",
    [
        ("local[2]", "local[2,2]"),
        ("local[*]", "local[*,2]"),
        ("local", "local[1,2]"),
        ("spark://host:7077", "spark://host:7077"),
    ],
)
def test_spark_local_master_allows_retries(master, expected):
    assert _local_master(master, 1) == expected
    assert _local_master(master, 0) == master


def test_get_engine_errors():
    with pytest.raises(ValueError, match="'engine' must be one of"):
        get_engine("ray")
    with pytest.raises(ValueError, match="only used by the 'dask' and 'spark'"):
        get_engine("local", cluster="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="'n_jobs' must be a positive"):
        get_engine("local", n_jobs=0)
    with pytest.raises(ValueError, match="'retries' must be >= 0"):
        get_engine("local", retries=-1)
    with pytest.raises(ValueError, match="'dashboard_address' is only used by the 'dask'"):
        get_engine("local", dashboard_address="127.0.0.1:8787")
    with pytest.raises(ValueError, match="'errors' must be one of"):
        SerialEngine().map(ef.item_stats, [], errors="ignore")
    assert isinstance(get_engine("serial"), SerialEngine)


def test_local_engine_replaces_dead_workers(tmp_path):
    with get_engine("local", n_jobs=2, retries=1) as engine:
        assert engine.map(ef.exit_once, [str(tmp_path / "a"), str(tmp_path / "b")]) == ["a", "b"]
        blocks = engine.load_blocks(ef.make_block, 3)
        # The partition whose worker died gets its blocks rebuilt from the loader.
        got = engine.sum_blocks(blocks, ef.block_gram_exit_once, str(tmp_path / "c"))
        expected = SerialEngine().sum_blocks(
            SerialEngine().load_blocks(ef.make_block, 3), ef.block_gram
        )
        assert_array_equal(got, expected)


@pytest.mark.cluster
def test_dask_engine_on_a_scheduler_address(dask_engine):
    address = dask_engine.client.scheduler.address
    with get_engine("dask", cluster=address) as engine:
        assert engine.n_jobs == 2
        assert engine.map(ef.item_stats, [np.ones(3)]) == [(3.0, 3)]
    # Closing the second client leaves the cluster running.
    assert dask_engine.map(ef.item_stats, [np.ones(2)]) == [(2.0, 2)]


@pytest.mark.cluster
def test_spark_engine_on_a_running_context(spark_engine):
    from connscale.engines import SparkEngine

    with SparkEngine(spark_engine.sc) as engine:
        assert engine.n_jobs == 2
        assert engine.map(ef.item_stats, [np.ones(3)]) == [(3.0, 3)]
    assert spark_engine.sc is not None
    assert spark_engine.map(ef.item_stats, [np.ones(2)]) == [(2.0, 2)]
    with pytest.raises(ValueError, match="'cluster' must be None, a Spark master URL"):
        SparkEngine(42)


def test_nanny_environ_is_dasks_without_malloc_trim_threshold():
    import dask

    from connscale.engines.dask_engine import nanny_environ

    environ = {"MALLOC_TRIM_THRESHOLD_": 65536, "OMP_NUM_THREADS": 1}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        assert nanny_environ() == {"distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1}}
