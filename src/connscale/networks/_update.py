"""One r1DL update, ``u -> v -> u_new``, against the learned atoms so far.

The driver (:func:`connscale.networks._r1dl._learn_atoms`) owns the loop
over atoms, starts and iterations; an *updater* owns the state of the
implicit deflation (U, the atoms' loadings) and computes one update:

* ``v = top_r(Sᵀu - Vᵀ(Uᵀu))``,
* ``u_new = (Sv - U(Vv)) / ‖Sv - U(Vv)‖``,

returning ``(‖Sv - U(Vv)‖, ‖u_new - u‖, ‖v‖)`` to the host (one small copy,
the only synchronisation of an update).

:class:`BlockUpdater` works with any block operator (streamed, engines):
two calls per update. :class:`ResidentUpdater` is the resident path: Sᵀ on
the device, the deflation held voxel-major (a CSR of the previous atoms'
loadings per voxel) so ``Sᵀu - Vᵀ(Uᵀu)`` is one fused, deterministic pass,
an exact radix top-r with no host synchronisation, and on CUDA the whole
update captured as a CUDA graph (two per run: for the first atom and for
the others): an update is then one graph launch and one 12-byte read. With
Sᵀ in pinned host memory the same kernels run eagerly, Sᵀ streamed to
them through the copy engine.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch

from connscale._compute.transfer import HostToDevice
from connscale.networks import _triton_r1dl
from connscale.networks._select import top_r_sorted


class BlockOperator(Protocol):
    """What :class:`BlockUpdater` needs of a block operator.

    S's shape, where the update's tensors live, and the two passes over S;
    the streamed and engine operators of :mod:`connscale.networks._operators`
    provide them (a structural type: this module does not import them).
    """

    shape: tuple[int, int]
    device: torch.device
    dtype: torch.dtype

    def top_r(
        self,
        u: torch.Tensor,
        deflation: tuple[torch.Tensor, torch.Tensor] | None,
        r: int,
        selection: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the exact top-r of ``Sᵀu - Vᵀ(Uᵀu)`` (sorted indices, values)."""

    def matvec(self, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Return ``Sv`` for the sparse v of loadings ``values`` at ``idx``."""


class _Updater:
    """What every updater holds.

    U and the atoms' loadings (atom-major,
    (K, r)), the current u and its predecessor, the last selection and its
    statistics, all in preallocated tensors (a CUDA graph reads and writes
    them in place).
    """

    def __init__(
        self,
        n_timepoints: int,
        n_voxels: int,
        *,
        n_atoms: int,
        r: int,
        selection: str,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.r, self.selection, self.n_atoms = r, selection, n_atoms
        self.device = device
        zeros = {"dtype": dtype, "device": device}
        self.U = torch.zeros((n_timepoints, n_atoms), **zeros)
        self.atom_idx = torch.zeros((n_atoms, r), dtype=torch.int64, device=device)
        self.atom_val = torch.zeros((n_atoms, r), **zeros)
        self.v_dense = torch.zeros(n_voxels, **zeros)
        self.u = torch.zeros(n_timepoints, **zeros)
        self.u_prev = torch.zeros(n_timepoints, **zeros)
        self.idx = torch.zeros(r, dtype=torch.int64, device=device)
        self.val = torch.zeros(r, **zeros)
        self.stats = torch.zeros(3, **zeros)
        self.k = 0

    def _close(self, su: torch.Tensor, k: int) -> None:
        """Finish an update from ``Sv`` of the selection in idx/val.

        Compute ``su - U(Vv)``, its norm, ``u <- su / ‖su‖`` (the old u kept
        for :meth:`revert`) and the stats.
        """
        if k:
            # V v, atom by atom: every atom holds r entries, so a reshape and
            # sum replaces a scatter of K·r values into K slots (atomics that
            # serialise on a GPU); index_copy_/index_fill_ do not synchronise,
            # as v_dense[idx] = ... does on CUDA.
            self.v_dense.index_copy_(0, self.idx, self.val)
            vv = (self.atom_val[:k] * self.v_dense[self.atom_idx[:k]]).sum(dim=1)
            self.v_dense.index_fill_(0, self.idx, 0)
            su = su - self.U[:, :k] @ vv
        norm = torch.linalg.vector_norm(su)
        u_new = su / norm
        self.stats[0] = norm
        self.stats[1] = torch.linalg.vector_norm(u_new - self.u)
        self.stats[2] = torch.linalg.vector_norm(self.val)
        self.u_prev.copy_(self.u)
        self.u.copy_(u_new)

    def start(self, u: torch.Tensor) -> None:
        """Set the current u (unit norm)."""
        self.u.copy_(u)

    def step(self) -> tuple[float, float, float]:
        """Run one update; u advances to u_new (see :meth:`revert`).

        Returns ``(‖Sv - U(Vv)‖, ‖u_new - u‖, ‖v‖)``.
        """
        self._update()
        stats = self.stats.tolist()
        return stats[0], stats[1], stats[2]

    def revert(self) -> None:
        """Undo the last step's move of u (its residual was zero)."""
        self.u.copy_(self.u_prev)

    def current(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(u, idx ascending, val) of the last step, owned by the caller."""
        return self.u.clone(), self.idx.clone(), self.val.clone()

    def commit(self, u: torch.Tensor, idx: torch.Tensor, val: torch.Tensor) -> None:
        """Record atom k = (u, its r loadings at ascending, unique ``idx``)."""
        self.U[:, self.k] = u
        self.atom_idx[self.k] = idx
        self.atom_val[self.k] = val
        self.k += 1


class BlockUpdater(_Updater):
    """Updates through a block operator's ``top_r`` and ``matvec``."""

    def __init__(self, op: BlockOperator, *, n_atoms: int, r: int, selection: str) -> None:
        super().__init__(
            *op.shape, n_atoms=n_atoms, r=r, selection=selection, device=op.device, dtype=op.dtype
        )
        self.op = op

    def _update(self) -> None:
        k, u = self.k, self.u
        deflation = None
        if k:
            c = self.U[:, :k].T @ u
            deflation = (
                self.atom_idx[:k].reshape(-1),
                (c[:, None] * self.atom_val[:k]).reshape(-1),
            )
        idx, val = self.op.top_r(u, deflation, self.r, self.selection)
        self.idx.copy_(idx)
        self.val.copy_(val)
        self._close(self.op.matvec(self.idx, self.val), k)


def _graph_atoms(k: int, n_atoms: int) -> int:
    """Return the number of atoms a graph is built for.

    None for the first atom, all n_atoms after (unlearned atoms are zero and
    add nothing; costs that grow with the number of atoms are small next to
    a capture).
    """
    return 0 if k == 0 else n_atoms


class _PinnedRows:
    """Compute ``y = Sᵀu`` for Sᵀ in pinned host memory.

    Row chunks are copied by the
    copy engine into two device buffers while the GEMV of the previous chunk
    runs (the copy engine reaches the full PCIe bandwidth, which kernels
    reading host memory directly do not on every machine).
    """

    def __init__(self, St: torch.Tensor, device: torch.device, chunk_bytes: int) -> None:
        n_rows, self.n_cols = St.shape
        self.St, self.width = St, St.stride(0)
        rows = max(1, chunk_bytes // (self.width * St.element_size()))
        self.chunks = [(a, min(n_rows, a + rows)) for a in range(0, n_rows, rows)]
        self.copier = HostToDevice(device, rows * self.width, St.dtype)

    def gemv(self, u: torch.Tensor, y: torch.Tensor) -> None:
        pieces = [
            (
                (b - a, self.width),
                self.St.as_strided(
                    (b - a, self.width), (self.width, 1), self.St.storage_offset() + a * self.width
                ),
            )
            for a, b in self.chunks
        ]
        for i, block in enumerate(self.copier.blocks(pieces)):  # to its end (releases)
            a, b = self.chunks[i]
            _triton_r1dl.gemv(block[:, : self.n_cols], u, y[a:b])


class ResidentUpdater(_Updater):
    """The resident fast path (module docstring).

    Parameters
    ----------
    St : Tensor of shape (n_voxels, n_timepoints)
        Standardised Sᵀ, row-major (rows may be padded), on ``device`` or in
        pinned host memory (with the Triton kernels on CUDA): then ``Sᵀu``
        streams Sᵀ through the copy engine in ``chunk_bytes`` pieces and the
        gather of the r chosen rows reads host memory directly.
    n_atoms, r, selection
        As in :func:`connscale.r1dl`.
    use_triton : bool or None
        Use the Triton kernels (default: where they run, i.e. float32 on CUDA);
        False runs the pure-torch equivalents.
    use_graphs : bool or None
        Capture updates as CUDA graphs (default: with the Triton kernels on
        CUDA; the torch equivalents synchronise, so they run eagerly).
    device : torch.device or None
        Where the update runs (default: St's device).
    chunk_bytes : int
        Size of the pieces of a host Sᵀ copied at a time.
    """

    def __init__(
        self,
        St: torch.Tensor,
        *,
        n_atoms: int,
        r: int,
        selection: str,
        use_triton: bool | None = None,
        use_graphs: bool | None = None,
        device: torch.device | None = None,
        chunk_bytes: int = 64 * 1024**2,
    ) -> None:
        n_voxels, n_timepoints = St.shape
        device = St.device if device is None else torch.device(device)
        dtype = St.dtype
        super().__init__(
            n_timepoints,
            n_voxels,
            n_atoms=n_atoms,
            r=r,
            selection=selection,
            device=device,
            dtype=dtype,
        )
        self.St = St
        # The kernels select r < P entries; r = P (keep everything) is plain torch.
        self.triton = (
            _triton_r1dl.usable(torch.empty(0, dtype=dtype, device=device))
            and r < n_voxels
            and use_triton is not False
        )
        if use_triton and not self.triton:
            raise ValueError("The Triton kernels need triton, a float32 CUDA tensor and r < P.")
        on_host = St.device.type != device.type
        if on_host and not self.triton:
            raise ValueError("Sᵀ in host memory needs the Triton kernels on CUDA.")
        self.pinned = _PinnedRows(St, device, chunk_bytes) if on_host else None
        if use_graphs is None:
            use_graphs = self.triton and device.type == "cuda" and not on_host
        if use_graphs and not (self.triton and device.type == "cuda" and not on_host):
            raise ValueError("CUDA graphs need the Triton kernels and Sᵀ on a CUDA device.")
        self.use_graphs = bool(use_graphs)
        zeros = {"dtype": dtype, "device": device}
        # Voxel-major CSR of the atoms' loadings (for Vᵀc), beside the
        # atom-major copy (for V v).
        self.rowptr = torch.zeros(n_voxels + 1, dtype=torch.int64, device=device)
        self.entry_atom = torch.zeros(n_atoms * r, dtype=torch.int32, device=device)
        self.entry_voxel = torch.zeros(n_atoms * r, dtype=torch.int64, device=device)
        self.entry_weight = torch.zeros(n_atoms * r, **zeros)
        self.n_entries = 0
        self.y = torch.empty(n_voxels, **zeros)
        if self.triton:
            self.workspace = _triton_r1dl.RadixWorkspace(n_voxels, device)
            rows = _triton_r1dl.gather_block(n_timepoints)
            self.partial = torch.empty(-(-r // rows) * n_timepoints, **zeros)
            self.dots = torch.zeros((n_atoms, _triton_r1dl.DOT_SPLITS), **zeros)
            self.su = torch.empty(n_timepoints, **zeros)
            # Atoms learned so far, read by the kernels (graphs span atoms).
            self.k_device = torch.zeros(1, dtype=torch.int32, device=device)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.capture_s = 0.0  # seconds spent capturing graphs

    # -- one update, written once for eager runs and graph capture --------
    def _compute(self, kc: int) -> None:
        if self.triton:
            self._compute_triton(kc)
        else:
            self._compute_torch(kc)

    def _compute_triton(self, kc: int) -> None:
        u, kernels = self.u, _triton_r1dl
        if self.pinned is None:
            kernels.gemv(self.St, u, self.y)
        else:
            self.pinned.gemv(u, self.y)
        if kc:
            c = self.U[:, :kc].T @ u
            kernels.csr_deflate(self.y, self.rowptr, self.entry_atom, self.entry_weight, c)
        kernels.radix_top_r(
            self.y,
            self.r,
            self.selection,
            out=(self.idx, self.val),
            workspace=self.workspace,
            dense=self.v_dense if kc else None,
        )
        part = kernels.gather_gemv(self.St, self.idx, self.val, self.partial)
        if kc:
            kernels.atom_dots(
                self.v_dense, self.atom_idx[:kc], self.atom_val[:kc], self.dots, self.k_device
            )
            self.v_dense.index_fill_(0, self.idx, 0)
        kernels.finish(
            kernels.column_sum(part, self.su),
            self.U,
            kc,
            self.dots,
            u,
            self.u_prev,
            self.workspace,
            self.stats,
        )

    def _compute_torch(self, kc: int) -> None:
        u = self.u
        c = self.U[:, :kc].T @ u
        torch.mv(self.St, u, out=self.y)
        if kc:
            m = self.n_entries
            self.y.index_add_(
                0,
                self.entry_voxel[:m],
                c[self.entry_atom[:m].long()] * self.entry_weight[:m],
                alpha=-1,
            )
        top_r_sorted(self.y, self.r, self.selection, out=(self.idx, self.val))
        self._close(self.val @ self.St.index_select(0, self.idx), kc)

    def _graph(self, kc: int) -> torch.cuda.CUDAGraph:
        graph = self._graphs.get(kc)
        if graph is None:
            start = time.perf_counter()
            saved = self.u.clone()
            compute = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(compute)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(side):
                self._compute(kc)  # warm-up: compile kernels, settle the allocator
                # capture_begin/end rather than torch.cuda.graph(), which also
                # runs gc.collect() and empties the allocator's cache each time.
                graph.capture_begin()
                try:
                    self._compute(kc)
                finally:
                    graph.capture_end()
            compute.wait_stream(side)
            self.u.copy_(saved)
            self._graphs[kc] = graph
            torch.cuda.synchronize(self.device)
            self.capture_s += time.perf_counter() - start
        return graph

    def _update(self) -> None:
        if self.use_graphs:
            self._graph(_graph_atoms(self.k, self.n_atoms)).replay()
        else:
            self._compute(self.k)

    def commit(self, u: torch.Tensor, idx: torch.Tensor, val: torch.Tensor) -> None:
        k, r = self.k, self.r
        super().commit(u, idx, val)
        # Merge atom k into the voxel-major CSR (entries by voxel, then atom):
        # an old entry moves past the new ones of lower voxels; a new entry
        # lands after every old entry of its voxel or lower. No sort, no sync.
        m_old, m = self.n_entries, self.n_entries + r
        device = idx.device
        old_voxel = self.entry_voxel[:m_old]
        pos_old = torch.arange(m_old, device=device) + torch.searchsorted(idx, old_voxel)
        pos_new = torch.arange(r, device=device) + self.rowptr[idx + 1]
        for buffer, new in (
            (self.entry_voxel, idx),
            (self.entry_atom, torch.full_like(self.entry_atom[:r], k)),
            (self.entry_weight, val),
        ):
            merged = torch.empty_like(buffer[:m])
            merged.index_copy_(0, pos_old, buffer[:m_old])
            merged.index_copy_(0, pos_new, new.to(buffer.dtype))
            buffer[:m] = merged
        self.rowptr += torch.searchsorted(idx, torch.arange(self.rowptr.numel(), device=device))
        self.n_entries = m
        if self.triton:
            self.k_device.fill_(self.k)
