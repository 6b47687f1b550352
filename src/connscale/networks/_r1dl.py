"""Rank-1 dictionary learning of functional networks (r1DL / D-r1DL).

S (T x P; time points x voxels) is approximated as ``Σₖ uₖ vₖᵀ`` with
``‖uₖ‖ = 1`` and ``‖vₖ‖₀ <= r`` (Li, Makkie et al., KDD 2016, Eq. 1-3). For
each atom, from a seeded random unit u, alternate

* ``v = top_r(Sᵀu - Vᵀ(Uᵀu))`` (the l0-constrained least-squares v),
* ``u = (Sv - U(Vv)) / ‖Sv - U(Vv)‖``,

until ``‖u_new - u‖ < tol`` or ``max_iter``. Deflation ``S <- S - u vᵀ`` is
implicit (the ``U``, ``V`` terms, O(K·r) per step), so S is only read:
it can sit on the GPU, in a memory-mapped file streamed block by block, or
on the workers of a Dask or Spark cluster. Every backend runs the same
driver (:func:`_learn_atoms`) against a block operator
(:mod:`connscale.networks._operators`).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from connscale._choices import R1DL_BACKENDS, R1DL_SELECTIONS, R1DL_STORAGES
from connscale._compute.device import numpy_dtype, resolve_device, synchronize, use_triton
from connscale._compute.memory import (
    MemoryPlan,
    MemoryPlanner,
    available_host_memory,
    format_bytes,
    memory_budget,
)
from connscale._docs import fill_doc
from connscale._validation import (
    Interval,
    StrOptions,
    check_random_state,
    resolve_dtype,
    skip_nested_validation,
    user_stacklevel,
    validate_estimator_params,
    validate_parameter_values,
    validate_params,
)
from connscale.engines.base import Engine
from connscale.io.fingerprint import (
    array_fingerprint,
    file_fingerprint,
    run_fingerprint,
)
from connscale.networks import _blocks
from connscale.networks._checkpoint import AtomCheckpoint
from connscale.networks._operators import (
    EngineOperator,
    ResidentOperator,
    StreamedOperator,
)

_BACKENDS = R1DL_BACKENDS
_STORAGES = R1DL_STORAGES
# Most of the available host memory that storage='auto' pins for Sᵀ.
_HOST_FRACTION = 0.5
_SELECTIONS = R1DL_SELECTIONS
# Bytes per streamed or loaded block when block_size is not given.
_BLOCK_BYTES = 64 * 1024**2
# Streamed blocks ('file' storage) when block_size is not given: as large as
# a sixth of the memory budget allows (two device buffers, a work buffer,
# two pinned staging buffers), within these bounds. Per-block costs dominate
# small blocks: reading a memory-mapped .npy in 20k-voxel blocks ran at half
# the speed of 80k-voxel ones (H100 machine, 16 threads).
_STREAM_BLOCK_BYTES = (16 * 1024**2, 256 * 1024**2)


class ConvergenceWarning(UserWarning):
    """An atom reached ``max_iter`` before ``‖u_new - u‖ < tol``."""


@dataclass
class R1DLResult:
    """What :func:`r1dl` returns.

    Attributes
    ----------
    dictionary : ndarray of shape (n_timepoints, n_atoms)
        Unit-norm time courses uₖ (columns).
    loadings : scipy.sparse.csr_matrix of shape (n_atoms, n_voxels)
        Sparse spatial maps vₖ (rows), at most r non-zeros each.
    n_iter : ndarray of int, shape (n_atoms,)
        Alternating updates per atom.
    converged : ndarray of bool, shape (n_atoms,)
        Whether ``‖u_new - u‖ < tol`` was reached.
    sparsity : int
        r, the number of loadings kept per atom.
    info : dict
        Backend, device, mode ('resident', 'host', 'streamed', 'engine'),
        number of blocks, and seconds spent setting up (``setup_s``: loading
        S onto the device or the workers) and learning (``learn_s``, which
        includes ``graph_capture_s``, the one-off capture of the CUDA graphs
        of an update, local CUDA backend).
    """

    dictionary: np.ndarray
    loadings: sp.csr_matrix
    n_iter: np.ndarray
    converged: np.ndarray
    sparsity: int
    info: dict = field(default_factory=dict)

    @property
    def mean_iterations(self) -> float:
        """Mean number of updates per atom (the paper reports ~6)."""
        return float(np.mean(self.n_iter)) if self.n_iter.size else 0.0


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


# Declared once for r1dl and the R1DL estimator (validated at the entry).
_PARAMETER_CONSTRAINTS = {
    "n_components": [Interval(Integral, 1, None, closed="left")],
    "sparsity": [Interval(Integral, 1, None, closed="left"), Interval(Real, 0, 1, closed="right")],
    "tol": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "selection": [StrOptions(_SELECTIONS)],
    "standardize": ["boolean"],
    "n_init": [Interval(Integral, 1, None, closed="left")],
    "backend": [StrOptions(_BACKENDS), Engine],
    "device": ["device"],
    "dtype": ["dtype"],
    "random_state": ["random_state"],
    "block_size": [Interval(Integral, 1, None, closed="left"), None],
    "memory_limit": ["memory", None],
    "storage": [StrOptions(_STORAGES)],
    "checkpoint": ["path", None],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
}


def resolve_sparsity(sparsity: int | float, n_voxels: int) -> int:
    """Return the number of non-zero loadings per atom of :func:`r1dl`'s ``sparsity``.

    r as a count: an int in [1, P], or a fraction in (0, 1] of P (the
    declared constraint); a count above P is refused here, where P is known.
    """
    if isinstance(sparsity, (Integral, np.integer)):
        r = int(sparsity)
        if r > n_voxels:
            raise ValueError(
                f"'sparsity' as a count must lie in [1, n_voxels={n_voxels}]; got {r}."
            )
        return r
    return max(1, min(n_voxels, int(round(float(sparsity) * n_voxels))))


@dataclass(frozen=True)
class _AtomSettings:
    """What shapes the atoms, the same on every backend.

    ``n_atoms`` atoms of ``r`` loadings each, chosen by ``selection``; an atom
    stops at ``‖u_new - u‖ < tol`` or after ``max_iter`` updates, the best of
    ``n_init`` random starts kept; ``verbose`` shows a progress bar.
    """

    n_atoms: int
    r: int
    tol: float
    max_iter: int
    selection: str
    n_init: int = 1
    verbose: int = 0


@dataclass(frozen=True)
class _Reading:
    """How S is read into blocks.

    The compute ``dtype``, whether each voxel column is standardised on load,
    and the voxels per block (None: planned from the memory budget).
    """

    dtype: torch.dtype
    standardize: bool
    block_size: int | None = None


@dataclass(frozen=True)
class _Placement:
    """Where the atoms are learned.

    The ``backend`` (and the ``cluster`` of 'dask' or 'spark'); for the local
    backend, the ``device``, its ``memory_limit`` and where S is kept
    (``storage``).
    """

    backend: str | Engine
    cluster: object
    device: object
    memory_limit: object
    storage: str


def _check_options(backend, cluster, storage: str) -> None:
    """Refuse ``storage`` and ``cluster`` given to a backend that does not use them."""
    if not isinstance(backend, Engine):
        if backend != "local" and storage != "auto":
            raise ValueError(
                f"'storage' is only used by the 'local' backend; got storage={storage!r} "
                f"with backend={backend!r} (workers keep their own blocks)."
            )
        if backend == "local" and cluster is not None:
            raise ValueError(
                "'cluster' is only used by the 'dask' and 'spark' backends; got "
                f"cluster={cluster!r} with backend='local'."
            )


def _atom_settings(
    shape: tuple[int, int],
    n_atoms: int,
    sparsity,
    tol: float,
    max_iter: int,
    selection: str,
    n_init: int,
    verbose: int,
) -> _AtomSettings:
    """Return the atoms' settings for S of ``shape`` (T, P); refuse more atoms than T."""
    n_timepoints, n_voxels = shape
    if n_atoms > n_timepoints:
        raise ValueError(
            f"'n_components' must be at most the number of time points ({n_timepoints}): each "
            f"atom is a time course of that length; got {n_atoms}."
        )
    r = resolve_sparsity(sparsity, n_voxels)
    return _AtomSettings(n_atoms, r, float(tol), int(max_iter), selection, int(n_init), verbose)


# ---------------------------------------------------------------------------
# The driver, shared by every backend
# ---------------------------------------------------------------------------


def _learn_atoms(
    op,
    settings: _AtomSettings,
    *,
    rng: np.random.Generator,
    updater=None,
    checkpoint: AtomCheckpoint | None = None,
):
    """Learn ``settings.n_atoms`` rank-1 atoms against block operator ``op``.

    ``updater`` defaults to ``op.updater(...)``. With ``checkpoint``, the
    atoms it holds are committed again instead of learned (and ``rng`` set
    to its state after them), and every new atom is saved to it. Returns
    (U (T x K) tensor, list of index tensors, list of value tensors, n_iter,
    converged).
    """
    from tqdm.auto import tqdm

    n_atoms, r, tol, max_iter = settings.n_atoms, settings.r, settings.tol, settings.max_iter
    selection, n_init = settings.selection, settings.n_init
    n_timepoints = op.shape[0]
    if updater is None:
        updater = op.updater(n_atoms=n_atoms, r=r, selection=selection)
    indices, values = [], []
    n_iter = np.zeros(n_atoms, dtype=np.int64)
    converged = np.zeros(n_atoms, dtype=bool)

    restored = checkpoint.load(n_atoms, n_timepoints, r) if checkpoint is not None else []
    for k, atom in enumerate(restored):
        u = torch.as_tensor(atom["u"], dtype=op.dtype, device=op.device)
        idx = torch.as_tensor(atom["idx"], dtype=torch.int64, device=op.device)
        val = torch.as_tensor(atom["val"], dtype=op.dtype, device=op.device)
        updater.commit(u, idx, val)
        indices.append(idx)
        values.append(val)
        n_iter[k], converged[k] = atom["n_iter"], atom["converged"]
    if restored:
        rng.bit_generator.state = restored[-1]["rng_state"]

    for k in tqdm(
        range(len(restored), n_atoms),
        desc="r1DL atoms",
        unit="atom",
        initial=len(restored),
        total=n_atoms,
        disable=not settings.verbose,
    ):
        best = None
        for _ in range(n_init):
            u0 = rng.standard_normal(n_timepoints)
            updater.start(
                torch.as_tensor(u0 / np.linalg.norm(u0), dtype=op.dtype, device=op.device)
            )
            done, zero = False, False
            for it in range(1, max_iter + 1):  # noqa: B007 - kept with the best start
                norm, delta, score = updater.step()
                if norm == 0 or not math.isfinite(norm):
                    # Residual is zero on the chosen voxels: nothing left to explain.
                    updater.revert()
                    done, zero, score = True, True, 0.0
                    break
                if delta < tol:
                    done = True
                    break
            u, idx, val = updater.current()
            if zero:
                val = torch.zeros_like(val)
            # Keep the start whose atom explains most: ‖S - u vᵀ‖² = ‖S‖² - ‖v‖².
            if best is None or score > best[0]:
                best = (score, u, idx, val, it, done)
        _, u, idx, val, n_iter[k], converged[k] = best  # idx ascending
        # Fix the sign: the largest-magnitude loading is positive.
        if val.numel() and float(val[torch.argmax(val.abs())]) < 0:
            u, val = -u, -val
        updater.commit(u, idx, val)
        indices.append(idx)
        values.append(val)
        if checkpoint is not None:
            checkpoint.save(
                k,
                u=u.cpu().numpy(),
                idx=idx.cpu().numpy(),
                val=val.cpu().numpy(),
                n_iter=n_iter[k],
                converged=converged[k],
                rng_state=rng.bit_generator.state,
            )
    return updater.U, indices, values, n_iter, converged


def _to_csr(indices, values, n_atoms: int, n_voxels: int, dtype) -> sp.csr_matrix:
    idx = [i.detach().cpu().numpy().astype(np.int64) for i in indices]
    val = [v.detach().cpu().numpy().astype(dtype) for v in values]
    indptr = np.r_[0, np.cumsum([len(i) for i in idx])].astype(np.int64)
    data = np.concatenate(val) if val else np.empty(0, dtype)
    cols = np.concatenate(idx) if idx else np.empty(0, np.int64)
    matrix = sp.csr_matrix((data, cols, indptr), shape=(n_atoms, n_voxels))
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


# ---------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------


def _default_block_size(n_timepoints: int, n_voxels: int, itemsize: int) -> int:
    return max(1, min(n_voxels, _BLOCK_BYTES // max(1, n_timepoints * itemsize)))


def _local_operator(
    source,
    *,
    device,
    dtype,
    standardize,
    block_size,
    memory_limit,
    storage="auto",
    state_bytes=0,
    verbose=0,
):
    """Return the operator of :func:`_plan_local_operator`'s plan."""
    plan = _plan_local_operator(
        source,
        device=device,
        dtype=dtype,
        block_size=block_size,
        memory_limit=memory_limit,
        storage=storage,
        state_bytes=state_bytes,
    )
    common = {
        "device": device,
        "dtype": dtype,
        "standardize": standardize,
        "verbose": verbose,
        "block_size": plan.block_rows,
    }
    if plan.storage == "device" or (plan.storage == "host" and device.type == "cpu"):
        return ResidentOperator(source, **common)
    if plan.storage == "host":
        return ResidentOperator(source, pinned_host=True, **common)
    return StreamedOperator(source, **common)


def _plan_local_operator(
    source, *, device, dtype, block_size, memory_limit, storage="auto", state_bytes=0
) -> MemoryPlan:
    """Plan where S is kept between passes, and its block size.

    'device': Sᵀ in device memory (with the update's state); 'host': Sᵀ in
    pinned host memory streamed to the GPU every pass (CUDA with Triton,
    float32; on the CPU it is the same as 'device'); 'file': column blocks
    re-read from the source every pass, in memory bounded by the block size.
    'auto' takes the first that fits. The plan's ``storage`` and
    ``block_rows`` (voxels per block).
    """
    n_timepoints, n_voxels = source.shape
    itemsize = torch.tensor([], dtype=dtype).element_size()
    given_block_size = block_size
    if block_size is None:
        block_size = _default_block_size(n_timepoints, n_voxels, max(itemsize, 8))
    s_bytes = n_timepoints * n_voxels * itemsize
    # Sᵀ (plus a gathered (r x T) copy at most as big on the torch path), the
    # float64 standardisation temporaries of one block, P-vectors and the
    # update's state (the atoms' loadings, twice).
    work_bytes = 3 * 8 * n_timepoints * block_size + 8 * 8 * n_voxels + state_bytes
    hint = "Raise memory_limit, or give a smaller block_size (or fewer atoms)."
    if source.kind == "array" and device.type == "cpu" and memory_limit is None:
        # S is already in host memory; a resident copy must fit beside it.
        planner = MemoryPlanner(
            device, memory_limit, hint=hint, device_budget=memory_budget(device, None)
        )
    else:
        planner = MemoryPlanner(device, memory_limit, hint=hint)
    budget = planner.device_budget
    fits_device = 2 * s_bytes + work_bytes <= budget
    host_capable = use_triton(
        torch.empty(0, dtype=dtype, device=device), float32=True, interpreted=False
    )
    fits_host = (
        host_capable
        and work_bytes <= budget
        and s_bytes <= _HOST_FRACTION * available_host_memory()
    )
    if storage == "auto":
        storage = "device" if fits_device else "host" if fits_host else "file"
    elif storage == "device" and not fits_device:
        raise ValueError(
            f"storage='device' needs about {format_bytes(2 * s_bytes + work_bytes)} on "
            f"{device}, but the budget is {format_bytes(budget)}; use storage='host' or "
            "'file' (or 'auto'), or raise memory_limit."
        )
    elif storage == "host" and device.type == "cuda":
        if not host_capable:
            raise ValueError(
                "storage='host' needs triton and dtype='float32' on CUDA; use storage='file'."
            )
        if s_bytes > available_host_memory():
            raise ValueError(
                f"storage='host' needs {format_bytes(s_bytes)} of host memory for Sᵀ, but "
                f"{format_bytes(available_host_memory())} is available; use storage='file'."
            )
    resident = storage == "device" or (storage == "host" and device.type == "cpu")
    if resident or storage == "host":
        if resident:
            planner.reserve_device(2 * s_bytes + work_bytes)
        else:
            planner.reserve_host(s_bytes)  # pinned
            planner.reserve_device(work_bytes)
        return planner.plan(
            block_rows=block_size, n_rounds=-(-n_voxels // block_size), storage=storage
        )
    if given_block_size is None:
        low, high = _STREAM_BLOCK_BYTES
        block_bytes = min(high, max(low, budget // 6))
        block_size = max(1, min(n_voxels, block_bytes // (n_timepoints * max(itemsize, 4))))
    # The budget covers the P-vectors, the update's state and, per voxel of a
    # block, the float64 temporaries of the voxel statistics (3 values per
    # time point) or the work and staging buffers (at most 2 float64 + 1).
    per_voxel = n_timepoints * max(3 * 8, 2 * 8 + itemsize)
    planner.reserve_device(8 * 8 * n_voxels + state_bytes)
    fits = planner.device_left // per_voxel
    if given_block_size is None:
        block_size = min(block_size, fits)
    if block_size < 1 or (memory_limit is not None and block_size > fits):
        raise planner.error(
            f"Streaming S ({n_timepoints} x {n_voxels}) in blocks of {max(block_size, 1)} voxels",
            planner.device_bytes + per_voxel * max(block_size, 1),
        )
    planner.reserve_device(per_voxel * block_size)
    return planner.plan(block_rows=block_size, n_rounds=-(-n_voxels // block_size), storage="file")


def _atom_checkpoint(
    folder, source, rng, random_state, settings: _AtomSettings, reading: _Reading
) -> AtomCheckpoint:
    """Return the checkpoint of this run.

    It is keyed on S's fingerprint (its file's, or its values') and the
    parameters that shape the atoms.
    """
    parameters = dict(
        n_atoms=settings.n_atoms,
        r=settings.r,
        tol=settings.tol,
        max_iter=settings.max_iter,
        selection=settings.selection,
        standardize=bool(reading.standardize),
        n_init=settings.n_init,
        dtype=str(reading.dtype),
    )
    if source.path is not None:
        data = {**file_fingerprint(source.path), "dataset": source.dataset}
    else:
        data = {"array": array_fingerprint(np.asarray(source.data))}
    if not (random_state is None or isinstance(random_state, Integral)):
        random_state = {"generator_state": rng.bit_generator.state}  # its state at the start
    return AtomCheckpoint(
        folder, run_fingerprint([data], {**parameters, "random_state": random_state})
    )


def _make_engine(backend, cluster):
    from connscale.engines import get_engine

    if hasattr(cluster, "scheduler_address"):  # a dask LocalCluster / SpecCluster
        cluster = cluster.scheduler_address
    return get_engine(backend, cluster=cluster)


def _engine_result(engine, source, reading: _Reading, settings: _AtomSettings, *, rng, checkpoint):
    """Learn the atoms on ``engine``'s workers, each keeping its voxel blocks of S."""
    n_timepoints, n_voxels = source.shape
    block_size = reading.block_size
    if block_size is None:
        block_size = _default_block_size(n_timepoints, n_voxels, 8)
        # At least a few blocks so every worker has some.
        block_size = min(block_size, max(1, math.ceil(n_voxels / 4)))
    bounds = _blocks.block_bounds(n_voxels, block_size)
    loader = source.loader(
        bounds, standardize=reading.standardize, dtype=str(numpy_dtype(reading.dtype))
    )
    return _run_engine(
        engine,
        loader,
        (n_timepoints, n_voxels),
        len(bounds) - 1,
        dtype=reading.dtype,
        settings=settings,
        rng=rng,
        checkpoint=checkpoint,
    )


def _run_engine(
    engine,
    loader,
    shape,
    n_blocks,
    *,
    dtype,
    settings: _AtomSettings,
    rng,
    checkpoint=None,
):
    """Learn the atoms through an :class:`EngineOperator` over ``loader``'s blocks."""
    start = time.perf_counter()
    op = EngineOperator(engine, loader, shape, n_blocks, dtype=dtype)
    setup = time.perf_counter()
    try:
        out = _learn_atoms(op, settings, rng=rng, checkpoint=checkpoint)
    finally:
        op.close()
    end = time.perf_counter()
    return out, {
        "mode": op.mode,
        "n_blocks": n_blocks,
        "engine": getattr(engine, "name", ""),
        "setup_s": setup - start,
        "learn_s": end - setup,
    }


def _learn_local(source, reading: _Reading, settings: _AtomSettings, placement, *, rng, checkpoint):
    """Learn the atoms with torch on ``placement.device`` (S where the plan keeps it)."""
    dev = resolve_device(placement.device)
    start = time.perf_counter()
    # The update's state: the atoms' loadings atom-major and voxel-major.
    state_bytes = settings.n_atoms * settings.r * 40
    op = _local_operator(
        source,
        device=dev,
        dtype=reading.dtype,
        standardize=reading.standardize,
        block_size=reading.block_size,
        memory_limit=placement.memory_limit,
        storage=placement.storage,
        state_bytes=state_bytes,
        verbose=settings.verbose,
    )
    synchronize(dev)
    setup = time.perf_counter()
    updater = op.updater(n_atoms=settings.n_atoms, r=settings.r, selection=settings.selection)
    try:
        out = _learn_atoms(op, settings, rng=rng, updater=updater, checkpoint=checkpoint)
    finally:
        op.close()
    synchronize(dev)
    return out, {
        "backend": "local",
        "device": str(dev),
        "mode": op.mode,
        "n_blocks": op.n_blocks,
        "setup_s": setup - start,
        "learn_s": time.perf_counter() - setup,
        "graph_capture_s": getattr(updater, "capture_s", 0.0),
    }


def _learn(
    placement: _Placement, source, reading: _Reading, settings: _AtomSettings, *, rng, checkpoint
):
    """Learn the atoms on ``placement``'s backend; return the driver's output and the run's info."""
    backend = placement.backend
    if backend == "local":
        return _learn_local(source, reading, settings, placement, rng=rng, checkpoint=checkpoint)
    if isinstance(backend, Engine):
        out, info = _engine_result(
            backend, source, reading, settings, rng=rng, checkpoint=checkpoint
        )
        info["backend"] = backend.name
        return out, info
    with _make_engine(backend, placement.cluster) as engine:
        out, info = _engine_result(
            engine, source, reading, settings, rng=rng, checkpoint=checkpoint
        )
    info["backend"] = backend
    return out, info


def _result(out, info: dict, settings: _AtomSettings, n_voxels: int, dtype) -> R1DLResult:
    """Return the result of the driver's output; warn of unconverged or empty atoms."""
    U, indices, values, n_iter, converged = out
    n_atoms = settings.n_atoms
    if not converged.all():
        warnings.warn(
            f"{int((~converged).sum())} of {n_atoms} atoms reached max_iter={settings.max_iter} "
            f"before ‖u_new - u‖ < tol={settings.tol}.",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    n_empty = sum(int(torch.count_nonzero(v)) == 0 for v in values)
    if n_empty:
        warnings.warn(
            f"{n_empty} of {n_atoms} atoms are empty (all loadings 0): nothing was left to "
            "explain. S is all zeros (or, with standardize=True, only constant columns), "
            "or the earlier atoms explain it fully; ask for fewer atoms.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    np_dtype = numpy_dtype(dtype)
    return R1DLResult(
        dictionary=U.detach().cpu().numpy().astype(np_dtype, copy=False),
        loadings=_to_csr(indices, values, n_atoms, n_voxels, np_dtype),
        n_iter=n_iter,
        converged=converged,
        sparsity=settings.r,
        info=info,
    )


# ---------------------------------------------------------------------------
# Public function
# ---------------------------------------------------------------------------


@fill_doc
@validate_params(_PARAMETER_CONSTRAINTS)
def r1dl(  # noqa: PLR0913 - public keywords: the R1DL estimator's and the checkpoint
    S,
    n_components: int = 20,
    sparsity=0.07,
    *,
    tol: float = 0.01,
    max_iter: int = 100,
    selection: str = "magnitude",
    standardize: bool = True,
    n_init: int = 1,
    backend="local",
    cluster=None,
    device="auto",
    dtype="float32",
    random_state=None,
    block_size: int | None = None,
    memory_limit=None,
    storage: str = "auto",
    checkpoint=None,
    verbose: int = 0,
) -> R1DLResult:
    """Learn sparse functional networks by rank-1 dictionary learning.

    Parameters
    ----------
    S : array-like of shape (n_timepoints, n_voxels), or path
        The data matrix (masked fMRI: one column per voxel), or a path to a
        ``.npy`` file (memory-mapped, never loaded whole) or an HDF5 file
        (``'file.h5'`` or ``'file.h5:dataset'``). Never modified.
    n_components : int, default=20
        Number of networks K (atoms of the dictionary).
    sparsity : int or float, default=0.07
        r, non-zero loadings per network: a count, or a fraction of the
        voxels in (0, 1] (the paper uses 0.07).
    tol : float, default=0.01
        Convergence threshold on ``‖u_new - u‖``.
    max_iter : int, default=100
        Most alternating updates per atom.
    selection : {'magnitude', 'signed'}, default='magnitude'
        Keep the r entries of ``Sᵀu`` largest in magnitude (the l0
        least-squares solution) or the r largest values, negatives set to 0
        (what the authors' code does).
    standardize : bool, default=True
        Make every voxel column zero-mean and unit-norm first (done per block
        on load; S itself is untouched). Constant columns become 0.
    n_init : int, default=1
        Random starts per atom; the atom explaining most (largest ‖v‖, i.e.
        smallest ‖S - u vᵀ‖) is kept. 1 is the paper's algorithm; more make
        the networks less dependent on the seed, at n_init times the cost.
    backend : {'local', 'dask', 'spark'} or Engine, default='local'
        ``'local'``: torch on ``device``, S resident on the device when it
        fits, otherwise streamed in column blocks. ``'dask'``/``'spark'``:
        workers load and keep voxel blocks; an :class:`connscale.engines.Engine`
        instance is used as given (and not closed).
    cluster : str, object or None, default=None
        Dask scheduler address / Client / LocalCluster, or Spark master URL;
        None starts a local one.
    %(device)s
        Used by the local backend.
    %(dtype)s
    %(random_state)s
    block_size : int or None, default=None
        Voxels per column block (streaming and cluster blocks). None picks
        ~64 MB blocks, and for ``storage='file'`` a sixth of the memory
        budget (16-256 MB): larger blocks stream faster.
    %(memory_limit)s
    storage : {'auto', 'device', 'host', 'file'}, default='auto'
        Where the local backend keeps S between passes. ``'device'``: Sᵀ in
        device memory (GPU memory on CUDA). ``'host'``: on CUDA, Sᵀ in pinned
        host memory, streamed to the GPU by its copy engine for ``Sᵀu`` and
        read directly for the r chosen rows (S larger than the GPU but within
        host memory; needs triton and float32); on the CPU the same as
        ``'device'``. ``'file'``: S re-read from its source (an array, or a
        memory-mapped ``.npy`` / HDF5 file) every update, in full column
        blocks for ``Sᵀu`` and only the chosen columns for ``Sv``, in memory
        bounded by ``block_size``. ``'auto'`` takes the first that
        fits ``memory_limit`` (device) and half the available host memory.
    checkpoint : path or None, default=None
        A folder where every learned atom is saved (u, its loadings, its
        update count and the random generator's state, keyed on a
        fingerprint of S and the parameters that shape the atoms). When it
        holds atoms of the same run (same data, ``n_components``, ``sparsity``,
        ``tol``, ``max_iter``, ``selection``, ``standardize``, ``n_init``,
        ``dtype`` and ``random_state``), they are reused and learning goes
        on from the next atom: a killed run resumes where it stopped, and
        gives the dictionary of an uninterrupted run (bitwise on the same
        backend, device and thread count). Atoms of another run are
        replaced. The folder is kept after the run.
    %(verbose)s

    Returns
    -------
    R1DLResult
        ``dictionary`` (T x K), ``loadings`` (K x P CSR), ``n_iter`` (K,);
        ``info["resumed_atoms"]`` counts the atoms taken from ``checkpoint``.

    Notes
    -----
    Each update reads S twice (``Sᵀu`` and ``Sv``); the 'device' and 'host'
    storages keep Sᵀ, so the second read touches only the r chosen voxels.
    On CUDA with triton an update is one CUDA graph (a fused GEMV, an exact
    radix top-r, a gather of the r chosen rows) and one 12-byte read for
    the convergence test. Every backend runs the same driver; they differ
    only in summation order.

    References
    ----------
    Li, Makkie, et al. "Scalable Fast Rank-1 Dictionary Learning for fMRI Big
    Data Analysis", KDD 2016.

    Examples
    --------
    >>> from connscale.datasets import simulate_networks
    >>> S, _, _ = simulate_networks(60, 500, 3, sparsity=0.05, noise=0.1, random_state=0)
    >>> res = r1dl(S, 3, 25, random_state=0, device="cpu")
    >>> res.dictionary.shape, res.loadings.shape
    ((60, 3), (3, 500))
    """
    _check_options(backend, cluster, storage)
    n_atoms = int(n_components)
    block_size = None if block_size is None else int(block_size)
    reading = _Reading(resolve_dtype(dtype), standardize, block_size)
    source = _blocks.open_source(S, name="S")
    settings = _atom_settings(
        source.shape, n_atoms, sparsity, tol, max_iter, selection, n_init, verbose
    )
    rng = check_random_state(random_state)
    if checkpoint is not None:
        checkpoint = _atom_checkpoint(checkpoint, source, rng, random_state, settings, reading)
    placement = _Placement(backend, cluster, device, memory_limit, storage)
    out, info = _learn(placement, source, reading, settings, rng=rng, checkpoint=checkpoint)
    info["resumed_atoms"] = checkpoint.resumed_atoms if checkpoint is not None else 0
    return _result(out, info, settings, source.shape[1], reading.dtype)


# ---------------------------------------------------------------------------
# Estimator
# ---------------------------------------------------------------------------


def _is_image(X) -> bool:
    if isinstance(X, (str, os.PathLike)):
        return str(X).lower().endswith((".nii", ".nii.gz"))
    return hasattr(X, "get_fdata") and hasattr(X, "affine")


@fill_doc
class R1DL(TransformerMixin, BaseEstimator):
    """Rank-1 dictionary learning as a scikit-learn estimator.

    ``fit`` learns ``n_components`` sparse spatial maps (``components_``) and
    their unit-norm time courses (``dictionary_``) from S (T x P), a ``.npy``
    / HDF5 path, or a 4-D NIfTI image masked by ``mask_img`` (nilearn
    ``NiftiMasker``). ``transform`` returns the least-squares time courses of
    new data on the learned maps, as nilearn's ``DictLearning`` does, and
    ``inverse_transform`` the data those time courses give on the maps.

    Parameters
    ----------
    n_components : int, default=20
        Number of networks K.
    sparsity : int or float, default=0.07
        Non-zero loadings per network: a count or a fraction of the voxels.
    mask_img : Niimg-like, path or None, default=None
        Brain mask for NIfTI input; None computes one (``NiftiMasker``'s
        default strategy).
    tol, max_iter, selection, standardize, n_init, backend, cluster, block_size, storage
        As in :func:`r1dl`.
    %(device)s
    %(dtype)s
    %(random_state)s
    %(memory_limit)s
    %(verbose)s

    Attributes
    ----------
    components_ : scipy.sparse.csr_matrix of shape (n_components, n_voxels)
        Sparse spatial maps (rows).
    dictionary_ : ndarray of shape (n_timepoints, n_components)
        Unit-norm time courses learned on the training data.
    n_iter_ : ndarray of shape (n_components,)
        Updates per atom.
    sparsity_ : int
        r as a count.
    masker_ : nilearn.maskers.NiftiMasker
        Only for NIfTI input.
    components_img_ : Nifti1Image
        4-D image of the maps (only for NIfTI input).
    n_features_in_ : int
        Number of voxels P.
    result_ : R1DLResult
        What :func:`r1dl` returned (convergence, timings, backend).

    Notes
    -----
    Every ``fit`` starts from an unfitted estimator: attributes of an
    earlier fit (``masker_`` and ``components_img_`` of an image) do not
    survive a fit on an array.
    """

    _parameter_constraints = {k: v for k, v in _PARAMETER_CONSTRAINTS.items() if k != "checkpoint"}

    def __init__(  # noqa: PLR0913 - a scikit-learn estimator's parameters
        self,
        n_components: int = 20,
        sparsity=0.07,
        *,
        mask_img=None,
        tol: float = 0.01,
        max_iter: int = 100,
        selection: str = "magnitude",
        standardize: bool = True,
        n_init: int = 1,
        backend="local",
        cluster=None,
        device="auto",
        dtype="float32",
        random_state=None,
        block_size=None,
        memory_limit=None,
        storage: str = "auto",
        verbose: int = 0,
    ) -> None:
        self.n_components = n_components
        self.sparsity = sparsity
        self.mask_img = mask_img
        self.tol = tol
        self.max_iter = max_iter
        self.selection = selection
        self.standardize = standardize
        self.n_init = n_init
        self.backend = backend
        self.cluster = cluster
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.block_size = block_size
        self.memory_limit = memory_limit
        self.storage = storage
        self.verbose = verbose

    def fit(self, X, y=None, *, checkpoint=None):
        """Learn the networks from X.

        Parameters
        ----------
        X : array-like of shape (n_timepoints, n_voxels), path or Niimg-like
            The data, a ``.npy`` / HDF5 path (see :func:`r1dl`), or a 4-D
            NIfTI image (or its path) masked by ``mask_img``.
        y : None
            Ignored.
        checkpoint : path or None, default=None
            A folder where each learned atom is saved, and from which an
            interrupted fit resumes (see :func:`r1dl`).

        Returns
        -------
        self
        """
        del y
        validate_estimator_params(self)
        validate_parameter_values(
            {"checkpoint": _PARAMETER_CONSTRAINTS["checkpoint"]},
            {"checkpoint": checkpoint},
            "R1DL.fit",
        )
        for name in _FITTED_ATTRIBUTES:
            self.__dict__.pop(name, None)
        masker = None
        S = X
        if _is_image(X):
            masker = self._fit_masker(X)
            S = _apply_masker(masker, X)
        with skip_nested_validation():
            result = r1dl(
                S,
                self.n_components,
                self.sparsity,
                tol=self.tol,
                max_iter=self.max_iter,
                selection=self.selection,
                standardize=self.standardize,
                n_init=self.n_init,
                backend=self.backend,
                cluster=self.cluster,
                device=self.device,
                dtype=self.dtype,
                random_state=self.random_state,
                block_size=self.block_size,
                memory_limit=self.memory_limit,
                storage=self.storage,
                checkpoint=checkpoint,
                verbose=self.verbose,
            )
        self.components_ = result.loadings
        self.dictionary_ = result.dictionary
        self.n_iter_ = result.n_iter
        self.sparsity_ = result.sparsity
        self.result_ = result
        self.n_features_in_ = result.loadings.shape[1]
        if masker is not None:
            self.masker_ = masker
            self.components_img_ = masker.inverse_transform(self.components_.toarray())
        return self

    def _fit_masker(self, X):
        from nilearn.maskers import NiftiMasker

        masker = NiftiMasker(mask_img=self.mask_img)
        with warnings.catch_warnings():
            # nilearn >= 0.14 warns about its own boolean 'standardize' default.
            warnings.simplefilter("ignore", FutureWarning)
            return masker.fit() if self.mask_img is not None else masker.fit(X)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "components_")

    def transform(self, X):
        """Least-squares time courses of X on the learned maps.

        Parameters
        ----------
        X : array-like of shape (n_timepoints, n_voxels), path or Niimg-like
            As for :meth:`fit`; an image only when the fit was on one.

        Returns
        -------
        ndarray of shape (n_timepoints, n_components)
            ``argmin_C ‖X - C V‖`` for the maps V (``components_``), X
            standardized first when ``standardize``.
        """
        check_is_fitted(self)
        if _is_image(X):
            if not hasattr(self, "masker_"):
                raise ValueError(
                    "This R1DL was fitted on an array, not a NIfTI image; "
                    "transform arrays of shape (n_timepoints, n_voxels)."
                )
            X = _apply_masker(self.masker_, X)
        S = np.asarray(_blocks.open_source(X, name="X").data[()], dtype=np.float64)
        if S.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {S.shape[1]} voxels; this R1DL was fitted on {self.n_features_in_}."
            )
        if self.standardize:
            S = _blocks.standardize_np(S, np.float64)
        V = self.components_.astype(np.float64)
        gram = (V @ V.T).toarray()
        proj = np.asarray(V @ S.T).T  # (T', K) = S Vᵀ
        coef, *_ = np.linalg.lstsq(gram, proj.T, rcond=None)
        return coef.T

    def inverse_transform(self, X):
        """Return the data that time courses X give on the learned maps.

        Parameters
        ----------
        X : array-like of shape (n_timepoints, n_components)
            Time courses, e.g. from :meth:`transform`.

        Returns
        -------
        ndarray of shape (n_timepoints, n_voxels)
            ``X V`` for the maps V (``components_``): standardized data when
            ``standardize``. ``masker_.inverse_transform`` makes it an image.
        """
        check_is_fitted(self)
        C = np.asarray(X, dtype=np.float64)
        n_components = self.components_.shape[0]
        if C.ndim != 2 or C.shape[1] != n_components:
            raise ValueError(
                f"X must be time courses of shape (n_timepoints, {n_components}); "
                f"got shape {C.shape}."
            )
        return np.asarray(self.components_.T.astype(np.float64) @ C.T).T


# Everything fit sets: a refit removes them all first.
_FITTED_ATTRIBUTES = (
    "components_",
    "dictionary_",
    "n_iter_",
    "sparsity_",
    "result_",
    "n_features_in_",
    "masker_",
    "components_img_",
)


def _apply_masker(masker, X) -> np.ndarray:
    with warnings.catch_warnings():
        # nilearn >= 0.14 warns about its own boolean 'standardize' default.
        warnings.simplefilter("ignore", FutureWarning)
        return masker.transform(X)
