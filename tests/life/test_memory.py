"""LiFE's memory: one MemoryPlanner per call, a caller's planner counted into,
a limit too small refused before the allocation it would not fit."""

import numpy as np
import pytest
import torch

from connscale import life
from connscale._compute import MemoryLimitError, MemoryPlanner
from connscale.life import api, encode
from connscale.life.encode import build_model, model_memory
from tests.life.conftest import random_problem

CPU = torch.device("cpu")
# random_problem(0), sphere=40: 128 streamline points, the build's worst case
# 32 * 128 + 160 * 128 = 24,576 bytes; its model and fit 36,764 bytes.
BETWEEN = 30_000
BELOW = 20_000


def _problem():
    return random_problem(0)


def _model_bytes(model, n_volumes):
    return model_memory(
        model.n_entries,
        len(model.av_voxel),
        model.n_voxels,
        n_volumes,
        model.n_fibres,
        model.entry_value.element_size(),
    )


def test_build_model_counts_into_the_planner_passed():
    data, bvals, bvecs, sl = _problem()
    planner = MemoryPlanner(CPU, "1GB")
    with pytest.warns(UserWarning, match="dropped"):
        model = build_model(
            data,
            bvals,
            bvecs,
            sl,
            affine=np.eye(4),
            sphere=40,
            device="cpu",
            memory_limit=planner,
            loaded_bytes=1000,
        )
    # The loaded volumes in host memory (on the CPU, the device's too), the model and its fit.
    assert planner.host_bytes == 1000
    assert planner.device_bytes == 1000 + _model_bytes(model, data.shape[3])


def test_fit_counts_into_the_planner_passed():
    data, bvals, bvecs, sl = _problem()
    planner = MemoryPlanner(CPU, "1GB")
    with pytest.warns(UserWarning, match="dropped"):
        result = life.fit(
            data,
            bvals,
            bvecs,
            sl,
            affine=np.eye(4),
            sphere=40,
            device="cpu",
            max_iter=5,
            memory_limit=planner,
        )
    assert planner.device_bytes == _model_bytes(result.model, data.shape[3])
    with pytest.warns(UserWarning, match="dropped"):
        alone = life.fit(
            data, bvals, bvecs, sl, affine=np.eye(4), sphere=40, device="cpu", max_iter=5
        )
    np.testing.assert_array_equal(result.weights, alone.weights)


def test_fit_refuses_a_limit_below_the_build_before_building(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("build_model ran")

    monkeypatch.setattr(api, "build_model", never)
    data, bvals, bvecs, sl = _problem()
    planner = MemoryPlanner(CPU, BELOW)
    with pytest.raises(MemoryLimitError, match=r"128 streamline points \(at worst\)"):
        life.fit(data, bvals, bvecs, sl, affine=np.eye(4), device="cpu", memory_limit=planner)
    assert planner.device_bytes == 0
    with pytest.raises(MemoryLimitError, match=f"memory_limit={BELOW}"):
        life.fit(data, bvals, bvecs, sl, affine=np.eye(4), device="cpu", memory_limit=BELOW)


@pytest.mark.parametrize("limit", [BETWEEN, MemoryPlanner(CPU, BETWEEN)])
def test_a_model_over_the_limit_is_refused_before_its_signal_is_read(monkeypatch, limit):
    def never(*args, **kwargs):
        raise AssertionError("the voxel signal was read")

    monkeypatch.setattr(encode, "_voxel_signal", never)
    data, bvals, bvecs, sl = _problem()
    with pytest.raises(MemoryLimitError, match="The LiFE model .* and its fit needs"):
        life.fit(
            data,
            bvals,
            bvecs,
            sl,
            affine=np.eye(4),
            sphere=40,
            device="cpu",
            memory_limit=limit,
        )
    if isinstance(limit, MemoryPlanner):
        assert limit.device_bytes == 0
