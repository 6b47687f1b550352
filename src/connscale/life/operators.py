"""y = Mx and x = Mᵀy on the ENCODE tensor Φ, in torch (CPU or CUDA).

- ``matvec``: reduce Φ to (voxel, atom) weights ``W[v, a] = Σ_f Φ(a, v, f) x_f``
  (one scatter-add over the entries), then one sparse × dense product
  ``Y = W · Dᵀ`` (CSR over voxels; cuSPARSE on CUDA, scipy on the CPU).
- ``rmatvec``: ``dot[v, a] = ⟨D[:, a], Y[v, :]⟩`` for the distinct (voxel,
  atom) pairs (a sampled product, SDDMM, or a chunked gather-dot), then
  ``x_f = Σ Φ(a, v, f) · dot[v, a]``
  scattered into a float64 accumulator.

Both run in chunks of entries / pairs so that temporaries stay bounded.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from connscale.life.encode import LiFEModel


class LiFEOperator:
    """The LiFE matrix M (n_voxels·n_directions × n_fibres) as two products.

    Parameters
    ----------
    model : LiFEModel
    column_scale : Tensor of shape (n_fibres,) or None
        When given, the operator is M · diag(1 / column_scale) (the
        preconditioned matrix of the SBB solver).
    dictionary : Tensor of shape (n_directions, n_atoms) or None
        Use this D instead of the model's (prediction on other directions).
    chunk_size : int or None
        Elements of the temporaries of one chunk (entries, or pairs ×
        directions); None: 2**22 on the CPU, 2**27 on CUDA.
    pair_method : {'sddmm', 'gather'}, default='sddmm'
        How ``rmatvec`` forms the (voxel, atom) dot products; 'sddmm' falls
        back to 'gather' where torch lacks it.
    spmm_method : {'auto', 'scipy', 'torch'}, default='auto'
        The sparse × dense product of ``matvec``: scipy's CSR kernel on the
        CPU (3–4× faster than torch's there), torch's (cuSPARSE) on CUDA.
    entry_method : {'auto', 'spmv', 'scatter'}, default='auto'
        How the Φ entries are reduced: sparse matrix-vector products with
        P (pairs × fibres) and Pᵀ (float64 values, so Mᵀy accumulates in
        float64) — no atomics, default on CUDA — or chunked scatter-adds
        (``index_add_``, float64 accumulator for Mᵀy), default on the CPU.
        'spmv' falls back to 'scatter' where torch lacks it; it holds Pᵀ as
        an extra copy of the entries (~16 bytes each).

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
    ...                          device="cpu")
    >>> import torch
    >>> op = life.LiFEOperator(model)
    >>> op.shape, tuple(op.matvec(torch.ones(30)).shape)
    ((1992, 30), (166, 12))
    """

    def __init__(
        self,
        model: LiFEModel,
        *,
        column_scale: torch.Tensor | None = None,
        dictionary: torch.Tensor | None = None,
        chunk_size: int | None = None,
        pair_method: str = "sddmm",
        spmm_method: str = "auto",
        entry_method: str = "auto",
    ) -> None:
        if spmm_method == "auto":
            spmm_method = "scipy" if model.device.type == "cpu" else "torch"
        if spmm_method not in ("scipy", "torch"):
            raise ValueError(
                f"'spmm_method' must be 'auto', 'scipy' or 'torch'; got {spmm_method!r}."
            )
        self.spmm_method = spmm_method
        self._np_csr = None
        if entry_method == "auto":
            entry_method = "spmv" if model.device.type == "cuda" else "scatter"
        if entry_method not in ("spmv", "scatter"):
            raise ValueError(
                f"'entry_method' must be 'auto', 'spmv' or 'scatter'; got {entry_method!r}."
            )
        self.entry_method = entry_method
        self._P = None
        if pair_method not in ("sddmm", "gather"):
            raise ValueError(f"'pair_method' must be 'sddmm' or 'gather'; got {pair_method!r}.")
        self.pair_method = pair_method
        self._pattern_csr = None
        if chunk_size is None:
            chunk_size = 1 << (27 if model.device.type == "cuda" else 22)
        self.model = model
        self.device = model.device
        self.dtype = model.dtype
        D = model.dictionary if dictionary is None else dictionary
        self.D = D.to(self.device, self.dtype)
        self.Dt = self.D.T.contiguous()  # (n_atoms, n_directions)
        self.n_directions = int(self.D.shape[0])
        self.n_voxels = model.n_voxels
        self.n_fibres = model.n_fibres
        self.n_pairs = int(model.av_atom.numel())
        value = model.entry_value
        if column_scale is not None:
            value = (
                value.double() / column_scale.to(self.device, torch.float64)[model.entry_fibre]
            ).to(self.dtype)
        self.value = value
        self.chunk_size = int(chunk_size)
        self._crow = model.crow
        self._col = model.av_atom
        self.shape = (self.n_voxels * self.n_directions, self.n_fibres)

    def _spmm(self, W: torch.Tensor) -> torch.Tensor:
        if self.spmm_method == "scipy":
            import scipy.sparse as sp

            if self._np_csr is None:
                self._np_csr = (
                    self._col.cpu().numpy(),
                    self._crow.cpu().numpy(),
                    self.Dt.cpu().numpy(),
                )
            col, crow, Dt = self._np_csr
            A = sp.csr_matrix(
                (W.detach().cpu().numpy(), col, crow), shape=(self.n_voxels, Dt.shape[0])
            )
            return torch.from_numpy(np.ascontiguousarray(A @ Dt)).to(self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            A = torch.sparse_csr_tensor(
                self._crow,
                self._col,
                W,
                size=(self.n_voxels, self.Dt.shape[0]),
                dtype=self.dtype,
                device=self.device,
                check_invariants=False,
            )
            return A @ self.Dt

    def _entry_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """P (pairs × fibres, working dtype) and Pᵀ (fibres × pairs, float64) as CSR."""
        if self._P is None:
            m = self.model
            crow = torch.zeros(self.n_pairs + 1, dtype=torch.int64, device=self.device)
            torch.cumsum(torch.bincount(m.entry_av, minlength=self.n_pairs), 0, out=crow[1:])
            perm = torch.sort(m.entry_fibre, stable=True).indices
            crow_t = torch.zeros(self.n_fibres + 1, dtype=torch.int64, device=self.device)
            torch.cumsum(torch.bincount(m.entry_fibre, minlength=self.n_fibres), 0, out=crow_t[1:])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                P = torch.sparse_csr_tensor(
                    crow,
                    m.entry_fibre,
                    self.value,
                    size=(self.n_pairs, self.n_fibres),
                    check_invariants=False,
                )
                Pt = torch.sparse_csr_tensor(
                    crow_t,
                    m.entry_av[perm],
                    self.value[perm].double(),
                    size=(self.n_fibres, self.n_pairs),
                    check_invariants=False,
                )
            self._P = (P, Pt)
        return self._P

    def pair_weights(self, x: torch.Tensor) -> torch.Tensor:
        """W (n_pairs,): Σ_f Φ(a, v, f) x_f for every (voxel, atom) pair.

        Parameters
        ----------
        x : torch.Tensor of shape (n_fibres,)
            The streamlines' weights.

        Returns
        -------
        torch.Tensor of shape (n_pairs,)

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> import torch
        >>> op = life.LiFEOperator(model)
        >>> op.pair_weights(torch.zeros(30)).abs().max().item()
        0.0
        """
        x = x.to(self.device, self.dtype)
        if self.entry_method == "spmv":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    return self._entry_matrices()[0] @ x
            except (RuntimeError, NotImplementedError):
                self.entry_method, self._P = "scatter", None
        m = self.model
        W = torch.zeros(self.n_pairs, dtype=self.dtype, device=self.device)
        cs = self.chunk_size
        for s in range(0, self.value.numel(), cs):
            e = slice(s, s + cs)
            W.index_add_(0, m.entry_av[e], self.value[e] * x.index_select(0, m.entry_fibre[e]))
        return W

    def matvec(self, x: torch.Tensor) -> torch.Tensor:
        """Y = M x as an (n_voxels, n_directions) tensor.

        Parameters
        ----------
        x : torch.Tensor of shape (n_fibres,)
            The streamlines' weights.

        Returns
        -------
        torch.Tensor of shape (n_voxels, n_directions)

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> import torch
        >>> tuple(life.LiFEOperator(model).matvec(torch.ones(30)).shape)
        (166, 12)
        """
        return self._spmm(self.pair_weights(x))

    def pair_dots(self, Y: torch.Tensor) -> torch.Tensor:
        """⟨D[:, a], Y[v, :]⟩ for every (voxel, atom) pair (n_pairs,).

        One sampled dense-dense product (SDDMM: ``Y · D`` evaluated only at
        the (voxel, atom) pattern, cuSPARSE on CUDA) where torch supports it;
        otherwise a chunked gather-dot.

        Parameters
        ----------
        Y : torch.Tensor of shape (n_voxels, n_directions)
            A signal at the model's voxels.

        Returns
        -------
        torch.Tensor of shape (n_pairs,)

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> import torch
        >>> op = life.LiFEOperator(model)
        >>> op.pair_dots(op.matvec(torch.ones(30))).dim()
        1
        """
        Y = Y.to(self.device, self.dtype).reshape(self.n_voxels, self.n_directions)
        if self.pair_method == "sddmm":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    out = torch.sparse.sampled_addmm(self._pattern(), Y, self.D, beta=0.0)
                return out.values()
            except (RuntimeError, NotImplementedError):
                self.pair_method = "gather"  # unsupported here: the torch fallback
        return self._pair_dots_gather(Y)

    def _pattern(self) -> torch.Tensor:
        if self._pattern_csr is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                self._pattern_csr = torch.sparse_csr_tensor(
                    self._crow,
                    self._col,
                    torch.zeros(self.n_pairs, dtype=self.dtype, device=self.device),
                    size=(self.n_voxels, self.Dt.shape[0]),
                    check_invariants=False,
                )
        return self._pattern_csr

    def _pair_dots_gather(self, Y: torch.Tensor) -> torch.Tensor:
        m = self.model
        dots = torch.empty(self.n_pairs, dtype=self.dtype, device=self.device)
        cs = max(1, self.chunk_size // max(self.n_directions, 1))
        for s in range(0, self.n_pairs, cs):
            p = slice(s, s + cs)
            dots[p] = (
                self.Dt.index_select(0, m.av_atom[p]) * Y.index_select(0, m.av_voxel[p])
            ).sum(dim=1)
        return dots

    def rmatvec(self, Y: torch.Tensor) -> torch.Tensor:
        """Return x = Mᵀ y (n_fibres,), accumulated in float64.

        Parameters
        ----------
        Y : torch.Tensor of shape (n_voxels, n_directions)
            A signal at the model's voxels.

        Returns
        -------
        torch.Tensor of shape (n_fibres,), float64

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> tuple(life.LiFEOperator(model).rmatvec(model.signal).shape)
        (30,)
        """
        dots = self.pair_dots(Y)
        if self.entry_method == "spmv":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    return self._entry_matrices()[1] @ dots.double()
            except (RuntimeError, NotImplementedError):
                self.entry_method, self._P = "scatter", None
        m = self.model
        out = torch.zeros(self.n_fibres, dtype=torch.float64, device=self.device)
        cs = self.chunk_size
        for s in range(0, self.value.numel(), cs):
            e = slice(s, s + cs)
            out.index_add_(
                0, m.entry_fibre[e], (self.value[e] * dots.index_select(0, m.entry_av[e])).double()
            )
        return out

    def column_norms_sq(self) -> torch.Tensor:
        """h_f = Σ_entries val² ‖D[:, a]‖² (≈ ‖M_f‖²; cross terms ignored), float64.

        Returns
        -------
        torch.Tensor of shape (n_fibres,), float64

        Examples
        --------
        >>> from connscale import life
        >>> from connscale.datasets import simulate_life_phantom
        >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
        >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
        ...                          device="cpu")
        >>> h = life.LiFEOperator(model).column_norms_sq()
        >>> tuple(h.shape), bool((h > 0).all())
        ((30,), True)
        """
        m = self.model
        dnorm = (self.D.double() ** 2).sum(dim=0)
        out = torch.zeros(self.n_fibres, dtype=torch.float64, device=self.device)
        cs = self.chunk_size
        for s in range(0, self.value.numel(), cs):
            e = slice(s, s + cs)
            out.index_add_(
                0, m.entry_fibre[e], self.value[e].double() ** 2 * dnorm[m.av_atom[m.entry_av[e]]]
            )
        return out
