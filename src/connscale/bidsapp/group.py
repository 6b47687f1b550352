"""Group level: the participant outputs read back, averaged, tabulated and classified.

Reads every published run set of one atlas and strategy (each checked
against its manifest, so a half-written run is refused), aligns the regions
by name, and writes into ``<output>/group/``::

    seg-<atlas>_meas-PearsonCorrelation_stat-mean_desc-<strategy>_relmat.tsv / .json
    seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_features.tsv
    seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_classification.json  (with a target)
    seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_report.html

The group mean is the mean of the Fisher-z transformed correlations, taken
back with tanh. The feature table has one row per participant (the mean of
its runs' Fisher-z edges) and one column per edge ``<name_i>|<name_j>``, i < j
in row-major order. When the runs have DFC (or states are asked for), the
cohort's DFC states are computed (:mod:`connscale.bidsapp.group_states`) and
each participant's state features (the mean over its runs) are further
columns of the table. When every run has voxel maps (the participant measure
``maps``), the cohort's mean maps are written
(:mod:`connscale.bidsapp.group_maps`) and drawn in the report; with ``maps``
in ``features`` each participant's maps (values inside the runs' common mask,
one column per voxel and map: large) are further columns. With
``participants.tsv`` and a target column,
:func:`connscale.classify.cross_validate` runs on it (one sample per
participant, so runs of one participant never sit on both sides of a fold).

What is left out is said, not dropped: runs the participant level refused
(too few degrees of freedom, constant BOLD) or failed, as its logs
(``logs/participant_*_report.json``, one per call; a run's newest record)
record them for this atlas and strategy, and measures that failed in a
published run (the ``failed_measures`` of its set's manifest) are listed in
:attr:`GroupResult.left_out`, in the group report's warnings and in
``logs/group_report.json``.

These files are one :class:`~connscale.io.publish.OutputSet`
(``seg-<atlas>_desc-<strategy>_manifest.json``), fingerprinted by the
participant outputs, the states, the maps and ``participants.tsv`` with the
classification parameters and the feature kinds: a re-run with the same ones resumes, one with
other parameters is refused unless ``overwrite``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from connscale._choices import GROUP_FEATURES
from connscale._params import entry
from connscale._version import __version__
from connscale.bidsapp.config import GroupConfig
from connscale.bidsapp.outputs import MEASURE
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import (
    bids_name,
    bids_prefix,
    parse_bids_name,
    read_participants,
    strategy_desc,
)
from connscale.io.publish import read_manifest

__all__ = [
    "GroupResult",
    "find_left_out",
    "find_participant_outputs",
    "left_out_lines",
    "run_group",
]

if TYPE_CHECKING:
    from connscale.bidsapp.group_maps import GroupMaps
    from connscale.bidsapp.group_states import GroupStates

logger = logging.getLogger("connscale")
_FEATURE_LABELS = {
    "edges": "Fisher-z edges",
    "dfc": "DFC summaries (each edge's mean and standard deviation of Fisher z over windows)",
    "states": "DFC state features",
    "maps": "voxel maps in the common mask",
    "alff": "ALFF and fALFF maps in the common mask",
    "reho": "ReHo maps in the common mask",
}


@dataclass
class GroupResult:
    """What :func:`run_group` wrote and computed."""

    atlas_name: str
    strategy: str
    runs: list[dict]
    labels: list[str]
    mean: np.ndarray
    subjects: list[str]
    features: np.ndarray
    outputs: list[Path]
    classification: dict | None = None
    feature_names: list[str] = field(default_factory=list)
    states: GroupStates | None = None
    maps: GroupMaps | None = None
    feature_kinds: list[str] = field(default_factory=list)
    resumed: bool = False
    left_out: list[dict] = field(default_factory=list)


def find_participant_outputs(
    output, *, atlas_name: str | None = None, strategy: str | None = None
) -> list[dict]:
    """Return the published participant relmat files of one atlas and strategy.

    Returns
    -------
    list of dict
        One per run: ``path`` and its BIDS entities (``sub``, ``ses``,
        ``task``, ``run``, ``space``, ``seg``, ``desc``), sorted by path.

    Raises
    ------
    ValueError
        No output, or several atlases / strategies and none chosen.
    """
    output = Path(output)
    desc = None if strategy is None else strategy_desc(strategy)
    found = []
    for path in sorted(output.glob("sub-*/**/func/*_relmat.tsv")):
        try:
            ents = parse_bids_name(path)
        except ValueError:
            continue
        if ents.get("meas") != MEASURE or "sub" not in ents:
            continue
        found.append({"path": path, **ents})
    if not found:
        raise ValueError(
            f"No participant output (*_meas-{MEASURE}_relmat.tsv under sub-*/) in "
            f"{output}; run the participant level first."
        )
    combos = sorted({(f.get("seg"), f.get("desc")) for f in found}, key=str)
    chosen = [
        f
        for f in found
        if (atlas_name is None or f.get("seg") == atlas_name)
        and (desc is None or f.get("desc") == desc)
    ]
    pairs = sorted({(f.get("seg"), f.get("desc")) for f in chosen}, key=str)
    listed = ", ".join(f"seg-{a} desc-{d}" for a, d in combos)
    if not chosen:
        raise ValueError(
            f"No participant output with seg-{atlas_name} desc-{desc} in {output}; found {listed}."
        )
    if len(pairs) > 1:
        raise ValueError(
            f"{output} holds several atlases or strategies ({listed}); choose one "
            "with --atlas-name and --denoise."
        )
    for f in chosen:  # refuse half-written sets
        prefix = bids_prefix(
            {k: v for k, v in f.items() if k not in ("path", "meas", "suffix", "extension")}
        )
        read_manifest(f["path"].parent, prefix)
    return chosen


def find_left_out(output, runs: list[dict], *, atlas_name: str, strategy: str) -> list[dict]:
    """Return the runs and measures of this atlas and strategy the group level lacks.

    Parameters
    ----------
    output : path
        The participant-level output folder.
    runs : list of dict
        :func:`find_participant_outputs` (the runs the group level reads).
    atlas_name, strategy : str

    Returns
    -------
    list of dict
        ``run``, ``subject``, ``measure`` (empty: the whole run), ``status``
        (``refused``, ``error`` or ``partial``) and ``reason``: every measure
        recorded as failed in the manifest of a published run set, and every
        run whose newest record in the participant logs of this atlas and
        strategy says refused or failed and that has no published connectome.
    """
    import json

    output = Path(output)
    published = {r["path"].name.split("_seg-")[0] for r in runs}
    left = []
    for manifest in sorted(
        output.glob(
            f"sub-*/**/func/*_seg-{atlas_name}_desc-{strategy_desc(strategy)}_manifest.json"
        )
    ):
        try:
            content = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        for measure, reason in (content.get("failed_measures") or {}).items():
            name = content.get("run", manifest.name.split("_seg-")[0])
            left.append(_left(name, measure, "partial", reason))
    seen = {(e["run"], e["measure"]) for e in left}
    for record in _last_records(output, atlas_name, strategy):
        if record.get("status") not in ("refused", "error") or record["name"] in published:
            continue
        failed = record.get("failed_measures") or {"": record.get("error", "")}
        for measure, reason in failed.items():
            if (record["name"], measure) not in seen:
                left.append(_left(record["name"], measure, record["status"], reason))
    return left


def _last_records(output: Path, atlas_name: str, strategy: str) -> list[dict]:
    """Return each run's record in the newest participant log of this atlas and strategy.

    Every participant call writes its own log
    (:mod:`connscale.bidsapp.participant_logs`: an array job's tasks each
    one); a run some of them recorded is taken from the newest of those.
    """
    import json

    from connscale.bidsapp.participant_logs import participant_reports

    desc, last = strategy_desc(strategy), {}
    for path in participant_reports(output):  # oldest first: a newer record replaces it
        try:
            log = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        parameters = log.get("parameters") or {}
        if parameters.get("atlas_name") == atlas_name and _logged_desc(parameters) == desc:
            last.update((record["name"], record) for record in log.get("records", []))
    return list(last.values())


def _logged_desc(parameters: dict) -> str | None:
    """Return the ``desc-`` label of a participant log's strategy (a nuisance file: its own)."""
    strategy = parameters.get("strategy")
    if isinstance(strategy, dict):  # a nuisance file's fingerprint
        return strategy.get("desc")
    try:
        return None if strategy is None else strategy_desc(strategy)
    except ValueError:  # not a label: another tool's log
        return None


def _left(name: str, measure: str, status: str, reason: str) -> dict:
    subject = name.split("_")[0].removeprefix("sub-")
    return {"run": name, "subject": subject, "measure": measure, "status": status, "reason": reason}


def left_out_lines(left: list[dict]) -> list[str]:
    """One line per entry of :func:`find_left_out`."""
    return [
        f"left out: {e['run']}, {e['measure'] or 'the whole run'} ({e['status']}): {e['reason']}"
        for e in left
    ]


def _write_group_log(output: Path, result: GroupResult) -> Path:
    """Write ``logs/group_report.json``: what the group level read, wrote and left out.

    The file is left as it is when a re-run has nothing new to say.
    """
    import json

    logs = output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / "group_report.json"
    content = {
        "command": "bids group",
        "software": f"connscale {__version__}",
        "atlas": result.atlas_name,
        "strategy": result.strategy,
        "runs": [r["path"].name.split("_seg-")[0] for r in result.runs],
        "participants": [f"sub-{s}" for s in result.subjects],
        "left_out": result.left_out,
        "outputs": [Path(os.path.relpath(p, output)).as_posix() for p in result.outputs],
    }
    try:
        if json.loads(path.read_text()) == content:
            return path
    except (OSError, ValueError):
        pass
    return write_json_atomic(path, content)


def _fisher(r: np.ndarray) -> np.ndarray:
    return np.arctanh(np.clip(r, -1 + 1e-7, 1 - 1e-7))


@dataclass(frozen=True)
class _Connectomes:
    """The runs' connectomes over the regions every run has.

    ``z`` holds each run's Fisher-z matrix (n_runs, n_regions, n_regions),
    ``mean`` the group mean (tanh of the mean z, unit diagonal).
    """

    runs: list[dict]
    labels: list[str]
    z: np.ndarray
    mean: np.ndarray

    @property
    def upper(self) -> tuple[np.ndarray, np.ndarray]:
        """The upper-triangle (i < j) indices of the regions, row-major."""
        return np.triu_indices(len(self.labels), 1)

    @property
    def entities(self) -> dict:
        """The BIDS entities of the group outputs (atlas, measure, strategy)."""
        return {"seg": self.runs[0]["seg"], "meas": MEASURE, "desc": self.runs[0].get("desc")}


@entry(GroupConfig)
def run_group(config: GroupConfig) -> GroupResult:
    """Group average, DFC states, feature table and (with a target) classification.

    Pass a :class:`~connscale.bidsapp.config.GroupConfig` alone, or its
    fields as arguments; either way every value is checked first.

    Parameters
    ----------
    %(parameters)s

    Returns
    -------
    GroupResult
    """
    from connscale.bidsapp.group_maps import MAP_FEATURES, plan_maps
    from connscale.bidsapp.group_states import plan_states

    if (config.participants is None) != (config.target is None):
        raise ValueError("Give both --participants and --target, or neither.")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    options = replace(config, features=_check_features(config.features))
    output = Path(config.output)
    runs = find_participant_outputs(output, atlas_name=config.atlas_name, strategy=config.strategy)
    atlas_name, strategy = runs[0]["seg"], runs[0].get("desc")
    left_out = find_left_out(output, runs, atlas_name=atlas_name, strategy=strategy)
    for line in left_out_lines(left_out):
        logger.warning("group: %s", line)
    plan = plan_states(
        output,
        runs,
        required=config.states,
        n_states=config.n_states,
        metric=config.state_metric,
        random_state=config.random_state,
    )
    map_features = [f for f in options.features if f in MAP_FEATURES]
    maps_plan = plan_maps(output, runs, required=True if map_features else None)
    data = _read_connectomes(runs)
    result = _publish_group(
        output, data, options, (plan, maps_plan), started=started, left_out=left_out
    )
    _write_group_log(output, result)
    return result


def _read_connectomes(runs: list[dict]) -> _Connectomes:
    """Read every run's connectome and align them on the regions all runs have."""
    from connscale.io.relmat import read_relmat_tsv

    matrices, names = [], []
    for r in runs:
        matrix, labels = read_relmat_tsv(r["path"])
        matrices.append(matrix)
        names.append(labels)
    common = [n for n in names[0] if all(n in other for other in names[1:])]
    if len(common) < 2:
        raise ValueError("Fewer than 2 regions are present in every run.")
    if any(len(n) != len(common) for n in names):
        logger.warning(
            "group: %d region(s) missing from some runs are left out",
            max(len(n) for n in names) - len(common),
        )
    aligned = np.stack(
        [
            m[np.ix_(idx, idx)]
            for m, n in zip(matrices, names)
            for idx in [[n.index(c) for c in common]]
        ]
    )
    z = _fisher(aligned)
    mean = np.tanh(z.mean(axis=0))
    np.fill_diagonal(mean, 1.0)
    return _Connectomes(runs, common, z, mean)


def _group_fingerprint(data: _Connectomes, options: GroupConfig, plans) -> dict:
    """Return the fingerprint of the group outputs: their inputs and parameters."""
    from connscale.io.fingerprint import run_fingerprint

    plan, maps_plan = plans
    inputs = [r["path"] for r in data.runs]
    inputs += [] if options.participants is None else [options.participants]
    if plan is not None:
        inputs.append({"states": plan.fingerprint["digest"]})
    if maps_plan is not None:
        inputs.append({"maps": maps_plan.fingerprint["digest"]})
    return run_fingerprint(
        inputs,
        {
            "target": options.target,
            "folds": options.folds,
            "repeats": options.repeats,
            "random_state": options.random_state,
            "features": list(options.features),
        },
    )


def _publish_group(
    output: Path,
    data: _Connectomes,
    options: GroupConfig,
    plans,
    *,
    started: str,
    left_out: list[dict],
) -> GroupResult:
    """Compute the states, maps and feature table; publish the group outputs.

    Outputs published with the same fingerprint are resumed instead.
    """
    from connscale.bidsapp.group_maps import MAP_FEATURES, compute_maps
    from connscale.bidsapp.group_states import compute_states
    from connscale.io.publish import OutputSet

    plan, maps_plan = plans
    group = output / "group"
    with OutputSet(
        group,
        bids_prefix(
            {"seg": data.entities["seg"], "desc": data.entities["desc"]}, require_subject=False
        ),
        command="bids group",
        fingerprint=_group_fingerprint(data, options, plans),
        overwrite=options.overwrite,
    ) as out:
        found = (
            None
            if plan is None
            else compute_states(plan, device=options.device, overwrite=options.overwrite)
        )
        mean_maps = (
            None
            if maps_plan is None
            else compute_maps(
                maps_plan,
                features=any(f in MAP_FEATURES for f in options.features),
                overwrite=options.overwrite,
            )
        )
        result = _feature_table(data, options.features, found, mean_maps)
        result.left_out = left_out
        names = _output_names(data.entities)
        if out.complete():
            result.resumed = True
            result.outputs = [group / n for n in _published(group, out.prefix)]
            if options.target is not None:
                import json

                result.classification = json.loads((group / names["classification"]).read_text())
        else:
            _write_outputs(out, output, result, data, options, names=names, started=started)
    if found is not None:
        result.outputs += found.outputs
    if mean_maps is not None:
        result.outputs += mean_maps.outputs
    return result


def _feature_table(data: _Connectomes, features: tuple[str, ...], found, mean_maps) -> GroupResult:
    """Return the group result with its feature table.

    One row per participant (the mean over its runs), the columns of ``features``.
    """
    from connscale.bidsapp.group_maps import MAP_FEATURES

    runs, common, iu = data.runs, data.labels, data.upper
    use_states = found is not None and "states" in features
    summaries = _dfc_summaries(runs, common) if "dfc" in features else None
    by_subject = defaultdict(list)
    for i, (r, zi) in enumerate(zip(runs, data.z)):
        parts = [zi[iu]] if "edges" in features else []
        parts += [summaries[i]] if summaries is not None else []
        parts += [found.run_features[i]] if use_states else []
        by_subject[r["sub"]].append(np.concatenate(parts) if parts else np.empty(0))
    subjects = sorted(by_subject)
    table = np.stack([np.mean(by_subject[s], axis=0) for s in subjects])
    feature_names = [f"{common[i]}|{common[j]}" for i, j in zip(*iu)] if "edges" in features else []
    if summaries is not None:
        edges = [f"{common[i]}|{common[j]}" for i, j in zip(*iu)]
        feature_names += [f"{e}:dfc_mean" for e in edges] + [f"{e}:dfc_std" for e in edges]
    feature_names += found.feature_names if use_states else []
    map_kinds = [f for f in features if f in MAP_FEATURES]
    if map_kinds:  # the same participants, sorted
        values, names = mean_maps.columns(map_kinds)
        table = np.concatenate([table, values], axis=1)
        feature_names += names
    if not feature_names:
        raise ValueError(
            f"The feature table of {', '.join(features)} has no column (no DFC states)."
        )
    return GroupResult(
        data.entities["seg"],
        data.entities["desc"],
        runs,
        common,
        data.mean,
        subjects,
        table,
        [],
        feature_names=feature_names,
        states=found,
        maps=mean_maps,
        feature_kinds=[k for k in features if k != "states" or use_states],
    )


def _output_names(ents: dict) -> dict:
    """Return the file names of the group mean, the feature table and the classification."""
    return {
        "mean": bids_name(
            {**ents, "stat": "mean"}, suffix="relmat", extension=".tsv", require_subject=False
        ),
        "table": bids_name(ents, suffix="features", extension=".tsv", require_subject=False),
        "classification": bids_name(
            ents, suffix="classification", extension=".json", require_subject=False
        ),
    }


def _write_outputs(
    out,
    output: Path,
    result: GroupResult,
    data: _Connectomes,
    options: GroupConfig,
    *,
    names,
    started,
) -> None:
    """Write the group mean, feature table, classification and report; commit ``out``."""
    from connscale._compute import resolve_device

    _write_group(result, out, output, names)
    if options.target is not None:
        result.classification = _classify(
            result,
            Path(options.participants),
            options.target,
            folds=options.folds,
            repeats=options.repeats,
            random_state=options.random_state,
        )
        write_json_atomic(out.path(names["classification"]), result.classification)
    _group_report(
        out,
        output,
        data,
        result.states,
        result.maps,
        classification=result.classification,
        started=started,
        device=str(resolve_device(options.device)),
        notes=left_out_lines(result.left_out),
    )
    out.commit()
    result.outputs = list(out.published)


def _dfc_summaries(runs: list[dict], common: list[str]) -> list[np.ndarray]:
    """Return each run's DFC summaries over the regions ``common`` (upper-triangle order).

    Every edge's mean, then standard deviation, of Fisher z over the
    windows of the run's ``_dfc.h5``.
    """
    from connscale.bidsapp.group_states import dfc_path
    from connscale.io.dfc import read_dfc_windows

    missing = [r["path"].name for r in runs if not dfc_path(r).exists()]
    if missing:
        raise ValueError(
            f"Group features 'dfc' need every run's DFC (participant --measures dfc); "
            f"missing for {', '.join(missing)}."
        )
    n = len(common)
    iu = np.triu_indices(n, 1)
    rows = []
    for r in runs:
        windows, info = read_dfc_windows(dfc_path(r))
        labels = info["labels"] or [str(k) for k in range(info["n_series"])]
        index = [labels.index(c) for c in common]
        full = np.zeros((windows.shape[0], info["n_series"], info["n_series"]))
        upper = np.triu_indices(info["n_series"], 1)
        full[:, upper[0], upper[1]] = windows
        full += full.transpose(0, 2, 1)
        picked = full[:, index][:, :, index][:, iu[0], iu[1]]
        z = _fisher(picked)
        rows.append(np.concatenate([z.mean(axis=0), z.std(axis=0)]))
    return rows


def _check_features(features) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(str(f).strip() for f in features if str(f).strip()))
    unknown = [f for f in chosen if f not in GROUP_FEATURES]
    if unknown or not chosen:
        raise ValueError(
            f"Group features are among {', '.join(GROUP_FEATURES)}; "
            f"got {', '.join(chosen) or 'none'}."
        )
    return chosen


def _published(folder: Path, prefix: str) -> list[str]:
    return sorted(read_manifest(folder, prefix)["files"])


def _write_group(result: GroupResult, out, output: Path, names: dict) -> None:
    """Write the group mean (TSV and its JSON sidecar) and the feature table."""
    from connscale.io.features import write_feature_table
    from connscale.io.relmat import write_relmat_tsv

    runs, common = result.runs, result.labels
    write_relmat_tsv(out.path(names["mean"]), result.mean, common)
    write_json_atomic(
        out.path(names["mean"][:-4] + ".json"),
        {
            "Measure": "Pearson correlation",
            "MeasureDescription": "Group mean: tanh of the mean Fisher-z correlation over runs",
            "Weighted": True,
            "Directed": False,
            "ValidDiagonal": True,
            "StorageFormat": "Full",
            "NonNegative": False,
            "NodeNames": common,
            "NumberOfRuns": len(runs),
            "Sources": [str(r["path"].relative_to(output)) for r in runs],
            "Atlas": result.atlas_name,
            "DenoiseStrategy": result.strategy,
            "SoftwareName": "connscale",
            "SoftwareVersion": __version__,
        },
    )
    write_feature_table(
        out.path(names["table"]), result.subjects, result.features, result.feature_names
    )


def _run_rows(runs: list[dict], group: Path) -> list[dict]:
    """Return each run's row of the group report: name, report link, mean FD, volumes kept."""
    import json

    rows = []
    for r in runs:
        meta = json.loads(r["path"].with_suffix(".json").read_text())
        fd = meta.get("MeanFramewiseDisplacement")
        ents_run = {k: v for k, v in r.items() if k not in ("path", "meas", "suffix", "extension")}
        report = r["path"].parent / bids_name(ents_run, suffix="report", extension=".html")
        rows.append(
            {
                "name": r["path"].name.split("_seg-")[0],
                "report": os.path.relpath(report, group) if report.is_file() else None,
                "mean_fd": np.nan if fd is None else float(fd),
                "n_kept": int(meta["NumberOfVolumes"] - meta["NumberOfVolumesDiscarded"]),
            }
        )
    return rows


def _group_report(
    out,
    output: Path,
    data: _Connectomes,
    states,
    maps,
    *,
    classification: dict | None,
    started: str,
    device: str,
    notes: list[str],
) -> Path:
    """Write the group report: the mean connectome, QC-FC, states, maps, classification."""
    from connscale.bidsapp.report import GroupPage, qc_fc, write_group_report

    group = out.out_dir
    rows = _run_rows(data.runs, group)
    mean_fd = np.asarray([row["mean_fd"] for row in rows])
    iu = data.upper
    edges = np.tanh(data.z[:, iu[0], iu[1]])
    qcfc = qc_fc(edges, mean_fd) if np.isfinite(mean_fd).all() and len(rows) > 2 else None
    results = {"runs": len(rows), "regions": len(data.labels)}
    distances = None
    if qcfc is not None:
        from connscale.bidsapp.qc_outputs import write_group_qc_fc

        finite = qcfc[np.isfinite(qcfc)]
        results["QC-FC median |r|"] = float(np.median(np.abs(finite))) if finite.size else None
        distances = write_group_qc_fc(out, output, data, qcfc, results)
    ents = data.entities
    parameters = {"atlas": ents["seg"], "strategy": ents["desc"], "output": str(output)}
    if states is not None:
        parameters.update({"states": states.n_states, "state metric": states.metric})
        results["fraction of windows per state"] = [round(float(f), 4) for f in states.fractions]
        results["state-sequence example"] = rows[0]["name"]
    if maps is not None:
        results["group maps"] = maps.names
        results["voxels in the common mask"] = int(maps.mask.sum())
    page = GroupPage(
        mean=data.mean,
        names=data.labels,
        runs=rows,
        qcfc=qcfc,
        qcfc_distances=distances,
        parameters=parameters,
        results=results,
        states=states,
        maps=None if maps is None else _map_figures(output, maps),
        classification=classification,
        warnings=notes,
    )
    name = bids_name(ents, suffix="report", extension=".html", require_subject=False)
    return write_group_report(
        out.path(name), page, started=started, device=device, published_dir=group
    )


def _map_figures(output: Path, maps: GroupMaps) -> dict:
    """Return the published mean maps, their titles and background, for the report."""
    group = output / "group"
    return {
        "maps": [(group / name, title) for name, title in zip(maps.names, maps.titles)],
        "background": maps.background,
    }


def _classify(
    result: GroupResult, participants: Path, target: str, *, folds: int, repeats: int, random_state
) -> dict:
    from connscale.classify import cross_validate

    values = read_participants(participants, label=target)
    keep = [i for i, s in enumerate(result.subjects) if s in values]
    missing = sorted(set(result.subjects) - set(values))
    if missing:
        logger.warning("group: no %s for sub-%s; left out", target, ", sub-".join(missing))
    y = np.array([values[result.subjects[i]] for i in keep])
    classes, counts = np.unique(y, return_counts=True)
    if classes.size != 2:
        raise ValueError(
            f"Classification needs two classes of {target!r}; got "
            f"{classes.tolist()} over {len(y)} participants with outputs."
        )
    sizes = dict(zip(classes.tolist(), counts.tolist()))
    if counts.min() < 2:
        raise ValueError(
            f"Each class of {target!r} needs at least 2 participants with outputs; got {sizes}."
        )
    notes, used = [], min(folds, int(counts.min()))
    if used < folds:
        notes.append(
            f"{folds} folds asked for, but the smaller class of {target!r} has "
            f"{int(counts.min())} participants with outputs ({sizes}; stratified folds "
            f"need one of each class per fold): {used} folds used"
        )
        logger.warning("group: %s", notes[-1])
    scores = cross_validate(
        result.features[keep], y, folds=used, repeats=repeats, random_state=random_state
    )
    summary = {
        k: scores[k]
        for k in (
            "accuracy",
            "sensitivity",
            "specificity",
            "auc",
            "classes",
            "n_subjects",
            "n_features",
            "model",
            "folds",
            "repeats",
        )
    }
    summary.update(
        folds_requested=folds,
        notes=notes,
        target=target,
        participants=[f"sub-{result.subjects[i]}" for i in keep],
        features=", ".join(_FEATURE_LABELS[k] for k in result.feature_kinds)
        + ", mean over each participant's runs",
    )
    return summary
