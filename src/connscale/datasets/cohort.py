"""A simulated cohort of patients and controls with a known group difference.

Every subject has ROI time series built from latent AR(1) signals:

- a private signal per region (variance 1 − λ),
- one signal per network shared by its regions (variance λ, λ drawn per
  subject in [0.1, 0.4]): background correlation within networks that
  varies across subjects, as real connectomes do;
- for patients only, one extra signal per planted edge (i, j), added to
  region i and, with the sign of ``effect_size``, to region j, with variance
  c = |effect_size| / (1 − |effect_size|): it moves the population
  correlation of (i, j) by ``effect_size`` when i and j lie in different
  networks (and by a little less inside one).

Controls and patients differ only in those edges, so a classifier that works
must find them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np
import numpy.typing as npt

from connscale._triu import matrix_to_vec, triu_index
from connscale._validation import check_int, check_random_state

__all__ = ["Cohort", "simulate_cohort"]


@dataclass
class Cohort:
    """Output of :func:`simulate_cohort`.

    Attributes
    ----------
    timeseries : list of ndarray of shape (n_timepoints, n_regions)
    subjects : list of str
        Subject labels (``"01"``, ``"02"``, ...).
    groups : list of str
        ``"patient"`` or ``"control"`` per subject.
    y : ndarray of shape (n_subjects,)
        1 for patients, 0 for controls.
    effect_edges : ndarray of shape (n_edges, 2)
        The planted region pairs (i < j).
    effect_size : float
    region_labels : list of str

    Examples
    --------
    >>> from connscale.datasets import simulate_cohort
    >>> cohort = simulate_cohort(4, 5, 60, effect_edges=[(0, 1)], random_state=0)
    >>> sorted(cohort.groups), cohort.effect_features
    (['control', 'control', 'patient', 'patient'], array([0]))
    """

    timeseries: list
    subjects: list
    groups: list
    y: np.ndarray
    effect_edges: np.ndarray
    effect_size: float
    region_labels: list

    @property
    def effect_features(self) -> np.ndarray:
        """Positions of the planted edges in the row-major upper-triangle vector."""
        n = len(self.region_labels)
        return np.asarray(triu_index(self.effect_edges[:, 0], self.effect_edges[:, 1], n))

    def participants(self) -> list:
        """Return the rows of a BIDS participants table (``participant_id``, ``group``).

        Returns
        -------
        list of dict
            One per subject.

        Examples
        --------
        >>> from connscale.datasets import simulate_cohort
        >>> cohort = simulate_cohort(4, 5, 60, random_state=0)
        >>> [row["participant_id"] for row in cohort.participants()]
        ['sub-01', 'sub-02', 'sub-03', 'sub-04']
        """
        return [
            {"participant_id": f"sub-{s}", "group": g} for s, g in zip(self.subjects, self.groups)
        ]

    def features(self) -> np.ndarray:
        """Return the Pearson correlations of every subject, row-major upper triangle.

        Returns
        -------
        ndarray of shape (n_subjects, n_regions * (n_regions - 1) / 2)
            One row per subject.

        Examples
        --------
        >>> from connscale.datasets import simulate_cohort
        >>> cohort = simulate_cohort(4, 5, 60, random_state=0)
        >>> cohort.features().shape
        (4, 10)
        """
        return np.vstack([matrix_to_vec(np.corrcoef(ts, rowvar=False)) for ts in self.timeseries])

    def write(self, out_dir: str | os.PathLike) -> dict:
        """Write ``participants.tsv`` and ``sub-<label>_timeseries.tsv`` files.

        Parameters
        ----------
        out_dir : str or path
            Created if needed.

        Returns
        -------
        dict
            ``"participants"``: its path; ``"timeseries"``: list of paths.

        Examples
        --------
        >>> import tempfile
        >>> from connscale.datasets import simulate_cohort
        >>> cohort = simulate_cohort(4, 5, 60, random_state=0)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     paths = cohort.write(tmp)
        ...     print(paths["participants"].name, paths["timeseries"][0].name)
        participants.tsv sub-01_timeseries.tsv
        """
        from connscale.io.atomic import write_text_atomic

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        rows = ["participant_id\tgroup"] + [
            f"{r['participant_id']}\t{r['group']}" for r in self.participants()
        ]
        participants = write_text_atomic(out_dir / "participants.tsv", "\n".join(rows) + "\n")
        paths = []
        header = "\t".join(self.region_labels)
        for subject, ts in zip(self.subjects, self.timeseries):
            lines = [header] + ["\t".join(f"{v:.7g}" for v in row) for row in ts]
            paths.append(
                write_text_atomic(
                    out_dir / f"sub-{subject}_timeseries.tsv", "\n".join(lines) + "\n"
                )
            )
        return {"participants": participants, "timeseries": paths}


def _ar1(
    rng: np.random.Generator, shape: tuple[int, ...], phi: float, burn_in: int = 50
) -> np.ndarray:
    """Unit-variance AR(1) noise along axis 0."""
    from scipy.signal import lfilter

    white = rng.standard_normal((shape[0] + burn_in, *shape[1:]))
    series = lfilter([np.sqrt(1.0 - phi**2)], [1.0, -phi], white, axis=0)
    return series[burn_in:]


def _choose_edges(
    effect_edges: int | npt.ArrayLike, n_regions: int, rng: np.random.Generator
) -> np.ndarray:
    if isinstance(effect_edges, Integral) and not isinstance(effect_edges, bool):
        k = check_int(
            effect_edges, "effect_edges", minimum=0, maximum=n_regions * (n_regions - 1) // 2
        )
        if 2 * k <= n_regions:  # disjoint pairs: each edge's effect is exact
            order = rng.permutation(n_regions)[: 2 * k].reshape(k, 2)
        else:
            i, j = np.triu_indices(n_regions, 1)
            pick = rng.choice(i.size, size=k, replace=False)
            order = np.column_stack([i[pick], j[pick]])
        edges = np.sort(order, axis=1)
    else:
        edges = np.asarray(effect_edges, dtype=np.int64).reshape(-1, 2)
        edges = np.sort(edges, axis=1)
        if (
            np.any(edges[:, 0] == edges[:, 1])
            or edges.min(initial=0) < 0
            or edges.max(initial=0) >= n_regions
        ):
            raise ValueError(
                f"'effect_edges' must be region pairs (i, j), i != j, in [0, {n_regions}); "
                f"got {edges.tolist()}."
            )
    order = np.lexsort((edges[:, 1], edges[:, 0]))
    return edges[order]


def simulate_cohort(
    n_subjects: int,
    n_regions: int,
    n_timepoints: int,
    *,
    effect_edges: int | npt.ArrayLike = 3,
    effect_size: float = 0.5,
    patient_fraction: float = 0.5,
    n_networks: int | None = None,
    autocorrelation: float = 0.5,
    random_state: int | np.random.Generator | None = None,
) -> Cohort:
    """Simulate ROI time series of patients and controls differing in a few edges.

    Parameters
    ----------
    n_subjects : int
        At least 4.
    n_regions : int
        At least 2.
    n_timepoints : int
        At least 3.
    effect_edges : int or array-like of shape (n_edges, 2), default=3
        How many edges differ (chosen at random, disjoint when possible), or
        which ones.
    effect_size : float, default=0.5
        Change of the population correlation of each planted edge in
        patients, in (-1, 1); 0 makes the groups identical.
    patient_fraction : float, default=0.5
        Share of patients (rounded; both groups keep at least 2 subjects).
    n_networks : int or None
        Background networks (default ``max(1, n_regions // 5)``); regions are
        assigned to them in contiguous blocks.
    autocorrelation : float, default=0.5
        AR(1) coefficient of every latent signal, in [0, 1).
    random_state : int, numpy.random.Generator or None, default=None

    Returns
    -------
    Cohort

    Examples
    --------
    >>> cohort = simulate_cohort(20, 6, 100, effect_edges=[(0, 1)], random_state=0)
    >>> len(cohort.timeseries), cohort.timeseries[0].shape, cohort.effect_edges.tolist()
    (20, (100, 6), [[0, 1]])
    """
    n_subjects = check_int(n_subjects, "n_subjects", minimum=4)
    n_regions = check_int(n_regions, "n_regions", minimum=2)
    n_timepoints = check_int(n_timepoints, "n_timepoints", minimum=3)
    effect_size = float(effect_size)
    if not -1.0 < effect_size < 1.0:
        raise ValueError(f"'effect_size' must lie in (-1, 1); got {effect_size}.")
    if not 0.0 < patient_fraction < 1.0:
        raise ValueError(f"'patient_fraction' must lie in (0, 1); got {patient_fraction}.")
    if not 0.0 <= autocorrelation < 1.0:
        raise ValueError(f"'autocorrelation' must lie in [0, 1); got {autocorrelation}.")
    n_networks = (
        max(1, n_regions // 5)
        if n_networks is None
        else check_int(n_networks, "n_networks", minimum=1, maximum=n_regions)
    )
    rng = check_random_state(random_state)
    edges = _choose_edges(effect_edges, n_regions, rng)

    n_patients = min(max(round(patient_fraction * n_subjects), 2), n_subjects - 2)
    y = np.zeros(n_subjects, dtype=np.int64)
    y[rng.permutation(n_subjects)[:n_patients]] = 1
    network = np.arange(n_regions) * n_networks // n_regions
    extra = abs(effect_size) / (1.0 - abs(effect_size))
    sign = 1.0 if effect_size >= 0 else -1.0

    series = []
    for subject in range(n_subjects):
        lam = rng.uniform(0.1, 0.4)
        private = _ar1(rng, (n_timepoints, n_regions), autocorrelation)
        shared = _ar1(rng, (n_timepoints, n_networks), autocorrelation)
        x = np.sqrt(1.0 - lam) * private + np.sqrt(lam) * shared[:, network]
        if y[subject] == 1 and edges.shape[0] and effect_size != 0.0:
            planted = np.sqrt(extra) * _ar1(rng, (n_timepoints, edges.shape[0]), autocorrelation)
            for e, (i, j) in enumerate(edges):
                x[:, i] += planted[:, e]
                x[:, j] += sign * planted[:, e]
        series.append(x)
    width = len(str(n_subjects))
    return Cohort(
        timeseries=series,
        subjects=[f"{k + 1:0{max(2, width)}d}" for k in range(n_subjects)],
        groups=["patient" if label else "control" for label in y],
        y=y,
        effect_edges=edges,
        effect_size=effect_size,
        region_labels=[f"region_{k:02d}" for k in range(n_regions)],
    )
