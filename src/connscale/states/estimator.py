"""Recurring dynamic-FC states of a cohort (Allen et al. 2014) as an estimator.

The windowed FC of every subject (one edge vector per window) is pooled and
clustered into a few states with k-means on the device; each subject is
then described by its sequence of states: fraction of time in each state,
mean dwell time, number of transitions and transition matrix.

With ``exemplars=True`` (Allen's two-stage scheme) the windows at local
maxima of each subject's FC variance (variance across edges) are clustered
first, ``n_init`` times from k-means++ seeds; the best of those centres
initialise one clustering of all windows.
"""

from __future__ import annotations

import logging
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from connscale._compute import MemoryPlanner, planner_for, resolve_device
from connscale._docs import fill_doc
from connscale._validation import (
    Interval,
    StrOptions,
    check_int,
    check_random_state,
    skip_nested_validation,
    user_stacklevel,
    validate_estimator_params,
    validate_params,
)
from connscale.states import _kmeans as km
from connscale.states._budget import planning
from connscale.states._features import StateFeatures, state_features

logger = logging.getLogger("connscale")

__all__ = ["DFCStates", "elbow", "exemplar_windows"]

#: Correlations are clipped to [-1 + eps, 1 - eps] before arctanh.
_FISHER_EPS = 1e-7


# Declared once for DFCStates and elbow.
_PARAMETER_CONSTRAINTS = {
    "n_states": [Interval(Integral, 1, None, closed="left")],
    "metric": [StrOptions(km.METRICS)],
    "exemplars": ["boolean"],
    "n_init": [Interval(Integral, 1, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left")],
    "fisher_z": ["boolean"],
    "random_state": ["random_state"],
    "device": ["device"],
    "memory_limit": ["memory", None],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
}


def _subject_windows(windows) -> tuple[list[np.ndarray], bool]:
    """Per-subject (n_windows, n_edges) arrays, and whether one subject was given."""
    from connscale.fc.dynamic_result import DynamicConnectivity

    single = isinstance(windows, (np.ndarray, DynamicConnectivity, torch.Tensor)) or sp.issparse(
        windows
    )
    items = [windows] if single else list(windows)
    if not items:
        raise ValueError("Expected windows of at least one subject; got an empty list.")
    arrays = []
    for i, item in enumerate(items):
        if sp.issparse(item):
            raise TypeError(
                f"Subject {i}: expected dense windows of shape (n_windows, n_edges); "
                f"got a scipy.sparse {type(item).__name__}. Pass .toarray()."
            )
        if isinstance(item, DynamicConnectivity):
            array = _dfc_edges(item)
        else:
            if isinstance(item, torch.Tensor):
                item = item.detach().cpu().numpy()
            array = np.asarray(item)
        if array.ndim != 2:
            raise ValueError(
                f"Subject {i}: expected windows of shape (n_windows, n_edges); got an array "
                f"of shape {array.shape}."
            )
        if not np.issubdtype(array.dtype, np.number):
            raise ValueError(f"Subject {i}: windows must be numeric; got dtype {array.dtype}.")
        if np.iscomplexobj(array):
            raise ValueError(
                f"Subject {i}: windows must hold real numbers; got complex "
                f"values (dtype {array.dtype})."
            )
        if array.shape[1] == 0:
            raise ValueError(
                f"Subject {i}: windows must have at least one edge; got an "
                f"array of shape {array.shape}."
            )
        if array.dtype not in (np.float32, np.float64):
            array = array.astype(np.float64)
        if not np.isfinite(array).all():
            bad = int((~np.isfinite(array).all(axis=1)).sum())
            raise ValueError(
                f"Subject {i}: {bad} window(s) hold NaN or infinite values (constant series "
                "in a window have undefined correlations); drop those series or windows first."
            )
        arrays.append(array)
    widths = {a.shape[1] for a in arrays}
    if len(widths) > 1:
        raise ValueError(f"All subjects must have the same number of edges; got {sorted(widths)}.")
    if len({a.dtype for a in arrays}) > 1:
        arrays = [a.astype(np.float64) for a in arrays]
    return arrays, single


def _dfc_edges(result) -> np.ndarray:
    """Return a DFC result's windows as (n_windows, n_pairs) edge vectors."""
    from connscale._triu import matrix_to_vec

    if result.kind == "triu":
        return np.stack([np.asarray(result[i]) for i in range(len(result))])
    return np.stack([matrix_to_vec(result.to_dense(i)) for i in range(len(result))])


def _fisher_z(array: np.ndarray) -> np.ndarray:
    """Return the arctanh of the clipped correlations: one copy of ``array``."""
    bound = 1.0 - _FISHER_EPS
    out = np.clip(array, -bound, bound)
    return np.arctanh(out, out=out)


def exemplar_windows(windows: np.ndarray) -> np.ndarray:
    """Windows at local maxima of the FC variance (variance across edges).

    Parameters
    ----------
    windows : ndarray of shape (n_windows, n_edges)
        One subject's windowed FC.

    Returns
    -------
    ndarray of int
        Indices of the exemplar windows (the window of largest variance when
        the variance has no interior local maximum).

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.states import exemplar_windows
    >>> spread = np.array([1.0, 3.0, 1.0, 1.0, 4.0, 2.0])  # FC variance of each window
    >>> windows = np.random.default_rng(0).standard_normal((6, 10)) * spread[:, None]
    >>> exemplar_windows(windows)
    array([1, 4])
    """
    from scipy.signal import find_peaks

    windows = np.asarray(windows)
    rows = max(1, km.block_elements() // max(windows.shape[1], 1))
    variance = np.concatenate(
        [
            windows[start : start + rows].astype(np.float64).var(axis=1)
            for start in range(0, windows.shape[0], rows)
        ]
    )
    peaks, _ = find_peaks(variance)
    return peaks if peaks.size else np.array([int(np.argmax(variance))])


def _device_copy(array: np.ndarray, device: torch.device) -> tuple[torch.Tensor, bool]:
    array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        # torch warns on read-only memory (a memory-mapped file): copy it once, owned.
        return torch.from_numpy(array.copy()).to(device), True
    tensor = torch.from_numpy(array)
    if device.type == "cpu":
        return tensor, False
    return tensor.to(device), True


def _best_of(
    prepared: km.Prepared,
    k: int,
    n_init: int,
    rng,
    *,
    max_iter: int,
    tol: float,
    progress: tqdm | None = None,
) -> km.LloydResult:
    best = None
    for _ in range(n_init):
        seeds = km.kmeans_plusplus(prepared, k, km.seed_generator(rng, prepared.x.device))
        result = _run(prepared, seeds, max_iter=max_iter, tol=tol, progress=progress)
        if best is None or result.inertia < best.inertia:
            best = result
    return best


def _run(
    prepared: km.Prepared,
    centres: torch.Tensor,
    *,
    max_iter: int,
    tol: float,
    progress: tqdm | None,
) -> km.LloydResult:
    """Run one Lloyd run, counted in ``progress``.

    ``progress`` is a bar over runs that shows the run's iterations as they
    are read by the host.
    """
    if progress is None:
        return _logged(km.lloyd(prepared, centres, max_iter=max_iter, tol=tol))

    def show(n_iter: int) -> None:
        progress.set_postfix(iteration=n_iter, refresh=False)
        progress.update(0)  # redrawn at tqdm's own pace (mininterval)

    result = km.lloyd(prepared, centres, max_iter=max_iter, tol=tol, progress=show)
    progress.set_postfix(iteration=result.n_iter, inertia=f"{result.inertia:.6g}", refresh=False)
    progress.update()
    return _logged(result)


def _logged(result: km.LloydResult) -> km.LloydResult:
    if result.confirmed is not None:
        logger.info(
            "%s assignment: %d rows confirmed in float32 over %d passes",
            result.coarse,
            result.confirmed,
            result.coarse_passes,
        )
    return result


def _tolerance(x: torch.Tensor, tol: float) -> float:
    """scikit-learn's absolute tolerance: tol times the mean variance of the columns."""
    if tol == 0:
        return 0.0
    mean = km._column_means(x)
    total = 0.0
    for start, stop in km._blocks(*x.shape):
        total += float(((x[start:stop].to(torch.float64) - mean) ** 2).sum())
    return total / x.numel() * tol


#: What to do when the states do not fit (for messages).
_MEMORY_HINT = (
    "Raise memory_limit, or cluster fewer windows (a longer step) or fewer edges (a smaller atlas)."
)

#: Bytes per value of a block of the blocked passes: float64 temporaries
#: (a copy, a difference, its square) or a median's gathered and sorted copies.
_BLOCK_BYTES_PER_ELEMENT = 40


def _plan_memory(
    sizes: np.ndarray,
    n_edges: int,
    itemsize: int,
    *,
    n_states: int,
    n_exemplars: int,
    metric: str,
    fisher_z: bool,
    planner: MemoryPlanner,
) -> int:
    """Count what :meth:`DFCStates.fit` allocates into ``planner``.

    ``planner`` is the fit's, on its device; everything is counted before any
    of it is allocated. Returns the values per block of its blocked passes.

    Counted: the pooled copy of the subjects' windows and their Fisher z,
    the working copy the k-means reads (with, on CUDA, its aligned and
    coarse int8/float16 copies), the exemplar windows, the per-window
    labels and distances, the float64 centres of one convergence check's
    iterations, and at least one row of windows per block.

    Raises
    ------
    MemoryLimitError
        Naming what does not fit, the budget and what to change.
    """
    n = int(np.sum(sizes))
    window = n_edges * itemsize
    device = planner.device
    planner.reserve_host((int(len(sizes) > 1) + int(fisher_z)) * n * window)
    copies = 1  # the k-means' working copy (on the CPU, a clone of the pooled one)
    if device.type == "cuda" and metric != "l1":
        copies += 1 + 2 / itemsize  # the aligned copy, a float16 (or int8) copy
    planner.reserve_device(int(copies * n * window) + n_exemplars * window)
    trials = 2 + int(np.log(max(n_states, 1)))
    planner.reserve_device(8 * n * (6 + 2 * trials))
    planner.reserve_device(8 * n_states * n_edges * (km._CHECK_EVERY + 8))
    what = f"DFC states of {n} windows x {n_edges} edges"
    planner.require(0, what, on="host")
    planner.require(0, what)
    rows = planner.fit(
        _BLOCK_BYTES_PER_ELEMENT * n_edges,
        f"DFC states of {n} windows x {n_edges} edges (with one window per block)",
    )
    return min(rows * n_edges, km._BLOCK_ELEMENTS)


def _cluster(
    x: torch.Tensor,
    owned: bool,
    offsets: np.ndarray,
    arrays,
    *,
    n_states: int,
    metric: str,
    exemplars: bool,
    n_init: int,
    max_iter: int,
    tol: float,
    rng,
    verbose: int = 0,
):
    """Cluster all windows by k-means, optionally seeded from the exemplars'.

    k-means of all windows (optionally seeded from the exemplars'): the
    result and the Prepared data it lives in. With ``verbose``, a progress
    bar over the k-means runs (the restarts, and the final run of all
    windows after the exemplars').
    """
    tol_abs = _tolerance(x, tol)
    if exemplars:
        chosen = np.concatenate([offsets[i] + exemplar_windows(a) for i, a in enumerate(arrays)])
        if chosen.size < n_states:
            warnings.warn(
                f"Only {chosen.size} exemplar windows for {n_states} states; clustering all "
                "windows from k-means++ seeds instead.",
                RuntimeWarning,
                stacklevel=user_stacklevel(),
            )
            exemplars = False
    bar = tqdm(
        total=n_init + int(exemplars),
        desc="DFC states",
        unit="run",
        disable=not verbose,
        leave=False,
    )
    progress = bar if verbose else None
    with bar:
        if exemplars:
            index = torch.as_tensor(chosen, device=x.device)
            stage = km.Prepared(x[index], metric, owned=True)
            first = _best_of(
                stage, n_states, n_init, rng, max_iter=max_iter, tol=tol_abs, progress=progress
            )
            logger.info("exemplars: %d windows, inertia %.6g", chosen.size, first.inertia)
            prepared = km.Prepared(x, metric, owned=owned)
            init = prepared.to_prepared(stage.from_prepared(first.centres))
            return _run(prepared, init, max_iter=max_iter, tol=tol_abs, progress=progress), prepared
        prepared = km.Prepared(x, metric, owned=owned)
        best = _best_of(
            prepared, n_states, n_init, rng, max_iter=max_iter, tol=tol_abs, progress=progress
        )
        return best, prepared


@fill_doc
class DFCStates(BaseEstimator):
    """Recurring connectivity states of a cohort's windowed FC (Allen et al. 2014).

    Parameters
    ----------
    n_states : int, default=5
        k, the number of states.
    metric : {'l1', 'correlation', 'euclidean'}, default='l1'
        Distance between windows: city block (centres are medians, as
        Allen's), 1 − Pearson r between edge vectors, or squared Euclidean
        (centres are means; as :class:`sklearn.cluster.KMeans`).
    exemplars : bool, default=True
        Allen's two-stage scheme: cluster the windows at local maxima of
        each subject's FC variance first, and start the clustering of all
        windows from those centres.
    n_init : int, default=10
        k-means++ restarts (of the exemplar stage with ``exemplars``); the
        run of lowest inertia is kept.
    max_iter : int, default=300
        Most Lloyd iterations per run.
    tol : float, default=1e-4
        Stop when the squared shift of the centres is at most ``tol`` times
        the mean variance of the edges (as scikit-learn); iterations stop
        anyway once no label changes.
    fisher_z : bool, default=False
        Cluster arctanh of the correlations (clipped to ±(1 − 1e-7)).
    %(random_state)s
    %(device)s
    memory_limit : int, str or None, default=None
        Most memory :meth:`fit` may use (the pooled windows, the k-means'
        copies, its blocks of float64 temporaries), in bytes or as a string
        such as ``'8GB'``; a limit too small for the windows fails up front
        with :class:`connscale.MemoryLimitError` naming what is needed. None
        uses up to 80%% of what is free. A :class:`connscale._compute.MemoryPlanner`
        counts the fit into a task's budget.
    %(verbose)s
        The bar counts k-means runs (``n_init`` restarts, and the run of all
        windows with ``exemplars``) and shows the Lloyd iteration of the
        current run.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_states, n_edges)
        The states: for ``'euclidean'`` the mean window, for ``'l1'`` the
        component-wise median, for ``'correlation'`` the mean of the windows
        after each is centred and scaled to unit norm (MATLAB's convention).
    state_means_ : ndarray of shape (n_states, n_edges)
        Mean window of each state in the input's units, whatever the metric.
    labels_ : list of ndarray of shape (n_windows,)
        Each subject's state sequence.
    inertia_ : float
        Sum of the windows' distances to their state.
    n_iter_ : int
        Lloyd iterations of the final run.
    fraction_time_, mean_dwell_time_ : ndarray of shape (n_subjects, n_states)
        Dwell times in windows.
    n_transitions_ : ndarray of shape (n_subjects,)
    transition_matrix_ : ndarray of shape (n_subjects, n_states, n_states)
        Transition probabilities (rows: from).
    n_features_in_ : int
        Edges per window.

    Examples
    --------
    >>> from connscale.datasets import simulate_states
    >>> from connscale import dynamic_correlation
    >>> cohort = simulate_states(2, 6, 150, random_state=0)
    >>> windows = [dynamic_correlation(ts, 30, 5, device="cpu") for ts in cohort.timeseries]
    >>> states = DFCStates(3, metric="euclidean", n_init=2, random_state=0, device="cpu")
    >>> states = states.fit(windows)
    >>> states.cluster_centers_.shape, len(states.labels_)
    ((3, 15), 2)
    """

    _parameter_constraints = _PARAMETER_CONSTRAINTS

    def __init__(
        self,
        n_states: int = 5,
        *,
        metric: str = "l1",
        exemplars: bool = True,
        n_init: int = 10,
        max_iter: int = 300,
        tol: float = 1e-4,
        fisher_z: bool = False,
        random_state=None,
        device: str = "auto",
        memory_limit=None,
        verbose: int = 0,
    ) -> None:
        self.n_states = n_states
        self.metric = metric
        self.exemplars = exemplars
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.fisher_z = fisher_z
        self.random_state = random_state
        self.device = device
        self.memory_limit = memory_limit
        self.verbose = verbose

    def fit(self, windows, y=None):
        """Cluster the windows of every subject into ``n_states`` states.

        Parameters
        ----------
        windows : list of DynamicConnectivity or array-like of shape (n_windows, n_edges)
            One item per subject: a result of
            :func:`connscale.dynamic_correlation` or its edge vectors. A
            single 2-D array is one subject.
        y : None
            Ignored.

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> windows = [rng.standard_normal((20, 6)) for _ in range(3)]  # 3 subjects
        >>> states = DFCStates(2, n_init=2, random_state=0, device="cpu")
        >>> states.fit(windows).cluster_centers_.shape
        (2, 6)
        """
        del y
        validate_estimator_params(self)
        arrays, _ = _subject_windows(windows)
        sizes = np.array([a.shape[0] for a in arrays])
        n_total = int(sizes.sum())
        if n_total < self.n_states:
            raise ValueError(
                f"n_states={self.n_states} needs at least as many windows; got {n_total}."
            )
        device = resolve_device(self.device)
        planner = planner_for(device, self.memory_limit, hint=_MEMORY_HINT)
        with planner.transient():
            elements = _plan_memory(
                sizes,
                arrays[0].shape[1],
                arrays[0].dtype.itemsize,
                n_states=self.n_states,
                n_exemplars=int(np.sum(sizes // 2 + 1)) if self.exemplars else 0,
                metric=self.metric,
                fisher_z=self.fisher_z,
                planner=planner,
            )
            with km.limited_blocks(elements), planning(planner):
                return self._fit(arrays, sizes, device)

    def _fit(self, arrays: list[np.ndarray], sizes: np.ndarray, device: torch.device):
        """:meth:`fit` once its memory is planned (in its blocks' context)."""
        if self.fisher_z:
            arrays = [_fisher_z(a) for a in arrays]
        rng = check_random_state(self.random_state)
        data = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
        x, owned = _device_copy(data, device)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        with torch.no_grad():
            result, prepared = _cluster(
                x,
                owned,
                offsets,
                arrays,
                n_states=self.n_states,
                metric=self.metric,
                exemplars=self.exemplars,
                n_init=self.n_init,
                max_iter=self.max_iter,
                tol=float(self.tol),
                rng=rng,
                verbose=self.verbose,
            )
            centres = prepared.from_prepared(result.centres)
        labels = result.labels.cpu().numpy()
        self.cluster_centers_ = centres.cpu().numpy()
        self.state_means_ = _state_means(data, labels, self.n_states)
        self.labels_ = np.split(labels, np.cumsum(sizes)[:-1])
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.n_features_in_ = int(data.shape[1])
        with skip_nested_validation():
            features = self.state_features()
        k = self.n_states
        self.fraction_time_ = features.X[:, :k]
        self.mean_dwell_time_ = features.X[:, k : 2 * k]
        self.n_transitions_ = features.X[:, 2 * k].astype(np.int64)
        self.transition_matrix_ = features.X[:, 2 * k + 1 :].reshape(-1, k, k)
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "cluster_centers_")

    def predict(self, windows):
        """Return the state of every window of new subjects (the nearest state).

        Parameters
        ----------
        windows : list of DynamicConnectivity or array-like, or one of them
            As for :meth:`fit`.

        Returns
        -------
        list of ndarray of shape (n_windows,), or one such array when one
        subject was given.

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> windows = [rng.standard_normal((20, 6)) for _ in range(3)]  # 3 subjects
        >>> states = DFCStates(2, n_init=2, random_state=0, device="cpu")
        >>> states.fit(windows).predict(rng.standard_normal((5, 6))).shape
        (5,)
        """
        check_is_fitted(self)
        arrays, single = _subject_windows(windows)
        if arrays[0].shape[1] != self.n_features_in_:
            raise ValueError(
                f"Windows must have {self.n_features_in_} edges as in fit; got "
                f"{arrays[0].shape[1]}."
            )
        device = resolve_device(self.device)
        sizes = np.array([a.shape[0] for a in arrays])
        planner = planner_for(device, self.memory_limit, hint=_MEMORY_HINT)
        with planner.transient():
            elements = _plan_memory(
                sizes,
                arrays[0].shape[1],
                arrays[0].dtype.itemsize,
                n_states=self.n_states,
                n_exemplars=0,
                metric=self.metric,
                fisher_z=self.fisher_z,
                planner=planner,
            )
            with km.limited_blocks(elements), planning(planner):
                labels = self._assign(arrays, device)
        out = np.split(labels, np.cumsum(sizes)[:-1])
        return out[0] if single else out

    def _assign(self, arrays: list[np.ndarray], device: torch.device) -> np.ndarray:
        """Return the nearest state of every window (:meth:`predict` once planned).

        The windows are compared in the space the states were fitted in: their
        Fisher z with ``fisher_z``.
        """
        if self.fisher_z:
            arrays = [_fisher_z(a) for a in arrays]
        data = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
        x, owned = _device_copy(data, device)
        with torch.no_grad():
            prepared = km.Prepared(x, self.metric, owned=owned)
            centres = torch.as_tensor(self.cluster_centers_, device=device)
            labels, _ = km.assign_torch(prepared, prepared.to_prepared(centres))
        return labels.cpu().numpy()

    def fit_predict(self, windows, y=None):
        """Fit, then return the training subjects' ``labels_``.

        Parameters
        ----------
        windows : list of DynamicConnectivity or array-like of shape (n_windows, n_edges)
            As for :meth:`fit`.
        y : None
            Ignored.

        Returns
        -------
        list of ndarray of shape (n_windows,)
            Each subject's state sequence.

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> windows = [rng.standard_normal((20, 6)) for _ in range(3)]  # 3 subjects
        >>> states = DFCStates(2, n_init=2, random_state=0, device="cpu")
        >>> [labels.shape for labels in states.fit_predict(windows)]
        [(20,), (20,), (20,)]
        """
        return self.fit(windows, y).labels_

    def state_features(self, labels=None, *, subjects=None) -> StateFeatures:
        """Fraction of time, mean dwell time, transitions of every subject.

        Parameters
        ----------
        labels : list of ndarray or None
            State sequences (e.g. from :meth:`predict`); None uses ``labels_``.
        subjects : list of str or None
            Row names.

        Returns
        -------
        StateFeatures
            ``X`` (n_subjects, n_features) and ``feature_names``, ready for
            :func:`connscale.cross_validate`.

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> windows = [rng.standard_normal((20, 6)) for _ in range(3)]  # 3 subjects
        >>> states = DFCStates(2, n_init=2, random_state=0, device="cpu")
        >>> features = states.fit(windows).state_features()
        >>> features.X.shape, features.feature_names[:3]
        ((3, 9), ['fraction_time_state-1', 'fraction_time_state-2', 'mean_dwell_time_state-1'])
        """
        check_is_fitted(self)
        sequences = self.labels_ if labels is None else labels
        return state_features(sequences, self.n_states, subjects=subjects)

    @validate_params({"which": [StrOptions({"centers", "means"})]})
    def state_matrices(self, *, which: str = "centers") -> np.ndarray:
        """Return the states as (n_states, N, N) symmetric matrices (NaN diagonal).

        Parameters
        ----------
        which : {'centers', 'means'}, default='centers'
            ``cluster_centers_`` or ``state_means_``.

        Returns
        -------
        ndarray of shape (n_states, N, N)
            Each state's edge vector as a symmetric matrix (N(N-1)/2 = n_edges).

        Examples
        --------
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> windows = [rng.standard_normal((20, 6)) for _ in range(3)]  # 3 subjects
        >>> states = DFCStates(2, n_init=2, random_state=0, device="cpu")
        >>> states.fit(windows).state_matrices(which="means").shape
        (2, 4, 4)
        """
        from connscale._triu import vec_to_matrix

        check_is_fitted(self)
        source = self.cluster_centers_ if which == "centers" else self.state_means_
        return np.stack([vec_to_matrix(c, diagonal=np.nan) for c in source])


def _state_means(data: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Return the mean window of each state, a block of rows at a time.

    Float64; zeros for an empty state.
    """
    sums = np.zeros((k, data.shape[1]))
    rows = max(1, km.block_elements() // max(data.shape[1], 1))
    for start in range(0, data.shape[0], rows):
        block = labels[start : start + rows]
        onehot = np.zeros((k, block.size))
        onehot[block, np.arange(block.size)] = 1.0
        sums += onehot @ data[start : start + rows].astype(np.float64)
    counts = np.bincount(labels, minlength=k)
    return sums / np.maximum(counts, 1)[:, None]


def _elbow_curve(data, ks, metric, n_init, max_iter, random_state, device):
    """Return the mean within- and between-cluster distances of each k's k-means."""
    rng = check_random_state(random_state)
    x, owned = _device_copy(data, device)
    within, between = [], []
    with torch.no_grad():
        prepared = km.Prepared(x, metric, owned=owned)
        tol_abs = _tolerance(prepared.x, 1e-4)
        for k in ks:
            result = _best_of(prepared, k, n_init, rng, max_iter=max_iter, tol=tol_abs)
            within.append(result.inertia / data.shape[0])
            centres = km.Prepared(result.centres, metric)
            pair = km._point_distances(centres, centres.x)
            between.append(float(pair.sum()) / (k * (k - 1)))
    return np.array(within), np.array(between)


@validate_params(
    {
        name: _PARAMETER_CONSTRAINTS[name]
        for name in (
            "metric",
            "exemplars",
            "n_init",
            "max_iter",
            "fisher_z",
            "random_state",
            "device",
            "memory_limit",
        )
    }
)
def elbow(
    windows,
    n_states=range(2, 11),
    *,
    metric: str = "l1",
    exemplars: bool = True,
    n_init: int = 5,
    max_iter: int = 300,
    fisher_z: bool = False,
    random_state=None,
    device: str = "auto",
    memory_limit: int | str | MemoryPlanner | None = None,
) -> dict:
    """Compute the elbow criterion for the number of states (GIFT's dFNC toolbox).

    For each k, k-means is run (on the exemplar windows with ``exemplars``,
    as GIFT does) and the ratio of the mean within-cluster distance (window
    to its centre) to the mean between-cluster distance (centre to centre)
    is recorded; the elbow is the k whose point lies farthest from the
    straight line joining the first and last points of that curve.

    Parameters
    ----------
    windows : list of DynamicConnectivity or array-like
        As for :meth:`DFCStates.fit`.
    n_states : iterable of int, default=range(2, 11)
        Values of k to try (at least 3, each >= 2).
    metric, exemplars, n_init, max_iter, fisher_z, random_state, device, memory_limit
        As for :class:`DFCStates` (the memory of the largest k's k-means).

    Returns
    -------
    dict
        ``n_states``, ``within``, ``between``, ``ratio`` (arrays, one value
        per k) and ``best`` (the elbow's k).

    Examples
    --------
    >>> import numpy as np
    >>> from connscale.states import elbow
    >>> rng = np.random.default_rng(0)
    >>> windows = [rng.standard_normal((30, 6)) for _ in range(2)]
    >>> curve = elbow(windows, range(2, 5), exemplars=False, n_init=2, random_state=0,
    ...               device="cpu")
    >>> curve["n_states"].tolist(), curve["ratio"].shape, curve["best"] in (2, 3, 4)
    ([2, 3, 4], (3,), True)
    """
    ks = [check_int(k, "n_states", minimum=2) for k in n_states]
    if len(ks) < 3:
        raise ValueError(f"'n_states' must hold at least 3 values of k; got {ks}.")
    arrays, _ = _subject_windows(windows)
    if fisher_z:
        arrays = [_fisher_z(a) for a in arrays]
    if exemplars:
        arrays = [a[exemplar_windows(a)] for a in arrays]
    data = np.concatenate(arrays)
    if data.shape[0] < max(ks):
        raise ValueError(f"k={max(ks)} needs at least {max(ks)} windows; got {data.shape[0]}.")
    device = resolve_device(device)
    planner = planner_for(device, memory_limit, hint=_MEMORY_HINT)
    with planner.transient():
        elements = _plan_memory(
            np.array([data.shape[0]]),
            data.shape[1],
            data.dtype.itemsize,
            n_states=max(ks),
            n_exemplars=0,
            metric=metric,
            fisher_z=False,  # already applied
            planner=planner,
        )
        with km.limited_blocks(elements), planning(planner):
            within, between = _elbow_curve(data, ks, metric, n_init, max_iter, random_state, device)
    ratio = within / between
    span = np.array([ks[-1] - ks[0], ratio[-1] - ratio[0]], dtype=np.float64)
    scale = np.array([ks[-1] - ks[0], max(abs(ratio[0] - ratio[-1]), 1e-12)])
    points = np.column_stack([np.array(ks) - ks[0], ratio - ratio[0]]) / scale
    direction = span / scale
    direction /= np.linalg.norm(direction)
    gap = np.abs(points[:, 0] * direction[1] - points[:, 1] * direction[0])
    return {
        "n_states": np.array(ks),
        "within": within,
        "between": between,
        "ratio": ratio,
        "best": int(ks[int(np.argmax(gap))]),
    }
