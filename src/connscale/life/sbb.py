"""Subspace Barzilai–Borwein NNLS (Kim, Sra & Dhillon 2013).

Step for step as encode's ``bbnnls.m`` and ReAl-LiFE's ``bbnnls_gpu.m`` run
it, with the optional L1 term of ReAl-LiFE.

Minimises ``f(x) = ½‖Mx − b‖² + λ·1ᵀx`` over ``x ≥ 0``:

0. x = x₀ (0 by default); r = Mx − b; g = Mᵀr + λ; g_old = g; k = 0.
1. k ← k + 1; stop checks before any update, in this order:
   (a) max |g_i| over {x_i ≠ 0 or g_i < 0} < ``tol_grad``;
   (b) k > 2 and |obj_{k−1} − obj_{k−2}| < ``tol_obj`` (obj = ½‖r‖², without λ);
   (c) k ≥ ``max_iter`` (so ``max_iter`` = 500 makes 499 updates).
2. B = {x_i = 0 and g_i > 0}; ĝ = g_old with ĝ_B = 0 (lagged, masked gradient).
3. u = Mĝ; k even: α = ‖ĝ‖²/‖u‖²; k odd: v = Mᵀu, v_B = 0, α = ‖u‖²/‖v‖²
   (the first update, k = 1, takes the short step).
4. g_old ← g; x ← max(0, x − α g); r = Mx − b; obj_k = ½‖r‖²; g = Mᵀr + λ.

No line search or safeguard (the reference has none); the only addition is
a stop when a step is undefined (ĝ = 0 or Mĝ = 0: nothing left to move).

The solver's state after an update (k, x, g, g_old and the objective
histories) is all it needs to go on: ``save_state`` receives it every
``state_every`` updates and at the stop, and ``state`` resumes from it, with
the same iterates as a run that was never interrupted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from connscale._validation import Interval, validate_params

if TYPE_CHECKING:
    from connscale.life.operators import LiFEOperator


class DenseOperator:
    """A dense matrix with the operator interface (tests and small problems).

    Parameters
    ----------
    M : array of shape (n_rows, n_cols)
    device, dtype : torch device and dtype
    """

    def __init__(
        self,
        M: npt.ArrayLike,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.M = torch.as_tensor(np.asarray(M), dtype=dtype, device=device)
        self.device = self.M.device
        self.dtype = dtype
        self.shape = tuple(self.M.shape)

    def matvec(self, x: torch.Tensor) -> torch.Tensor:
        """Return M x."""
        return self.M @ x.to(self.device, self.dtype)

    def rmatvec(self, y: torch.Tensor) -> torch.Tensor:
        """Return Mᵀ y in float64."""
        return self.M.T.double() @ y.to(self.device).double().reshape(-1)


@dataclass
class SBBResult:
    """Outcome of :func:`sbb_nnls`.

    Attributes
    ----------
    x : Tensor (float64)
        The solution.
    objective : list of float
        ``½‖Mx − b‖² + λ·1ᵀx`` after each update (``objective[0]`` at x₀).
    data_term : list of float
        ``½‖Mx − b‖²`` likewise (the quantity of the reference's stop check).
    n_iter : int
        Iteration counter k at the stop (updates made = ``n_updates``).
    n_updates : int
    stop_reason : str
        ``'gradient'``, ``'objective'``, ``'max_iter'`` or ``'stalled'``.
    """

    x: torch.Tensor
    objective: list = field(default_factory=list)
    data_term: list = field(default_factory=list)
    n_iter: int = 0
    n_updates: int = 0
    stop_reason: str = ""


def _sq(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t, dtype=torch.float64) ** 2)


@dataclass
class _Iterate:
    """The solver's iterate: counter k, x, its gradient g and the lagged g_old."""

    k: int
    x: torch.Tensor
    g: torch.Tensor
    g_old: torch.Tensor

    def state(self, res: SBBResult, stop_reason: str = "") -> dict:
        """Return the state given to ``save_state`` (see :func:`sbb_nnls`)."""
        return {
            "k": self.k,
            "x": self.x,
            "g": self.g,
            "g_old": self.g_old,
            "objective": res.objective,
            "data_term": res.data_term,
            "stop_reason": stop_reason,
        }


def _initial_x(
    op: LiFEOperator | DenseOperator, x0: npt.ArrayLike | torch.Tensor | None
) -> torch.Tensor:
    """x₀ on the operator's device, float64, clipped at 0 (zeros when None)."""
    n = op.shape[1]
    if x0 is None:
        return torch.zeros(n, dtype=torch.float64, device=op.device)
    x = torch.as_tensor(np.asarray(x0) if not isinstance(x0, torch.Tensor) else x0)
    x = x.to(op.device, torch.float64).clamp(min=0).clone()
    if x.shape != (n,):
        raise ValueError(f"'x0' must have shape ({n},); got {tuple(x.shape)}.")
    return x


def _start(
    op: LiFEOperator | DenseOperator, b: torch.Tensor, lam: float, x: torch.Tensor
) -> tuple[_Iterate, SBBResult]:
    """Step 0: the residual, gradient and objective at x₀."""
    r = op.matvec(x) - b
    data = 0.5 * _sq(r)
    g = op.rmatvec(r) + lam
    res = SBBResult(x=x, objective=[data + lam * float(x.sum())], data_term=[data])
    return _Iterate(0, x, g, g.clone()), res


def _resume(op: LiFEOperator | DenseOperator, state: dict) -> tuple[_Iterate, SBBResult]:
    """Return the iterate and result of a saved state (stopped: ``stop_reason`` set)."""
    n = op.shape[1]
    k = int(state["k"])
    x, g, g_old = (
        torch.as_tensor(state[name]).to(op.device, torch.float64).clone()
        for name in ("x", "g", "g_old")
    )
    if x.shape != (n,):
        raise ValueError(f"The saved solver state has {x.shape[0]} weights; the problem has {n}.")
    res = SBBResult(x=x, objective=list(state["objective"]), data_term=list(state["data_term"]))
    res.n_updates = len(res.data_term) - 1
    if state.get("stop_reason"):
        res.n_iter, res.stop_reason = k, str(state["stop_reason"])
    return _Iterate(k, x, g, g_old), res


def _stop_reason(
    it: _Iterate,
    objs: dict,
    max_iter: int,
    tol_grad: float | None,
    tol_obj: float | None,
) -> str:
    """Step 1's checks, in the reference's order ('' to go on)."""
    if tol_grad is not None:
        P = (it.x != 0) | (it.g < 0)
        pg = float(it.g[P].abs().max()) if bool(P.any()) else 0.0
        if pg < tol_grad:
            return "gradient"
    k = it.k
    if tol_obj is not None and k > 2 and abs(objs[k - 1] - objs[k - 2]) < tol_obj:
        return "objective"
    if k >= max_iter:
        return "max_iter"
    return ""


def _update(
    op: LiFEOperator | DenseOperator, b: torch.Tensor, lam: float, it: _Iterate
) -> float | None:
    """Update ``it`` in place (steps 2-4); return ½‖r‖² (None: the step is undefined)."""
    B = (it.x == 0) & (it.g > 0)
    gh = it.g_old.masked_fill(B, 0.0)
    u = op.matvec(gh)
    if it.k % 2 == 0:
        num, den = _sq(gh), _sq(u)
    else:
        v = op.rmatvec(u).masked_fill_(B, 0.0)
        num, den = _sq(u), _sq(v)
    if den == 0.0 or num == 0.0 or not np.isfinite(num / den):
        return None
    alpha = num / den
    it.g_old = it.g
    it.x = (it.x - alpha * it.g).clamp_(min=0.0)
    r = op.matvec(it.x) - b
    it.g = op.rmatvec(r) + lam
    return 0.5 * _sq(r)


@validate_params(
    {
        "lam": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }
)
def sbb_nnls(
    op: LiFEOperator | DenseOperator,
    b: torch.Tensor,
    *,
    lam: float = 0.0,
    max_iter: int = 500,
    tol_grad: float | None = 1e-5,
    tol_obj: float | None = 1e-5,
    x0: npt.ArrayLike | torch.Tensor | None = None,
    callback: Callable[[int, torch.Tensor, float], object] | None = None,
    verbose: int = 0,
    state: dict | None = None,
    save_state: Callable[[dict], object] | None = None,
    state_every: int = 0,
) -> SBBResult:
    """Solve ``min ½‖Mx − b‖² + λ·1ᵀx, x ≥ 0`` by SBB (see module docstring).

    Parameters
    ----------
    op : operator
        Has ``matvec(x)`` (returns M x, any shape with b's size), ``rmatvec(y)``
        (returns Mᵀ y, float64) and ``shape``.
    b : Tensor
        Right-hand side, same shape as ``op.matvec``'s output.
    lam : float, default=0
        L1 weight λ (≥ 0).
    max_iter : int, default=500
        The reference's ``maxit``: at most ``max_iter − 1`` updates.
    tol_grad, tol_obj : float or None, default=1e-5
        Stop thresholds (a) and (b); None switches a check off (fixed
        iterations when both are None).
    x0 : array or Tensor of shape (n_cols,) or None
        Warm start (clipped at 0).
    callback : callable or None
        ``callback(k, x, objective)`` after each update.
    verbose : int, default=0
        1 shows a tqdm progress bar with the objective.
    state : dict or None
        A state given to ``save_state`` by an earlier run of the same
        problem: go on from it (``x0`` is then unused); a state saved at the
        stop returns that run's result.
    save_state : callable or None
        ``save_state(state)`` every ``state_every`` updates and at the stop;
        ``state`` is a dict of ``k``, ``x``, ``g``, ``g_old`` (tensors),
        ``objective``, ``data_term`` (lists) and ``stop_reason`` ('' while
        running), to be stored before the call returns (the tensors are
        reused).
    state_every : int, default=0
        Updates between calls of ``save_state`` (0: only at the stop).

    Returns
    -------
    SBBResult

    Examples
    --------
    >>> from connscale import life
    >>> from connscale.datasets import simulate_life_phantom
    >>> ph = simulate_life_phantom(20, 10, shape=(8, 8, 8), n_directions=12, random_state=0)
    >>> model = life.build_model(ph.dwi, ph.bvals, ph.bvecs, ph.streamlines, affine=ph.affine,
    ...                          device="cpu")
    >>> op = life.LiFEOperator(model)
    >>> result = life.sbb_nnls(op, model.signal.double(), lam=0.01, max_iter=20)
    >>> tuple(result.x.shape), bool((result.x >= 0).all())
    ((30,), True)
    """
    x = _initial_x(op, x0)
    if state is None:
        it, res = _start(op, b, lam, x)
    else:
        it, res = _resume(op, state)
        if res.stop_reason:
            return res
    # obj_k of the reference, k ≥ 1 (the update of iteration k appended data_term[k]).
    objs = dict(enumerate(res.data_term[1:], start=1))

    from tqdm.auto import tqdm

    bar = tqdm(
        total=max(int(max_iter) - 1, 0),
        initial=res.n_updates,
        disable=not verbose,
        desc="SBB-NNLS",
        unit="it",
    )
    try:
        while True:
            it.k += 1
            res.stop_reason = _stop_reason(it, objs, max_iter, tol_grad, tol_obj)
            if res.stop_reason:
                break
            data = _update(op, b, lam, it)
            if data is None:
                res.stop_reason = "stalled"
                break
            objs[it.k] = data
            res.n_updates += 1
            total = data + lam * float(it.x.sum())
            res.data_term.append(data)
            res.objective.append(total)
            bar.update(1)
            if verbose:
                bar.set_postfix(objective=f"{total:.6g}")
            if callback is not None:
                callback(it.k, it.x, total)
            if save_state is not None and state_every and res.n_updates % state_every == 0:
                save_state(it.state(res))
    finally:
        bar.close()
    if save_state is not None:
        save_state(it.state(res, res.stop_reason))
    res.x = it.x
    res.n_iter = it.k
    return res
