"""k-means of windowed FC on the device: k-means++ seeding and Lloyd iterations.

Three metrics, as MATLAB's ``kmeans`` (which GIFT's dFNC toolbox uses) defines
them:

* ``'euclidean'``: squared Euclidean distance, centres are means (the
  columns are centred first, as scikit-learn does, so that the expanded
  ``‖c‖² − 2⟨x, c⟩`` loses no precision);
* ``'correlation'``: 1 − Pearson r; every window is centred and scaled to
  unit norm once, centres are the means of those normalised windows;
* ``'l1'`` (city block): sum of absolute differences, centres are
  component-wise medians (k-medians).

Distances for the first two are one GEMM per block of rows (the pure-torch
path) or one fused Triton pass (CUDA): see :mod:`._triton_kmeans`. L1
distances are computed block by block with ``torch.cdist(p=1)``. Centre sums
are accumulated in float64 (on CUDA, updated with the rows whose label
changed only). Empty clusters are re-seeded with the windows farthest from
their centres, as scikit-learn does.

On CUDA the Euclidean and correlation assignments may read a coarse copy
of the windows instead (int8 with a scale per row, :mod:`._int8`, or
float16, :mod:`._half`), deciding every row whose nearest centre is certain
and confirming the near ties from the float32 rows: the labels are the
float32 pass's; ``ASSIGN`` picks the pass.

An iteration needs no host synchronisation: the number of changed labels,
the centre shift and an empty-cluster flag stay on the device and are read
every few iterations; iterations run past a stop are harmless (a fixed point)
or undone (a stop on ``tol``, from the saved centres; an empty cluster, by
running those iterations again one at a time with the host-side re-seeding).
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from connscale._choices import STATE_METRICS
from connscale.states import _half, _int8
from connscale.states import _triton_kmeans as fused

METRICS = STATE_METRICS
# Rows per block of the torch path: at most this many elements of n_rows × E
# (float64 copies of a block are made for the sums).
_BLOCK_ELEMENTS = 1 << 25
#: Elements per block of the blocked passes in this context (at most
#: _BLOCK_ELEMENTS; fewer under a memory limit, see :func:`limited_blocks`).
_block_elements: contextvars.ContextVar[int] = contextvars.ContextVar(
    "block_elements", default=_BLOCK_ELEMENTS
)
# Iterations between two reads of the stopping tests by the host.
_CHECK_EVERY = 8
#: Replay the Lloyd iterations of the mean metrics on CUDA from a CUDA graph
#: of one iteration (captured after the first): the same kernels on the same
#: tensors, without the ~1 ms of Python and launch work an iteration costs
#: the host, which the GPU would otherwise wait for once the assignment pass
#: reads the int8 copy (~0.35 ms on an H100).
GRAPHS = True
#: The CUDA assignment pass of the Euclidean and correlation metrics:
#: ``'fp32'`` (the fused float32 pass), ``'half'`` (a float16 copy of the
#: windows decides, the float32 pass confirms the near ties: the same labels,
#: half the bytes read) or ``'int8'`` (the same from an int8 copy with a
#: scale per row: a quarter of the bytes, exact integer dot products on the
#: tensor cores). A copy that cannot be made (device memory, float16's range,
#: rows too long for int32 sums) falls back to the next: int8, half, fp32.
#: On an H100 (benchmarks/RESULTS.md §8, 45,000 × 19,900, k = 5, 100
#: iterations from a CUDA graph, planted states) 'fp32' took 0.181 s, 'half'
#: 0.113 s and 'int8' 0.073 s (0.63 ms a converged iteration); on
#: unclustered windows, where int8 leaves ~65 % of the rows to the float32
#: pass, 'half' is the faster (1.29 against 1.59 ms an iteration).
#: ``_half.KERNEL`` picks the half pass's kernel (CUDA or tensor cores).
ASSIGN = "int8"
ASSIGNS = ("fp32", "half", "int8")
#: The coarse passes: the copy's maker and the pass.
_COARSE = {
    "half": (_half.half_copy, _half.assign),
    "int8": (_int8.int8_copy, _int8.assign),
}


@dataclass
class LloydResult:
    """Outcome of one k-means run on prepared data (device tensors)."""

    centres: torch.Tensor  # (k, E) float64, in the prepared space
    labels: torch.Tensor  # (n,) int64
    inertia: float
    n_iter: int
    converged: bool
    # Rows confirmed in float32 over the coarse passes (None: no such pass).
    confirmed: int | None = None
    coarse_passes: int = 0
    coarse: str | None = None  # the coarse copy read ('int8', 'half'), None: float32 only


class Prepared:
    """Windows made ready for one metric: the working array on the device.

    Parameters
    ----------
    x : torch.Tensor of shape (n, E)
        The windows. Copied (never modified) unless ``owned``.
    metric : {'l1', 'correlation', 'euclidean'}
    owned : bool
        ``x`` may be modified in place (it is a copy made for this purpose).
    """

    def __init__(self, x: torch.Tensor, metric: str, *, owned: bool = False) -> None:
        self.metric = metric
        work = x if owned else x.clone()
        self.shift = None
        if metric == "euclidean":
            self.shift = _column_means(work)
            work -= self.shift.to(work.dtype)
        elif metric == "correlation":
            normalise_rows_(work)
        self.x = _aligned(work)
        self.row_term = None
        if metric == "euclidean":
            self.row_term = _row_sq_norms(self.x)
        self._coarse: dict[str, _half.HalfCopy | _int8.Int8Copy | None] = {}

    def coarse(self, kind: str) -> _half.HalfCopy | _int8.Int8Copy | None:
        """Return the coarse copy ``kind`` of the rows, made on first use.

        The coarse copy ``kind`` (``'half'`` or ``'int8'``) of the rows
        for the assignment, made on first use (None where it cannot be made
        or is not used: L1, the pure-torch path, not enough device memory,
        values out of the copy's range).
        """
        if kind not in self._coarse:
            self._coarse[kind] = None
            if self.metric != "l1" and fused.usable(self.x, 1):
                self._coarse[kind] = _COARSE[kind][0](self.x, self.row_term)
        return self._coarse[kind]

    def half(self) -> _half.HalfCopy | None:
        """Return the float16 copy (:meth:`coarse`)."""
        return self.coarse("half")

    def int8(self) -> _int8.Int8Copy | None:
        """Return the int8 copy (:meth:`coarse`)."""
        return self.coarse("int8")

    def to_prepared(self, centres: torch.Tensor) -> torch.Tensor:
        """Centres given in input units, in the prepared space (float64)."""
        centres = centres.to(torch.float64)
        if self.metric == "euclidean":
            return centres - self.shift
        if self.metric == "correlation":
            return normalise_rows_(centres.clone())
        return centres

    def from_prepared(self, centres: torch.Tensor) -> torch.Tensor:
        """Centres of the prepared space in input units (float64)."""
        return centres + self.shift if self.metric == "euclidean" else centres


def _aligned(work: torch.Tensor) -> torch.Tensor:
    """Return ``work`` with rows starting on 64-byte boundaries.

    Only where the Triton kernels may run (so their loads vectorise): a view
    of a zero-padded copy when the row length is not a multiple of 16.
    """
    n, e = work.shape
    if not fused.runs_here(work) or e % 16 == 0:
        return work.contiguous()
    buffer = torch.zeros((n, -(-e // 16) * 16), dtype=work.dtype, device=work.device)
    buffer[:, :e] = work
    return buffer[:, :e]


def normalise_rows_(x: torch.Tensor) -> torch.Tensor:
    """Centre each row and scale it to unit norm, in place (float64 statistics)."""
    for start, stop in _blocks(x.shape[0], x.shape[1]):
        block = x[start:stop].to(torch.float64)
        block -= block.mean(dim=1, keepdim=True)
        norm = torch.linalg.vector_norm(block, dim=1, keepdim=True)
        if bool((norm == 0).any()):
            raise ValueError(
                "metric='correlation' needs windows that vary across edges; "
                f"got {int((norm == 0).sum())} constant window(s)."
            )
        x[start:stop] = block / norm
    return x


@contextmanager
def limited_blocks(elements: int) -> Iterator[None]:
    """Run the blocked passes in blocks of at most ``elements`` values.

    The passes are distances, sums, medians and row statistics, in this
    context; the float64 temporaries of a block scale with ``elements``.
    """
    token = _block_elements.set(max(1, min(int(elements), _BLOCK_ELEMENTS)))
    try:
        yield
    finally:
        _block_elements.reset(token)


def block_elements() -> int:
    """Elements per block of the blocked passes in this context."""
    return _block_elements.get()


def _blocks(n: int, width: int) -> Iterator[tuple[int, int]]:
    rows = max(1, block_elements() // max(width, 1))
    for start in range(0, n, rows):
        yield start, min(n, start + rows)


def _column_means(x: torch.Tensor) -> torch.Tensor:
    """Mean of each column in float64, a block of rows at a time."""
    total = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    for start, stop in _blocks(*x.shape):
        total += x[start:stop].to(torch.float64).sum(dim=0)
    return total / x.shape[0]


def _row_sq_norms(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], dtype=torch.float64, device=x.device)
    for start, stop in _blocks(*x.shape):
        out[start:stop] = torch.linalg.vector_norm(x[start:stop].to(torch.float64), dim=1) ** 2
    return out


# --------------------------------------------------------------------------
# Distances
# --------------------------------------------------------------------------


def _score_terms(prepared: Prepared, centres64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(alpha, beta) of the score ``beta + alpha <x, c>`` that is minimised."""
    k = centres64.shape[0]
    if prepared.metric == "euclidean":
        alpha = torch.full((k,), -2.0, dtype=torch.float64, device=centres64.device)
        beta = (centres64**2).sum(dim=1)
    else:  # correlation: 1 - <x, c> / ‖c‖ (x and c have zero mean, ‖x‖ = 1)
        norm = torch.linalg.vector_norm(centres64, dim=1)
        alpha = -1.0 / torch.where(norm > 0, norm, torch.ones_like(norm))
        beta = torch.ones(k, dtype=torch.float64, device=centres64.device)
    return alpha, beta


def distances(prepared: Prepared, centres64: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Distances of rows ``start:stop`` to the centres, (rows, k), in the working dtype."""
    x = prepared.x[start:stop]
    c = centres64.to(x.dtype)
    if prepared.metric == "l1":
        return torch.cdist(x, c, p=1)
    alpha, beta = _score_terms(prepared, centres64)
    # scikit-learn's order for Euclidean: ‖c‖² − 2 x·c, without the row's ‖x‖².
    return beta.to(x.dtype)[None, :] + alpha.to(x.dtype)[None, :] * (x @ c.T)


def assign_torch(prepared: Prepared, centres64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest centre (int64) and distance to it (float64) of every row."""
    n = prepared.x.shape[0]
    labels = torch.empty(n, dtype=torch.int64, device=prepared.x.device)
    dist = torch.empty(n, dtype=torch.float64, device=prepared.x.device)
    for start, stop in _blocks(n, prepared.x.shape[1]):
        d = distances(prepared, centres64, start, stop)
        best, labels[start:stop] = torch.min(d, dim=1)
        best = best.to(torch.float64)
        if prepared.row_term is not None:
            best = best + prepared.row_term[start:stop]
        dist[start:stop] = best
    return labels, dist


def exact_distances(
    prepared: Prepared, centres64: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Each row's distance to its own centre, computed directly in float64."""
    out = torch.empty(labels.shape[0], dtype=torch.float64, device=labels.device)
    for start, stop in _blocks(*prepared.x.shape):
        x = prepared.x[start:stop].to(torch.float64)
        diff = x - centres64[labels[start:stop]]
        if prepared.metric == "euclidean":
            out[start:stop] = (diff**2).sum(dim=1)
        elif prepared.metric == "l1":
            out[start:stop] = diff.abs().sum(dim=1)
        else:
            c = centres64[labels[start:stop]]
            norm = torch.linalg.vector_norm(c, dim=1)
            out[start:stop] = 1.0 - (x * c).sum(dim=1) / norm
    return out


# --------------------------------------------------------------------------
# Centres
# --------------------------------------------------------------------------


def sums_torch(x: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Return the per-centre float64 sums of the rows (k × E).

    A one-hot (k × rows) float64 product per block of rows (faster than
    ``index_add_`` on CPUs).
    """
    sums = torch.zeros((k, x.shape[1]), dtype=torch.float64, device=x.device)
    for start, stop in _blocks(*x.shape):
        onehot = torch.zeros((k, stop - start), dtype=torch.float64, device=x.device)
        onehot[labels[start:stop], torch.arange(stop - start, device=x.device)] = 1.0
        sums.addmm_(onehot, x[start:stop].to(torch.float64))
    return sums


def medians(x: torch.Tensor, labels: torch.Tensor, k: int, previous: torch.Tensor) -> torch.Tensor:
    """Return the component-wise median of each centre's rows.

    Component-wise median of each centre's rows (float64; the mean of the
    two middle values for an even count). Empty centres keep ``previous``.

    Each centre's rows are gathered a block of columns at a time, transposed
    so that every column is contiguous, and the lower middle value selected
    with ``torch.kthvalue``; the upper one (even counts) is the lower one when
    it occurs often enough, else the smallest value above it.
    """
    out = previous.clone()
    order = torch.argsort(labels, stable=True)
    counts = torch.bincount(labels, minlength=k).tolist()
    start = 0
    for j, m in enumerate(counts):
        rows = order[start : start + m]
        start += m
        if m == 0:
            continue
        width = max(1, block_elements() // m)
        low_rank = (m + 1) // 2
        for c0 in range(0, x.shape[1], width):
            block = x[rows, c0 : c0 + width].T.contiguous()  # (columns, members)
            low = torch.kthvalue(block, low_rank, dim=1).values
            if m % 2:
                out[j, c0 : c0 + width] = low.to(torch.float64)
                continue
            at_most = (block <= low[:, None]).sum(dim=1)
            above = torch.where(block > low[:, None], block, torch.inf).amin(dim=1)
            high = torch.where(at_most > low_rank, low, above)
            out[j, c0 : c0 + width] = (low.to(torch.float64) + high.to(torch.float64)) / 2
    return out


def _relocate_empty(
    prepared: Prepared,
    sums: torch.Tensor | None,
    counts: torch.Tensor,
    dist: torch.Tensor,
    labels: torch.Tensor,
    centres: torch.Tensor,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Relocate empty centres by scikit-learn's rule.

    scikit-learn's rule: each empty centre takes the row farthest from its
    own centre (farthest first); that row leaves its old centre's sum.
    """
    empty = torch.nonzero(counts == 0).squeeze(1).tolist()
    if not empty:
        return sums, counts, centres
    far = torch.topk(dist, len(empty)).indices.tolist()
    sums = None if sums is None else sums.clone()
    counts, centres = counts.clone(), centres.clone()
    for j, row in zip(empty, far):
        x = prepared.x[row].to(torch.float64)
        old = int(labels[row])
        if sums is not None:
            sums[old] -= x
            counts[old] -= 1
            sums[j] = x
        counts[j] = 1
        centres[j] = x
    return sums, counts, centres


# --------------------------------------------------------------------------
# Seeding
# --------------------------------------------------------------------------


def kmeans_plusplus(prepared: Prepared, k: int, generator: torch.Generator) -> torch.Tensor:
    """Return greedy k-means++ seeds, as scikit-learn's, for the metric.

    Greedy k-means++ seeds (as scikit-learn: 2 + ⌊ln k⌋ candidates per
    step, the one lowering the total distance most is kept), the distance
    being the metric's own. Returns (k, E) float64 centres.
    """
    x = prepared.x
    n = x.shape[0]
    device = x.device
    trials = 2 + int(math.log(k))
    first = int(torch.randint(n, (1,), generator=generator, device=device))
    centres = torch.empty((k, x.shape[1]), dtype=torch.float64, device=device)
    centres[0] = x[first].to(torch.float64)
    closest = _point_distances(prepared, centres[:1])[:, 0]
    potential = closest.sum()
    for c in range(1, k):
        draws = torch.rand(trials, generator=generator, device=device, dtype=torch.float64)
        cumulative = torch.cumsum(closest, 0)
        candidates = torch.searchsorted(cumulative, draws * potential)
        candidates = candidates.clamp_(max=n - 1)
        to_candidates = _point_distances(prepared, x[candidates].to(torch.float64))
        to_candidates = torch.minimum(to_candidates, closest[:, None])
        pots = to_candidates.sum(dim=0)
        best = int(torch.argmin(pots))
        closest = to_candidates[:, best]
        potential = pots[best]
        centres[c] = x[candidates[best]].to(torch.float64)
    return centres


def _point_distances(prepared: Prepared, points64: torch.Tensor) -> torch.Tensor:
    """Non-negative metric distances (float64) of every row to ``points64``."""
    n = prepared.x.shape[0]
    out = torch.empty((n, points64.shape[0]), dtype=torch.float64, device=prepared.x.device)
    for start, stop in _blocks(n, prepared.x.shape[1]):
        d = distances(prepared, points64, start, stop).to(torch.float64)
        if prepared.row_term is not None:
            d = d + prepared.row_term[start:stop, None]
        out[start:stop] = d.clamp_(min=0)
    return out


# --------------------------------------------------------------------------
# Lloyd
# --------------------------------------------------------------------------


class _Run:
    """A Lloyd run on the device: its state and one iteration.

    The state is the centres and the labels the sums and counts were made
    for; an iteration has no host synchronisation unless empty clusters are
    re-seeded.
    """

    def __init__(
        self,
        prepared: Prepared,
        centres: torch.Tensor,
        use_triton: bool,
        *,
        coarse: tuple[str, _half.HalfCopy | _int8.Int8Copy] | None = None,
    ) -> None:
        x = prepared.x
        n, k = x.shape[0], centres.shape[0]
        device = x.device
        self.prepared, self.k, self.use_triton = prepared, k, use_triton
        # (kind, copy) of the coarse pass, or None
        self.coarse = (
            coarse if use_triton and coarse is not None and coarse[1] is not None else None
        )
        self.coarse_passes = 0
        if self.coarse is not None:
            self.pending = torch.empty(n, dtype=torch.int32, device=device)
            self.pending_count = torch.zeros(1, dtype=torch.int32, device=device)
            self.confirmed = torch.zeros(1, dtype=torch.int64, device=device)
        self.mean = prepared.metric != "l1"
        self.centres = centres
        self.labels = torch.full((n,), -1, dtype=torch.int64, device=device)
        self.sums = (
            torch.zeros((k, x.shape[1]), dtype=torch.float64, device=device) if self.mean else None
        )
        self.counts = torch.zeros(k, dtype=torch.int64, device=device)
        self.centre_ids = torch.arange(k, device=device)
        if use_triton:
            self.score = torch.empty(n, dtype=torch.float32, device=device)
            self.rows = torch.arange(n, dtype=torch.int32, device=device)
            self.index = torch.empty(n + 1, dtype=torch.int32, device=device)

    def snapshot(self, *, copy: bool = False) -> tuple:
        """Return the run's state.

        The state; eager iterations replace these tensors (never modify
        them in place), a :class:`_StepGraph` does: ``copy`` them then.
        """
        state = self.centres, self.labels, self.sums, self.counts
        return tuple(t.clone() for t in state) if copy else state

    def restore(self, saved: tuple) -> None:
        self.centres, self.labels, self.sums, self.counts = saved

    def assign(
        self, centres: torch.Tensor, changed: torch.Tensor, *, distances: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return the labels of every row for ``centres`` and their distances.

        Labels of every row for ``centres`` and their distances (float64);
        adds the number of labels that differ from the current ones to
        ``changed`` (int32, one element, on the device). Without
        ``distances`` the half-precision pass may run (same labels), and
        the distances are None.
        """
        prepared = self.prepared
        if not self.use_triton:
            labels, dist = assign_torch(prepared, centres)
            changed += (labels != self.labels).sum()
            return labels, dist
        l1 = prepared.metric == "l1"
        alpha = beta = None
        if not l1:
            alpha, beta = (t.to(torch.float32) for t in _score_terms(prepared, centres))
        labels = torch.empty_like(self.labels)
        if self.coarse is not None and not distances:
            kind, copy = self.coarse
            _COARSE[kind][1](
                prepared.x,
                copy,
                centres.to(torch.float32),
                alpha=alpha,
                beta=beta,
                old=self.labels,
                labels=labels,
                score=self.score,
                changed=changed,
                pending=self.pending,
                count=self.pending_count,
            )
            self.confirmed += self.pending_count
            self.coarse_passes += 1
            return labels, None
        fused.assign(
            prepared.x,
            centres.to(torch.float32),
            l1=l1,
            alpha=alpha,
            beta=beta,
            old=self.labels,
            labels=labels,
            score=self.score,
            changed=changed,
        )
        dist = self.score.to(torch.float64)
        if prepared.row_term is not None:
            dist = dist + prepared.row_term
        return labels, dist

    def move(self, labels: torch.Tensor) -> None:
        """Move the counts and sums with the rows to ``labels``.

        On CUDA only the rows whose label changed are read (listed on the
        device).
        """
        x, k = self.prepared.x, self.k
        self.counts = (labels == self.centre_ids[:, None]).sum(dim=1)
        if self.mean and self.use_triton:
            moved = labels != self.labels
            position = torch.cumsum(moved, 0, dtype=torch.int32)
            target = torch.where(moved, position.to(torch.int64) - 1, labels.shape[0])
            self.index.scatter_(0, target, self.rows)  # slot n takes the unmoved rows
            self.sums = self.sums + fused.moved_sums(
                x, self.index, position[-1:], labels, self.labels, k
            )
        elif self.mean:
            self.sums = sums_torch(x, labels, k)
        self.labels = labels

    def step(
        self, changed: torch.Tensor, shift: torch.Tensor, empty: torch.Tensor, *, relocate: bool
    ) -> None:
        """Run one iteration, its outputs to device tensors.

        One iteration; the number of changed labels, the squared centre
        shift and whether a centre got no row go to the device tensors
        ``changed``, ``shift`` and ``empty`` (one element each). With
        ``relocate`` empty centres are re-seeded (host synchronisations).
        """
        labels, dist = self.assign(self.centres, changed, distances=relocate)
        self.move(labels)
        if self.mean:
            sums, counts = self.sums, self.counts
            if relocate:
                sums, counts, _ = _relocate_empty(
                    self.prepared, sums, counts, dist, labels, self.centres
                )
            new = sums / counts[:, None].to(torch.float64)
            if not relocate:
                # An empty centre stays where it was (not 0/0): the span it
                # occurs in is undone and run again with re-seeding, and the
                # iterations until then must not see NaN centres.
                new = torch.where(counts[:, None] > 0, new, self.centres)
        else:
            new = medians(self.prepared.x, labels, self.k, self.centres)
            if relocate:
                _, _, new = _relocate_empty(self.prepared, None, self.counts, dist, labels, new)
        if not relocate:
            empty.copy_((self.counts == 0).any().reshape(1))
        shift.copy_(((new - self.centres) ** 2).sum().reshape(1))
        self.centres = new

    def inertia(self) -> float:
        """Return the sum of the rows' distances to their centres, in float64.

        From the float64 sums for the mean metrics (exact identities), directly
        for L1.
        """
        prepared, c = self.prepared, self.centres
        if not self.mean:
            return float(exact_distances(prepared, c, self.labels).sum())
        dots = (c * self.sums).sum(dim=1)
        if prepared.metric == "euclidean":
            # sum over rows of |x|^2 - 2 <x, c> + |c|^2
            return float(
                prepared.row_term.sum()
                - 2 * dots.sum()
                + (self.counts.to(torch.float64) * (c**2).sum(dim=1)).sum()
            )
        norm = torch.linalg.vector_norm(c, dim=1)
        norm = torch.where(norm > 0, norm, torch.ones_like(norm))
        return float((self.counts.to(torch.float64) - dots / norm).sum())


class _StepGraph:
    """One iteration of a :class:`_Run` captured as a CUDA graph and replayed.

    One iteration of a :class:`_Run` (mean metrics, CUDA, no re-seeding)
    captured as a CUDA graph and replayed: the same kernels on the same
    tensors as :meth:`_Run.step`, launched by one call.

    The run's state (centres, labels, sums, counts) lives in static tensors
    the graph reads and overwrites in place; a state the run was given
    since (an eager iteration, a restore) is copied in before a replay.
    Capture needs the kernels compiled: make one after an eager iteration.
    """

    @staticmethod
    def usable(run: _Run) -> bool:
        """Whether ``run``'s iterations can be captured."""
        return run.use_triton and run.mean and run.prepared.x.is_cuda

    def __init__(self, run: _Run) -> None:
        self.run = run
        device = run.prepared.x.device
        self.changed = torch.zeros(1, dtype=torch.int32, device=device)
        self.shift = torch.zeros(1, dtype=torch.float64, device=device)
        self.empty = torch.zeros(1, dtype=torch.bool, device=device)
        self.state = run.snapshot(copy=True)
        run.restore(self.state)
        passes = run.coarse_passes
        self.graph = torch.cuda.CUDAGraph()
        # Captured on a side stream, as torch.cuda.graph does, without its
        # garbage collection and cache emptying (2.3 ms of a 10.1 ms capture).
        with torch.cuda.device(device):
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.graph.capture_begin()
                try:
                    self.changed.zero_()
                    run.step(self.changed, self.shift, self.empty, relocate=False)
                    for static, new in zip(self.state, run.snapshot(), strict=True):
                        static.copy_(new)
                finally:
                    self.graph.capture_end()
            torch.cuda.current_stream().wait_stream(stream)
        run.restore(self.state)
        run.coarse_passes = passes  # the capture ran nothing

    def step(self, changed: torch.Tensor, shift: torch.Tensor, empty: torch.Tensor) -> None:
        """Replay one iteration, its outputs copied to ``changed``, ``shift`` and ``empty``.

        The outputs are those :meth:`_Run.step` gives.
        """
        run = self.run
        for static, current in zip(self.state, run.snapshot(), strict=True):
            if current is not static:
                static.copy_(current)
        run.restore(self.state)
        with torch.cuda.device(run.prepared.x.device):
            self.graph.replay()
        changed.copy_(self.changed)
        shift.copy_(self.shift)
        empty.copy_(self.empty)
        if run.coarse is not None:
            run.coarse_passes += 1


def lloyd(
    prepared: Prepared,
    centres: torch.Tensor,
    *,
    max_iter: int = 300,
    tol: float = 0.0,
    use_triton: bool | None = None,
    assign: str | None = None,
    check_convergence: bool = True,
    progress: Callable[[int], object] | None = None,
) -> LloydResult:
    """Run Lloyd iterations from ``centres``, as scikit-learn's.

    Lloyd iterations from ``centres`` (k × E, prepared space), as
    scikit-learn's ``_kmeans_single_lloyd``: assign, update the centres,
    stop when no label changed or the squared centre shift is at most
    ``tol``; when stopped on ``tol`` or ``max_iter`` the labels are
    re-assigned to the final centres. ``check_convergence=False`` runs all
    ``max_iter`` iterations (for timing).

    The stopping tests are read by the host every ``_CHECK_EVERY``
    iterations (once at the end without ``check_convergence``): iterations
    past a stop on unchanged labels repeat the same fixed point, a stop on
    ``tol`` takes the centres saved at that iteration, and a run of
    iterations in which a centre got no row is run again one iteration at a
    time, re-seeding empty centres as scikit-learn does. ``progress`` is
    called with the number of iterations done at each of those reads (no
    read is added for it). ``assign`` picks the fused pass of the
    Euclidean and correlation metrics (``ASSIGN`` when None; see there);
    the result's ``confirmed`` counts the rows the coarse passes left to
    the float32 pass.
    """
    x = prepared.x
    k = centres.shape[0]
    if use_triton is None:
        use_triton = fused.usable(x, k)
    assign = ASSIGN if assign is None else assign
    if assign not in ASSIGNS:
        raise ValueError(f"assign must be one of {ASSIGNS}; got {assign!r}.")
    # Triton launches on the current CUDA device: make it x's (cuda:1 ...).
    with torch.cuda.device(x.device) if x.is_cuda else nullcontext():
        return _lloyd(
            prepared, centres, max_iter, tol, use_triton, assign, check_convergence, progress
        )


def _lloyd(
    prepared: Prepared,
    centres: torch.Tensor,
    max_iter: int,
    tol: float,
    use_triton: bool,
    assign: str,
    check_convergence: bool,
    progress: Callable[[int], object] | None,
) -> LloydResult:
    x = prepared.x
    coarse = _coarse_copy(prepared, assign) if use_triton else None
    run = _Run(prepared, centres.to(torch.float64).clone(), use_triton, coarse=coarse)
    changed = torch.zeros(max_iter, dtype=torch.int32, device=x.device)
    shift = torch.zeros(max_iter, dtype=torch.float64, device=x.device)
    empty = torch.zeros(max_iter, dtype=torch.bool, device=x.device)
    done, careful, stop = 0, False, None
    graphable, graph = GRAPHS and _StepGraph.usable(run), None
    while done < max_iter and stop is None:
        span = min(
            max_iter - done, 1 if careful else (_CHECK_EVERY if check_convergence else max_iter)
        )
        saved = run.snapshot(copy=graphable)
        history = []
        for i in range(done, done + span):
            outputs = changed[i : i + 1], shift[i : i + 1], empty[i : i + 1]
            if graphable and not careful and i > 0:
                graph = graph or _StepGraph(run)
                graph.step(*outputs)
            else:
                run.step(*outputs, relocate=careful)
            if check_convergence:
                history.append(run.centres.clone() if graphable else run.centres)
        counts = changed[done : done + span].tolist()  # the one synchronisation of the span
        if not careful and bool(empty[done : done + span].any()):
            run.restore(saved)
            changed[done : done + span] = 0
            careful = True
            continue
        if check_convergence:
            shifts = shift[done : done + span].tolist()
            for j in range(span):
                if counts[j] == 0 or shifts[j] <= tol:
                    stop = (done + j + 1, counts[j] == 0)
                    run.centres = history[j]
                    break
        done += span
        if progress is not None:
            progress(stop[0] if stop is not None else done)
    n_iter, converged = stop if stop is not None else (max_iter, False)
    if not converged:
        labels, _ = run.assign(
            run.centres, torch.zeros(1, dtype=torch.int32, device=x.device), distances=False
        )
        run.move(labels)
    return LloydResult(
        centres=run.centres,
        labels=run.labels,
        inertia=run.inertia(),
        n_iter=n_iter,
        converged=converged,
        confirmed=None if run.coarse is None else int(run.confirmed),
        coarse_passes=run.coarse_passes,
        coarse=None if run.coarse is None else run.coarse[0],
    )


def _coarse_copy(
    prepared: Prepared, assign: str
) -> tuple[str, _half.HalfCopy | _int8.Int8Copy] | None:
    """Return the coarse copy the pass ``assign`` reads, or None.

    Falls back from int8 to float16 when a copy cannot be made; None for the
    float32 pass.
    """
    order = ASSIGNS[ASSIGNS.index(assign) : 0 : -1]  # int8 → half, half → half
    for kind in order:
        copy = prepared.coarse(kind)
        if copy is not None:
            return kind, copy
    return None


def seed_generator(rng: np.random.Generator, device: torch.device) -> torch.Generator:
    """Return a torch generator on ``device`` seeded from a numpy generator."""
    generator = torch.Generator(device=device)
    generator.manual_seed(int(rng.integers(0, 2**62)))
    return generator
