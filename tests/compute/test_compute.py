import numpy as np
import pytest
import torch

from connscale._compute import (
    PinnedBufferPool,
    allow_tf32,
    format_bytes,
    memory_budget,
    parse_memory,
    resolve_device,
    resolve_dtype,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8GB", 8 * 10**9),
        ("512MB", 512 * 10**6),
        ("2GiB", 2 * 1024**3),
        ("1.5 gb", 1.5e9),
        (1000, 1000),
        (None, None),
        ("100", 100),
    ],
)
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("bad", ["lots", "8XB", -5, 0, True])
def test_parse_memory_rejects(bad):
    with pytest.raises(ValueError, match="memory_limit"):
        parse_memory(bad)


def test_memory_budget_respects_limit():
    cpu = torch.device("cpu")
    assert memory_budget(cpu, "1MB") == 10**6
    assert 0 < memory_budget(cpu) < memory_budget(cpu, None, fraction=1.0) + 1


def test_planner_reserve_result():
    from connscale._compute.memory import MemoryLimitError, MemoryPlanner

    cpu = torch.device("cpu")
    planner = MemoryPlanner(cpu, "1MB", hint="Pass out=.")
    # too large for the host budget: refused before anything is counted
    with pytest.raises(MemoryLimitError, match=r"The result needs 1.1 MB .*Use a file\."):
        planner.reserve_result(1_000_000, "The result", kept=100_000, hint="Use a file.")
    assert planner.host_bytes == 0
    # in the caller's buffer: only the bookkeeping beside it is counted
    assert planner.reserve_result(900_000, "r", kept=1000, preallocated=901_000) == 1000
    # a result that grows is counted as it grows; only its bookkeeping here
    assert planner.reserve_result(None, "r", kept=500) == 500
    assert planner.reserve_result(600_000, "r", kept=10) == 600_010
    assert planner.host_bytes == planner.device_bytes == 601_510  # on the CPU, one memory
    with pytest.raises(MemoryLimitError, match="Pass out="):
        planner.reserve_result(398_491, "r")


def test_resolve_device_and_dtype():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("float64") is torch.float64
    assert resolve_dtype(np.float32) is torch.float32
    assert resolve_dtype(torch.float64) is torch.float64
    with pytest.raises(ValueError, match="'dtype' must be"):
        resolve_dtype("int8")
    with pytest.raises(ValueError, match="'device' must be"):
        resolve_device("gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_requested_without_cuda():
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_a_device_that_cannot_start_is_left_to_the_runs():
    """start_device raises resolve_device's error; the participant level's start
    logs it and goes on (each run records the error itself)."""
    from connscale._compute.device import start_device
    from connscale.bidsapp.participant import _start_device

    start_device("cpu")
    with pytest.raises(ValueError, match="CUDA is not available"):
        start_device("cuda")
    _start_device("cuda")


def test_allow_tf32_restores():
    before = torch.backends.cuda.matmul.allow_tf32
    with allow_tf32(True):
        assert torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_pinned_pool_round_robin():
    pool = PinnedBufferPool(2, 10, torch.float32, torch.device("cpu"))
    i0, b0 = pool.acquire()
    i1, b1 = pool.acquire()
    i2, b2 = pool.acquire()
    assert (i0, i1, i2) == (0, 1, 0) and b2.data_ptr() == b0.data_ptr()
    assert pool.capacity == 10


def test_format_bytes():
    assert format_bytes(1500) == "1.5 KB"
    assert format_bytes(2.5e9) == "2.5 GB"
