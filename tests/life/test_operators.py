"""y = Mx and x = Mᵀy against a dense M built entry by entry from Φ."""

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from connscale.life.encode import build_model
from connscale.life.operators import LiFEOperator

from .conftest import random_problem

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
RTOL = {"float32": 2e-5, "float64": 1e-12}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("chunk_size", [5, 1 << 20])
@pytest.mark.parametrize("pair_method", ["sddmm", "gather"])
@pytest.mark.parametrize(("spmm_method", "entry_method"), [("auto", "scatter"), ("torch", "spmv")])
def test_products_match_dense(
    device, dtype, seed, chunk_size, pair_method, spmm_method, entry_method
):
    data, bvals, bvecs, sl = random_problem(seed)
    with pytest.warns(UserWarning, match="streamlines dropped"):
        model = build_model(
            data, bvals, bvecs, sl, affine=np.eye(4), sphere=40, device=device, dtype=dtype
        )
    M = model.to_dense()
    assert M.shape == (model.n_voxels * model.n_directions, model.n_fibres)
    op = LiFEOperator(
        model,
        chunk_size=chunk_size,
        pair_method=pair_method,
        spmm_method=spmm_method,
        entry_method=entry_method,
    )
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, model.n_fibres)
    y = rng.normal(size=M.shape[0])
    Mx = op.matvec(torch.as_tensor(x, device=device)).double().cpu().numpy().ravel()
    scale = np.abs(M).max() * model.n_fibres
    assert_allclose(Mx, M @ x, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)
    Mty = op.rmatvec(torch.as_tensor(y.reshape(model.n_voxels, -1), device=device))
    assert Mty.dtype == torch.float64
    # The requested kernels ran (no silent fallback here).
    assert op.pair_method == pair_method and op.entry_method == entry_method
    assert_allclose(
        Mty.cpu().numpy(),
        M.T @ y,
        rtol=RTOL[dtype],
        atol=RTOL[dtype] * np.abs(M).max() * M.shape[0],
    )


@pytest.mark.parametrize("device", DEVICES)
def test_column_scale_and_norms(device):
    data, bvals, bvecs, sl = random_problem(3)
    with pytest.warns(UserWarning):
        model = build_model(
            data, bvals, bvecs, sl, affine=np.eye(4), sphere=40, device=device, dtype="float64"
        )
    M = model.to_dense()
    op = LiFEOperator(model)
    h = op.column_norms_sq()
    # h_f = Σ val²‖D_a‖²: the squared column norm when a fibre has one atom per voxel.
    D = model.dictionary.cpu().numpy()
    ref = np.zeros(model.n_fibres)
    for f, a, v in zip(
        model.entry_fibre.cpu().numpy(),
        model.entry_atom().cpu().numpy(),
        model.entry_value.cpu().numpy(),
    ):
        ref[f] += v * v * (D[:, a] @ D[:, a])
    assert_allclose(h.cpu().numpy(), ref, rtol=1e-12)
    scaled = LiFEOperator(model, column_scale=h)
    x = torch.rand(model.n_fibres, dtype=torch.float64, device=device)
    assert_allclose(
        scaled.matvec(x).cpu().numpy().ravel(), (M / ref) @ x.cpu().numpy(), rtol=1e-10, atol=1e-8
    )


def test_phi_is_sorted_by_voxel_and_csr_consistent():
    data, bvals, bvecs, sl = random_problem(4, n_streamlines=60)
    with pytest.warns(UserWarning):
        model = build_model(data, bvals, bvecs, sl, affine=np.eye(4), sphere=40, device="cpu")
    v = model.entry_voxel().numpy()
    assert np.all(np.diff(v) >= 0)
    assert np.all(np.diff(model.entry_av.numpy()) >= 0)
    crow = model.crow.numpy()
    assert crow[0] == 0 and crow[-1] == model.av_atom.numel()
    assert np.array_equal(
        np.repeat(np.arange(model.n_voxels), np.diff(crow)), model.av_voxel.numpy()
    )


def test_bad_operator_options():
    data, bvals, bvecs, sl = random_problem(5)
    with pytest.warns(UserWarning):
        model = build_model(data, bvals, bvecs, sl, affine=np.eye(4), sphere=40, device="cpu")
    with pytest.raises(ValueError, match="'pair_method' must be"):
        LiFEOperator(model, pair_method="dense")
    with pytest.raises(ValueError, match="'spmm_method' must be"):
        LiFEOperator(model, spmm_method="mkl")
    with pytest.raises(ValueError, match="'entry_method' must be"):
        LiFEOperator(model, entry_method="atomic")
