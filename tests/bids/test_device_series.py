"""A run's decoded series are copied to the GPU once, for every set that reads them
(connscale.bidsapp.cleaned_voxels.device_series)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from connscale.bidsapp import cleaned_voxels
from connscale.bidsapp.cleaned_voxels import device_series


def test_the_series_are_copied_once_and_anew_when_they_change(monkeypatch):
    """The copy is kept in the run's context while ``decoded.data`` is the array it copies;
    a despiked run (a new array) is copied anew; with a memory limit, nothing is kept."""
    monkeypatch.setattr(cleaned_voxels, "_held_on", lambda config, nbytes: torch.device("cpu"))
    config = SimpleNamespace(device="cpu", memory_limit=None)
    decoded = SimpleNamespace(data=np.arange(12, dtype=np.float32).reshape(4, 3))
    context: dict = {}
    first = device_series(config, decoded, context)
    assert isinstance(first, torch.Tensor)
    np.testing.assert_array_equal(first.numpy(), decoded.data)
    assert device_series(config, decoded, context) is first
    decoded.data = decoded.data * 2  # despiked into a new array
    again = device_series(config, decoded, context)
    assert again is not first
    np.testing.assert_array_equal(again.numpy(), decoded.data)


def test_the_cpu_and_a_memory_limit_keep_the_decoded_array():
    decoded = SimpleNamespace(data=np.ones((4, 3), np.float32))
    for config in (
        SimpleNamespace(device="cpu", memory_limit=None),
        SimpleNamespace(device="cuda", memory_limit="1GB"),
    ):
        context: dict = {}
        assert device_series(config, decoded, context) is decoded.data and not context


def test_series_held_on_the_gpu_take_at_most_an_eighth_of_it(monkeypatch):
    """The rule alone (a GPU of 8 GiB stood in for): 1 GiB of series is held, more is not."""
    import connscale._compute as compute

    monkeypatch.setattr(compute, "resolve_device", lambda device: torch.device("cuda"))
    props = SimpleNamespace(total_memory=8 * 1024**3)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    config = SimpleNamespace(device="cuda", memory_limit=None)
    assert cleaned_voxels._held_on(config, 1024**3) == torch.device("cuda")
    assert cleaned_voxels._held_on(config, 1024**3 + 1) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_sets_read_the_one_copy(monkeypatch):
    """QC's initial DVARS and the cleanings read one device copy: the same values as
    copies made by each (the decoded array given to them)."""
    from connscale.bidsapp.qc_outputs import initial_dvars

    rng = np.random.default_rng(0)
    decoded = SimpleNamespace(data=(100 + rng.standard_normal((40, 500))).astype(np.float32))
    config = SimpleNamespace(device="cuda", memory_limit=None, dtype="float32")
    context = {"dummy_scans": 2}
    copied = initial_dvars(config, decoded, context)
    assert context["series_on_device"][1].device.type == "cuda"
    huge = torch.cuda.get_device_properties(0).total_memory // 4
    assert cleaned_voxels._held_on(config, huge) is None  # held through the run: too large
    monkeypatch.setattr(cleaned_voxels, "_held_on", lambda config, nbytes: None)
    np.testing.assert_allclose(initial_dvars(config, decoded, {"dummy_scans": 2}), copied)
