"""The resident r1DL update: exact top-r with its tie rule, the fused updater
against the block updater, the Triton kernels (interpreted on the CPU, on
the GPU where there is one) and the storage plans."""

from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from connscale.networks import _r1dl, r1dl
from connscale.networks._blocks import open_source
from connscale.networks._operators import ResidentOperator, StreamedOperator
from connscale.networks._select import order_keys, top_r_sorted, top_r_sorted_torch
from connscale.networks._update import BlockUpdater, ResidentUpdater

from .._interpreted import run_interpreted
from ._triton_interpreted import assert_same_atoms, run_atoms
from .conftest import SIZE

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")


def _reference_top_r(y: np.ndarray, r: int, selection: str):
    """float64 numpy: all scores above the r-th largest, then the lowest-index ties."""
    score = np.abs(y) if selection == "magnitude" else y
    threshold = np.sort(score)[-r]
    above = np.flatnonzero(score > threshold)
    ties = np.flatnonzero(score == threshold)[: r - above.size]
    idx = np.sort(np.concatenate([above, ties]))
    values = y[idx]
    return idx, np.maximum(values, 0) if selection == "signed" else values


def _with_ties(n, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    y[::7] = 0.0
    y[3::11] = 0.5
    y[5::13] = -0.5
    y[1] = -0.0
    return y.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_order_keys_sort_like_the_values(dtype):
    y = _with_ties(500, 0, dtype)
    for selection, score in (("magnitude", y.abs()), ("signed", y)):
        keys = order_keys(y, selection)
        assert keys.dtype == (torch.int32 if dtype == torch.float32 else torch.int64)
        # Equal scores <-> equal keys (except -0.0 < +0.0 when signed); order kept.
        k, s = keys.numpy(), score.numpy()
        i, j = np.triu_indices(len(k), 1)
        assert np.all((k[i] < k[j]) <= (s[i] <= s[j]))
        assert np.all((s[i] < s[j]) <= (k[i] < k[j]))


@pytest.mark.parametrize("selection", ["magnitude", "signed"])
@pytest.mark.parametrize("r", [1, 37, 200, 999, 1000])
def test_top_r_matches_numpy_reference_with_ties(selection, r):
    y = _with_ties(1000, 1)
    idx, values = top_r_sorted_torch(y, r, selection)
    ref_idx, ref_values = _reference_top_r(y.numpy().astype(np.float64), r, selection)
    np.testing.assert_array_equal(idx.numpy(), ref_idx)
    assert_allclose(values.numpy(), ref_values, rtol=0, atol=0)
    out = (torch.empty(r, dtype=torch.int64), torch.empty(r))
    top_r_sorted(y, r, selection, out=out)
    assert torch.equal(out[0], idx) and torch.equal(out[1], values)


def _updaters_agree(a, b, S, n_atoms, r, selection, n_steps=4, seed=0):
    starts = np.random.default_rng(seed)
    for _ in range(n_atoms):
        u0 = starts.standard_normal(S.shape[0])
        u0 = torch.as_tensor(u0 / np.linalg.norm(u0))
        for updater in (a, b):
            updater.start(u0.to(updater.U.dtype))
        for _ in range(n_steps):
            stats_a, stats_b = a.step(), b.step()
            assert_allclose(stats_a, stats_b, rtol=1e-9, atol=1e-12)
        (ua, ia, va), (ub, ib, vb) = a.current(), b.current()
        np.testing.assert_array_equal(ia.numpy(), np.sort(ib.numpy()))
        assert_allclose(ua.numpy(), ub.numpy(), atol=1e-12)
        assert_allclose(va.numpy(), vb.numpy()[np.argsort(ib.numpy())], atol=1e-12)
        a.commit(ua, ia, va)
        b.commit(ub, ib[np.argsort(ib.numpy())], vb[np.argsort(ib.numpy())])


@pytest.mark.parametrize("selection", ["magnitude", "signed"])
def test_resident_updater_equals_block_updater(planted, selection):
    """Fused update (CSR deflation, threshold top-r, one pass) = two-pass block update."""
    S = planted[0]
    source = open_source(S)
    kwargs = dict(device=torch.device("cpu"), dtype=torch.float64, standardize=True, block_size=400)
    resident = ResidentOperator(source, **kwargs)
    streamed = StreamedOperator(source, **kwargs)
    fast = resident.updater(n_atoms=4, r=SIZE, selection=selection)
    assert isinstance(fast, ResidentUpdater) and not fast.triton and not fast.use_graphs
    plain = BlockUpdater(streamed, n_atoms=4, r=SIZE, selection=selection)
    _updaters_agree(fast, plain, S, 4, SIZE, selection)
    assert fast.n_entries == 4 * SIZE
    # Voxel-major CSR: rows ascending, atoms ascending within a row.
    rowptr = fast.rowptr.numpy()
    assert rowptr[-1] == fast.n_entries and np.all(np.diff(rowptr) >= 0)
    voxel = fast.entry_voxel[: fast.n_entries].numpy()
    atom = fast.entry_atom[: fast.n_entries].numpy()
    weight = fast.entry_weight[: fast.n_entries].numpy()
    ref_voxel = fast.atom_idx[:4].numpy().ravel()
    ref_atom = np.repeat(np.arange(4), SIZE)
    order = np.lexsort((ref_atom, ref_voxel))
    np.testing.assert_array_equal(voxel, ref_voxel[order])
    np.testing.assert_array_equal(atom, ref_atom[order])
    np.testing.assert_array_equal(weight, fast.atom_val[:4].numpy().ravel()[order])
    counts = np.bincount(ref_voxel, minlength=len(rowptr) - 1)
    np.testing.assert_array_equal(rowptr, np.r_[0, np.cumsum(counts)])


def test_revert_restores_u(planted):
    St = torch.as_tensor(planted[0].T.copy())
    updater = ResidentUpdater(St, n_atoms=1, r=10, selection="magnitude")
    u0 = torch.nn.functional.normalize(torch.ones(St.shape[1], dtype=St.dtype), dim=0)
    updater.start(u0)
    updater.step()
    assert not torch.equal(updater.u, u0)
    updater.revert()
    assert torch.equal(updater.u, u0)


def test_updater_options_are_checked(planted):
    St = torch.as_tensor(planted[0].T.copy())
    with pytest.raises(ValueError, match="Triton"):
        ResidentUpdater(St, n_atoms=1, r=10, selection="magnitude", use_triton=True)
    with pytest.raises(ValueError, match="CUDA graphs"):
        ResidentUpdater(St, n_atoms=1, r=10, selection="magnitude", use_graphs=True)


def test_triton_kernels_interpreted_on_cpu():
    """The Triton kernels themselves, run by Triton's interpreter, equal the torch path."""
    run_interpreted(Path(__file__).with_name("_triton_interpreted.py"))


# -- storage plans -------------------------------------------------------------


def test_storages_give_the_same_networks(planted, tmp_path):
    S = planted[0]
    path = tmp_path / "S.npy"
    np.save(path, S)
    ref = r1dl(S, 3, SIZE, random_state=2, device="cpu", dtype="float64")
    assert ref.info["mode"] == "resident"
    for storage, mode in (("device", "resident"), ("host", "resident"), ("file", "streamed")):
        res = r1dl(
            str(path),
            3,
            SIZE,
            random_state=2,
            device="cpu",
            dtype="float64",
            storage=storage,
            block_size=256,
        )
        assert res.info["mode"] == mode
        assert_allclose(res.dictionary, ref.dictionary, atol=1e-10)
        assert_allclose(res.loadings.toarray(), ref.loadings.toarray(), atol=1e-10)
        np.testing.assert_array_equal(res.n_iter, ref.n_iter)


def test_storage_is_validated(planted):
    S = planted[0]
    with pytest.raises(ValueError, match="storage"):
        r1dl(S, 1, SIZE, device="cpu", storage="gpu")
    with pytest.raises(ValueError, match="storage='device' needs"):
        r1dl(S, 1, SIZE, device="cpu", storage="device", memory_limit=10_000)
    with pytest.raises(ValueError, match="only used by the 'local' backend"):
        r1dl(S, 1, SIZE, backend="dask", storage="file")
    # auto under a small limit streams
    res = r1dl(S, 1, SIZE, device="cpu", memory_limit=700_000, block_size=300, random_state=0)
    assert res.info["mode"] == "streamed"


# -- CUDA ------------------------------------------------------------------------


@cuda
@pytest.mark.parametrize("selection", ["magnitude", "signed"])
def test_cuda_graph_update_equals_torch_update(selection):
    pytest.importorskip("triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    n_voxels, n_time, r = 50_000, 176, 3500
    St = torch.randn(n_voxels, n_time, generator=gen, device="cuda")
    St /= St.norm(dim=1, keepdim=True)
    runs = []
    for kwargs in ({}, {"use_triton": False}):
        updater = ResidentUpdater(St, n_atoms=6, r=r, selection=selection, **kwargs)
        assert updater.use_graphs == (not kwargs)
        runs.append(run_atoms(updater, 6, 4, n_time, device="cuda"))
    assert_same_atoms(*runs)


@cuda
def test_cuda_host_storage_equals_device_storage(planted):
    pytest.importorskip("triton")
    S = planted[0].astype(np.float32)
    dev = r1dl(S, 3, SIZE, random_state=2, device="cuda", storage="device")
    host = r1dl(S, 3, SIZE, random_state=2, device="cuda", storage="host")
    assert dev.info["mode"] == "resident" and host.info["mode"] == "host"
    np.testing.assert_array_equal(host.loadings.indices, dev.loadings.indices)
    assert_allclose(host.dictionary, dev.dictionary, atol=1e-6)
    # Deterministic: the same run twice gives the same bits.
    again = r1dl(S, 3, SIZE, random_state=2, device="cuda", storage="device")
    np.testing.assert_array_equal(again.dictionary, dev.dictionary)


@cuda
def test_cuda_pinned_rows_stream_in_chunks():
    """Sᵀ in pinned host memory, streamed in many small chunks = Sᵀ on the GPU."""
    pytest.importorskip("triton")
    gen = torch.Generator(device="cuda").manual_seed(3)
    n_voxels, n_time, r = 20_000, 45, 1400
    on_device = torch.empty(n_voxels, 48, device="cuda")[:, :n_time]
    on_device.copy_(
        torch.nn.functional.normalize(
            torch.randn(n_voxels, n_time, generator=gen, device="cuda"), dim=1
        )
    )
    on_host = torch.empty(n_voxels, 48, pin_memory=True)[:, :n_time]
    on_host.copy_(on_device)
    runs = []
    for St, kwargs in ((on_device, {}), (on_host, {"chunk_bytes": 100_000})):
        updater = ResidentUpdater(
            St, n_atoms=3, r=r, selection="magnitude", device=torch.device("cuda"), **kwargs
        )
        assert (updater.pinned is None) == (St is on_device)
        if updater.pinned is not None:
            assert len(updater.pinned.chunks) > 10
        runs.append(run_atoms(updater, 3, 3, n_time, device="cuda"))
    # Same kernels, but compiled for other alignments: equal to rounding.
    assert_same_atoms(*runs, atol=1e-6, rtol_stats=1e-5)


@cuda
def test_cuda_host_storage_larger_than_host_memory_is_refused(planted, monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(_r1dl, "available_host_memory", lambda: 1000)
    with pytest.raises(ValueError, match="storage='host' needs .* of host memory"):
        r1dl(planted[0], 1, SIZE, device="cuda", storage="host")


def test_verbose_shows_progress_of_loading_s(planted, tmp_path, capsys):
    S = planted[0]
    r1dl(S, 1, SIZE, device="cpu", verbose=1, block_size=300, random_state=0)
    assert "loading S" in capsys.readouterr().err
    path = tmp_path / "S.npy"
    np.save(path, S)
    r1dl(
        str(path), 1, SIZE, device="cpu", verbose=1, block_size=300, storage="file", random_state=0
    )
    assert "voxel statistics" in capsys.readouterr().err
