"""Group level: recurring DFC states of the cohort (Allen et al. 2014).

Every run's sliding-window correlations (the participant level's
``_dfc.h5``, read through :func:`connscale.io.dfc.read_dfc_windows`) are
pooled and clustered into ``n_states`` states by
:class:`connscale.states.DFCStates`; each run is then described by its state
sequence and its features (fraction of time, mean dwell time in windows,
number of transitions, transition probabilities). Files, with
``<e> = seg-<atlas>_meas-PearsonCorrelation`` and ``<s> = desc-<strategy>``::

    group/<e>_stat-state<j>_<s>_relmat.tsv / .json   state j's centre (.h5 above 1000 regions)
    group/<e>_<s>_dfcstates.json                    parameters, fractions, mean transitions
    sub-*/[ses-*/]func/<source>_<e>_<s>_dfcstates.tsv / .json   the run's state per window
    sub-*/[ses-*/]func/<source>_<e>_<s>_features.tsv / .json    the run's state features

The group files form one :class:`~connscale.io.publish.OutputSet`
(``group/<e>_<s>_manifest.json``), each run's two files another beside its
DFC (``<source>_<e>_<s>_manifest.json``). Their fingerprints hold the DFC
files and the clustering parameters: a re-run with the same ones resumes
(reads the published files back, no clustering); one with other parameters
is refused unless ``overwrite``; changed DFC files are clustered again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import bids_name, bids_prefix
from connscale.io.publish import OutputSet

__all__ = ["GroupStates", "StatesPlan", "compute_states", "plan_states"]

logger = logging.getLogger("connscale")

_MEASURE = "PearsonCorrelation"
#: State centres are written as TSV up to this many regions, as HDF5 above.
TSV_MAX_NODES = 1000
#: Fixed settings of the clustering (DFCStates' defaults), recorded in the fingerprints.
_FIXED = {"exemplars": True, "n_init": 10, "max_iter": 300, "tol": 1e-4, "fisher_z": False}
_CENTROID = {
    "l1": "component-wise median",
    "euclidean": "mean",
    "correlation": "mean of the windows centred and scaled to unit norm",
}


@dataclass
class StatesPlan:
    """What :func:`compute_states` will read and write (fingerprints made, nothing read)."""

    output: Path
    runs: list[dict]
    dfc: list[Path]
    entities: dict
    parameters: dict
    fingerprint: dict
    run_fingerprints: list[dict]


@dataclass
class GroupStates:
    """The cohort's states, as published (read back from the files).

    Attributes
    ----------
    n_states : int
    metric : str
    names : list of str
        Region names (the DFC stores' labels).
    centres : ndarray of shape (n_states, n_pairs)
        The state centres, row-major strictly-upper triangles.
    fractions : ndarray of shape (n_states,)
        Share of all windows in each state.
    feature_names : list of str
    run_features : ndarray of shape (n_runs, n_features)
        One row per run, in the order of the plan's runs.
    sequences : list of dict
        Per run: ``onset`` (first source volume of each window), ``onset_s``
        and ``states`` (from 0), as :func:`connscale.io.states.read_state_sequence`.
    summary : dict
        The group ``_dfcstates.json``.
    outputs : list of Path
        Every published file.
    resumed : bool
        True when every file was already published with the same fingerprint.
    """

    n_states: int
    metric: str
    names: list
    centres: np.ndarray
    fractions: np.ndarray
    feature_names: list
    run_features: np.ndarray
    sequences: list
    summary: dict
    outputs: list
    resumed: bool

    @property
    def transition_matrix(self) -> np.ndarray:
        """Mean over runs of the runs' transition probabilities, (n_states, n_states)."""
        k = self.n_states
        return self.run_features[:, 2 * k + 1 :].mean(axis=0).reshape(k, k)


def _run_entities(run: dict) -> dict:
    return {k: v for k, v in run.items() if k not in ("path", "suffix", "extension")}


def dfc_path(run: dict) -> Path:
    """Return the path of the participant level's ``_dfc.h5`` beside a run's ``_relmat.tsv``."""
    return run["path"].parent / bids_name(_run_entities(run), suffix="dfc", extension=".h5")


def _prefix(entities: dict, *, group: bool = False) -> str:
    return bids_prefix(entities, require_subject=not group)


def plan_states(
    output,
    runs: list[dict],
    *,
    required: bool | None,
    n_states: int,
    metric: str,
    random_state: int | None,
) -> StatesPlan | None:
    """Decide whether the cohort's states are computed, and fingerprint them.

    Parameters
    ----------
    output : path
        The participant-level output folder.
    runs : list of dict
        :func:`connscale.bidsapp.group.find_participant_outputs`.
    required : bool or None
        True: every run must have its DFC (``--measures states``); None:
        states when every run has its DFC, none (with a warning when some
        have) otherwise; False: no states.
    n_states, metric, random_state
        Of :class:`connscale.states.DFCStates`.

    Returns
    -------
    StatesPlan or None
    """
    from connscale.io.fingerprint import run_fingerprint

    if required is False:
        return None
    output = Path(output)
    paths = [dfc_path(r) for r in runs]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        listed = ", ".join(p.name for p in missing[:3]) + (", ..." if len(missing) > 3 else "")
        if required:
            raise ValueError(
                f"DFC states need every run's DFC; {len(missing)} of {len(paths)} runs have "
                f"none ({listed}). Run the participant level with --measures dfc (or states) "
                "and --window-length."
            )
        if len(missing) < len(paths):
            logger.warning(
                "group: %d of %d runs have no DFC (%s); no DFC states (give --measures "
                "states to require them)",
                len(missing),
                len(paths),
                listed,
            )
        return None
    entities = {"seg": runs[0]["seg"], "meas": _MEASURE, "desc": runs[0].get("desc")}
    parameters = {
        "n_states": int(n_states),
        "metric": metric,
        "random_state": random_state,
        **_FIXED,
    }
    fingerprint = run_fingerprint(paths, parameters)
    cohort = {"cohort": fingerprint["digest"]}
    return StatesPlan(
        output=output,
        runs=runs,
        dfc=paths,
        entities=entities,
        parameters=parameters,
        fingerprint=fingerprint,
        run_fingerprints=[run_fingerprint([p, cohort], parameters) for p in paths],
    )


def _run_set(plan: StatesPlan, i: int, overwrite: bool) -> OutputSet:
    run = plan.runs[i]
    entities = {**_run_entities(run), "meas": _MEASURE}
    return OutputSet(
        run["path"].parent,
        _prefix(entities),
        command="bids group",
        fingerprint=plan.run_fingerprints[i],
        overwrite=overwrite,
    )


def _names(plan: StatesPlan, i: int) -> tuple[str, str]:
    entities = {**_run_entities(plan.runs[i]), "meas": _MEASURE}
    return (
        bids_name(entities, suffix="dfcstates", extension=".tsv"),
        bids_name(entities, suffix="features", extension=".tsv"),
    )


def _centre_name(plan: StatesPlan, j: int, n_regions: int) -> str:
    extension = ".tsv" if n_regions <= TSV_MAX_NODES else ".h5"
    return bids_name(
        {**plan.entities, "stat": f"state{j + 1}"},
        suffix="relmat",
        extension=extension,
        require_subject=False,
    )


def _summary_name(plan: StatesPlan) -> str:
    return bids_name(plan.entities, suffix="dfcstates", extension=".json", require_subject=False)


def compute_states(
    plan: StatesPlan, *, device: str = "cpu", overwrite: bool = False
) -> GroupStates:
    """Cluster the cohort's DFC into states and publish them (or resume).

    Parameters
    ----------
    plan : StatesPlan
    device : str, default='cpu'
        Where the k-means runs.
    overwrite : bool, default=False
        Replace states published with other parameters.

    Returns
    -------
    GroupStates

    Raises
    ------
    FileExistsError
        States published with other parameters, without ``overwrite``;
        nothing is read or written then.
    """
    group = plan.output / "group"
    with OutputSet(
        group,
        _prefix(plan.entities, group=True),
        command="bids group",
        fingerprint=plan.fingerprint,
        overwrite=overwrite,
    ) as group_set:
        done = group_set.complete()
        for i in range(len(plan.runs)):  # refuse other parameters before any work
            with _run_set(plan, i, overwrite) as run_set:
                done = run_set.complete() and done
        if not done:
            _fit_and_publish(plan, group_set, device=device, overwrite=overwrite)
        return _read_back(plan, resumed=done)


def _previous_files(out: OutputSet) -> set[str]:
    from connscale.io.publish import IncompleteOutputError, read_manifest

    try:
        return set(read_manifest(out.out_dir, out.prefix, verify="none")["files"])
    except IncompleteOutputError:
        return set()


def _commit_replacing(out: OutputSet) -> None:
    """Publish the set, deleting the files of the set it replaces that it does not hold.

    Those files (the states beyond a smaller k) go with the old set.
    """
    previous = _previous_files(out) - set(out.names)
    out.commit()
    for name in previous:
        (out.out_dir / name).unlink(missing_ok=True)


def _read_windows(plan: StatesPlan) -> tuple[list[np.ndarray], list[dict]]:
    from connscale.io.dfc import read_dfc_windows

    windows, infos = [], []
    for path in plan.dfc:
        edges, info = read_dfc_windows(path)
        windows.append(edges)
        infos.append(info)
    first = infos[0]
    for path, info in zip(plan.dfc, infos):
        if info["labels"] != first["labels"] or info["n_series"] != first["n_series"]:
            raise ValueError(
                f"DFC states need the same regions in every run; {path.name} has "
                f"{info['n_series']} ({(info['labels'] or [])[:4]}...), {plan.dfc[0].name} "
                f"has {first['n_series']} ({(first['labels'] or [])[:4]}...)."
            )
        if (info["window_length"], info["step"]) != (first["window_length"], first["step"]):
            raise ValueError(
                "DFC states need one window length and step in every run; "
                f"{path.name} has {info['window_length']}/{info['step']}, "
                f"{plan.dfc[0].name} {first['window_length']}/{first['step']}."
            )
    return windows, infos


def _fit_and_publish(plan: StatesPlan, group_set: OutputSet, *, device: str, overwrite: bool):
    from connscale.states import DFCStates

    windows, infos = _read_windows(plan)
    n_total = sum(w.shape[0] for w in windows)
    if n_total < plan.parameters["n_states"]:
        raise ValueError(
            f"--states {plan.parameters['n_states']} needs at least as many windows; the "
            f"{len(windows)} runs have {n_total}."
        )
    settings = {k: v for k, v in plan.parameters.items() if k != "n_states"}
    estimator = DFCStates(plan.parameters["n_states"], device=device, **settings)
    estimator.fit(windows)
    labels = np.concatenate(estimator.labels_)
    k = plan.parameters["n_states"]
    fractions = np.bincount(labels, minlength=k) / labels.size
    sources = [str(p.relative_to(plan.output)) for p in plan.dfc]
    features = estimator.state_features(subjects=[_names(plan, i)[0] for i in range(len(windows))])
    for i, info in enumerate(infos):
        _publish_run(plan, i, info, estimator, features, overwrite=overwrite)
    names = infos[0]["labels"] or [str(i) for i in range(infos[0]["n_series"])]
    state_files = _write_centres(plan, group_set, estimator, names, fractions, sources)
    summary = {
        "Description": "Recurring DFC states of the cohort (k-means of every run's "
        "sliding-window correlations, Allen et al. 2014)",
        "NumberOfStates": k,
        "Metric": plan.parameters["metric"],
        "Centroid": _CENTROID[plan.parameters["metric"]],
        "Exemplars": plan.parameters["exemplars"],
        "NumberOfInitializations": plan.parameters["n_init"],
        "MaxIterations": plan.parameters["max_iter"],
        "RandomState": plan.parameters["random_state"],
        "Inertia": float(estimator.inertia_),
        "NumberOfIterations": int(estimator.n_iter_),
        "FractionOfWindows": fractions.tolist(),
        "MeanTransitionMatrix": estimator.transition_matrix_.mean(axis=0).tolist(),
        "NumberOfRuns": len(windows),
        "NumberOfWindows": int(labels.size),
        "WindowLength": infos[0]["window_length"],
        "WindowStep": infos[0]["step"],
        "NodeNames": list(names),
        "StateFiles": state_files,
        "Sources": sources,
        "SoftwareName": "connscale",
        "SoftwareVersion": __version__,
    }
    write_json_atomic(group_set.path(_summary_name(plan)), summary)
    _commit_replacing(group_set)


def _publish_run(plan, i, info, estimator, features, *, overwrite: bool) -> None:
    from connscale.io.states import write_state_features, write_state_sequence

    k = plan.parameters["n_states"]
    sequence_name, features_name = _names(plan, i)
    source = str(plan.dfc[i].relative_to(plan.output))
    summary = f"group/{_summary_name(plan)}"
    with _run_set(plan, i, overwrite) as run_set:
        t_r = info.get("repetition_time")
        onsets = info.get("window_onset_volumes", info["window_starts"])
        write_state_sequence(
            run_set.path(sequence_name), starts=onsets, states=estimator.labels_[i], t_r=t_r
        )
        write_json_atomic(
            run_set.path(sequence_name[:-4] + ".json"),
            {
                "window": {"Description": "Window number, from 0"},
                "onset": {"Description": "First source volume of the window (from 0)"},
                "onset_s": {"Description": "Its onset in seconds", "Units": "s"},
                "state": {
                    "Description": f"The window's DFC state (1 to {k}), the nearest of the "
                    f"cohort's state centres ({plan.parameters['metric']} distance)",
                    "Levels": {str(j + 1): f"state {j + 1}" for j in range(k)},
                },
                "RepetitionTime": t_r,
                "Sources": [source, summary],
                "SoftwareName": "connscale",
                "SoftwareVersion": __version__,
            },
        )
        write_state_features(
            run_set.path(features_name),
            subjects=[sequence_name[: -len("_dfcstates.tsv")]],
            X=features.X[i : i + 1],
            names=features.feature_names,
            digits=12,
            id_column="source",
        )
        write_json_atomic(
            run_set.path(features_name[:-4] + ".json"),
            {
                "Description": "DFC state features of the run: fraction of windows in each "
                "state, mean dwell time (in windows) in each state, number of state changes "
                "and transition probabilities (row: from, column: to)",
                "source": {"Description": "The run (its source entities)"},
                "Units": {"mean_dwell_time": "windows", "fraction_time": "fraction"},
                "NumberOfStates": k,
                "Sources": [source, summary],
                "SoftwareName": "connscale",
                "SoftwareVersion": __version__,
            },
        )
        run_set.commit()


def _write_centres(plan, group_set, estimator, names, fractions, sources) -> list[str]:
    from connscale.io.hdf5 import write_relmat_h5
    from connscale.io.relmat import sidecar, write_relmat_tsv

    metric = plan.parameters["metric"]
    n = len(names)
    matrices = estimator.state_matrices() if n <= TSV_MAX_NODES else None
    written = []
    for j, centre in enumerate(estimator.cluster_centers_):
        name = _centre_name(plan, j, n)
        if name.endswith(".tsv"):
            write_relmat_tsv(group_set.path(name), matrices[j], names, fmt="%.8g")
            kind = "dense"
        else:
            write_relmat_h5(group_set.path(name), np.asarray(centre, dtype=np.float64))
            kind = "triu"
        meta = sidecar(kind, n, nodes="regions", dtype="float64")
        meta.update(
            {
                "ValidDiagonal": False,
                "MeasureDescription": (
                    f"DFC state {j + 1} of {len(fractions)}: the {_CENTROID[metric]} of the "
                    "sliding-window Pearson correlations of every run assigned to it by "
                    f"k-means ({metric} distance)"
                ),
                "NodeNames": list(names),
                "State": j + 1,
                "FractionOfWindows": float(fractions[j]),
                "Sources": sources,
            }
        )
        stem = name.rsplit(".", 1)[0]
        write_json_atomic(group_set.path(stem + ".json"), meta)
        written.append(name)
    return written


def _read_back(plan: StatesPlan, *, resumed: bool) -> GroupStates:
    import json

    from connscale._triu import matrix_to_vec
    from connscale.io.hdf5 import load_relmat
    from connscale.io.relmat import read_relmat_tsv
    from connscale.io.states import read_state_features, read_state_sequence

    group = plan.output / "group"
    summary_path = group / _summary_name(plan)
    summary = json.loads(summary_path.read_text())
    outputs = [summary_path]
    centres = []
    for name in summary["StateFiles"]:
        path = group / name
        if name.endswith(".tsv"):
            centres.append(matrix_to_vec(read_relmat_tsv(path)[0]))
        else:
            centres.append(np.asarray(load_relmat(path)[0]))
        outputs += [path, path.with_suffix(".json")]
    sequences, rows, feature_names = [], [], None
    for i, run in enumerate(plan.runs):
        sequence_name, features_name = _names(plan, i)
        folder = run["path"].parent
        sequences.append(read_state_sequence(folder / sequence_name))
        _, X, feature_names = read_state_features(folder / features_name)
        rows.append(X[0])
        outputs += [
            folder / n for s in (sequence_name, features_name) for n in (s, s[:-4] + ".json")
        ]
    return GroupStates(
        n_states=int(summary["NumberOfStates"]),
        metric=summary["Metric"],
        names=list(summary["NodeNames"]),
        centres=np.stack(centres),
        fractions=np.asarray(summary["FractionOfWindows"]),
        feature_names=list(feature_names),
        run_features=np.stack(rows),
        sequences=sequences,
        summary=summary,
        outputs=outputs,
        resumed=resumed,
    )
