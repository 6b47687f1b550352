"""Group level: the participant outputs read back, averaged, tabulated and classified.

Reads every published run set of one atlas and strategy (each checked
against its manifest, so a half-written run is refused), aligns the regions
by name, and writes into ``<output>/group/``::

    seg-<atlas>_meas-PearsonCorrelation_stat-mean_desc-<strategy>_relmat.tsv / .json
    seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_features.tsv
    seg-<atlas>_meas-PearsonCorrelation_desc-<strategy>_classification.json  (with a target)

The group mean is the mean of the Fisher-z transformed correlations, taken
back with tanh. The feature table has one row per participant (the mean of
its runs' Fisher-z edges) and one column per edge ``<name_i>|<name_j>``, i < j
in row-major order. With ``participants.tsv`` and a target column,
:func:`connscale.classify.cross_validate` runs on it (one sample per
participant, so runs of one participant never sit on both sides of a fold).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path

import numpy as np

from connscale._validation import Interval, validate_params
from connscale._version import __version__
from connscale.io._atomic import write_json_atomic
from connscale.io._publish import read_manifest
from connscale.io.bids import bids_name, parse_bids_name, read_participants

__all__ = ["GroupResult", "find_participant_outputs", "run_group"]

logger = logging.getLogger("connscale")
_MEASURE = "PearsonCorrelation"


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


def find_participant_outputs(
    output, *, atlas_name: str | None = None, strategy: str | None = None
) -> list[dict]:
    """Published participant relmat files of one atlas and strategy.

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
    found = []
    for path in sorted(output.glob("sub-*/**/func/*_relmat.tsv")):
        try:
            ents = parse_bids_name(path)
        except ValueError:
            continue
        if ents.get("meas") != _MEASURE or "sub" not in ents:
            continue
        found.append({"path": path, **ents})
    if not found:
        raise ValueError(
            f"No participant output (*_meas-{_MEASURE}_relmat.tsv under sub-*/) in "
            f"{output}; run the participant level first."
        )
    combos = sorted({(f.get("seg"), f.get("desc")) for f in found}, key=str)
    chosen = [
        f
        for f in found
        if (atlas_name is None or f.get("seg") == atlas_name)
        and (strategy is None or f.get("desc") == strategy)
    ]
    pairs = sorted({(f.get("seg"), f.get("desc")) for f in chosen}, key=str)
    listed = ", ".join(f"seg-{a} desc-{d}" for a, d in combos)
    if not chosen:
        raise ValueError(
            f"No participant output with seg-{atlas_name} desc-{strategy} in "
            f"{output}; found {listed}."
        )
    if len(pairs) > 1:
        raise ValueError(
            f"{output} holds several atlases or strategies ({listed}); choose one "
            "with --atlas-name and --denoise."
        )
    for f in chosen:  # refuse half-written sets
        prefix = bids_name(
            {k: v for k, v in f.items() if k not in ("path", "meas", "suffix", "extension")},
            suffix="bold",
            extension=".tsv",
        )[: -len("_bold.tsv")]
        read_manifest(f["path"].parent, prefix)
    return chosen


def _fisher(r: np.ndarray) -> np.ndarray:
    return np.arctanh(np.clip(r, -1 + 1e-7, 1 - 1e-7))


@validate_params(
    {
        "output": ["path"],
        "atlas_name": [str, None],
        "strategy": [str, None],
        "participants": ["path", None],
        "target": [str, None],
        "folds": [Interval(Integral, 2, None, closed="left")],
        "repeats": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }
)
def run_group(
    output,
    *,
    atlas_name: str | None = None,
    strategy: str | None = None,
    participants=None,
    target: str | None = None,
    folds: int = 5,
    repeats: int = 10,
    random_state: int | None = 0,
) -> GroupResult:
    """Group average, feature table and (with a target) classification.

    Parameters
    ----------
    output : path
        The participant-level output folder; ``group/`` is written in it.
    atlas_name, strategy : str or None
        Which ``seg-`` / ``desc-`` outputs to read (needed when several).
    participants : path or None
        ``participants.tsv`` with ``participant_id`` and ``target``.
    target : str or None
        Column to classify (two classes).
    folds, repeats, random_state
        Of :func:`connscale.classify.cross_validate` (folds lowered to the
        smaller class size when needed).

    Returns
    -------
    GroupResult
    """
    from connscale.io.relmat import read_relmat_tsv

    if (participants is None) != (target is None):
        raise ValueError("Give both --participants and --target, or neither.")
    output = Path(output)
    runs = find_participant_outputs(output, atlas_name=atlas_name, strategy=strategy)
    atlas_name, strategy = runs[0]["seg"], runs[0].get("desc")
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
    iu = np.triu_indices(len(common), 1)
    by_subject = defaultdict(list)
    for r, zi in zip(runs, z):
        by_subject[r["sub"]].append(zi[iu])
    subjects = sorted(by_subject)
    features = np.stack([np.mean(by_subject[s], axis=0) for s in subjects])

    group = output / "group"
    group.mkdir(parents=True, exist_ok=True)
    ents = {"seg": atlas_name, "meas": _MEASURE, "desc": strategy}
    mean_path = group / bids_name(
        {**ents, "stat": "mean"}, suffix="relmat", extension=".tsv", require_subject=False
    )
    from connscale.io.relmat import write_relmat_tsv

    write_relmat_tsv(mean_path, mean, common)
    write_json_atomic(
        mean_path.with_suffix(".json"),
        {
            "Measure": "Pearson correlation",
            "MeasureDescription": "Group mean: tanh of the mean Fisher-z correlation over runs",
            "Weighted": True,
            "Directed": False,
            "ValidDiagonal": True,
            "StorageFormat": "Full",
            "NonNegative": "",
            "NodeNames": common,
            "NumberOfRuns": len(runs),
            "Sources": [str(r["path"].relative_to(output)) for r in runs],
            "Atlas": atlas_name,
            "DenoiseStrategy": strategy,
            "SoftwareName": "connscale",
            "SoftwareVersion": __version__,
        },
    )
    table = group / bids_name(ents, suffix="features", extension=".tsv", require_subject=False)
    header = ["participant_id"] + [f"{common[i]}|{common[j]}" for i, j in zip(*iu)]
    from connscale.io._atomic import atomic_path

    with atomic_path(table) as tmp, open(tmp, "w") as fh:
        fh.write("\t".join(header) + "\n")
        for sub, row in zip(subjects, features):
            fh.write(f"sub-{sub}\t" + "\t".join(f"{v:.8g}" for v in row) + "\n")
    outputs = [mean_path, mean_path.with_suffix(".json"), table]
    outputs.append(_group_report(output, group, runs, z, iu, mean, common, ents))
    result = GroupResult(atlas_name, strategy, runs, common, mean, subjects, features, outputs)
    if target is not None:
        result.classification = _classify(
            result,
            Path(participants),
            target,
            folds=folds,
            repeats=repeats,
            random_state=random_state,
        )
        path = group / bids_name(
            ents, suffix="classification", extension=".json", require_subject=False
        )
        write_json_atomic(path, result.classification)
        outputs.append(path)
    return result


def _group_report(
    output: Path, group: Path, runs: list[dict], z: np.ndarray, iu, mean, names, ents
) -> Path:
    import json

    from connscale.bidsapp.report import qc_fc, write_group_report

    rows, mean_fd = [], []
    for r in runs:
        meta = json.loads(r["path"].with_suffix(".json").read_text())
        fd = meta.get("MeanFramewiseDisplacement")
        mean_fd.append(np.nan if fd is None else float(fd))
        ents_run = {k: v for k, v in r.items() if k not in ("path", "meas", "suffix", "extension")}
        report = r["path"].parent / bids_name(ents_run, suffix="report", extension=".html")
        rows.append(
            {
                "name": r["path"].name.split("_seg-")[0],
                "report": os.path.relpath(report, group) if report.is_file() else None,
                "mean_fd": mean_fd[-1],
                "n_kept": int(meta["NumberOfVolumes"] - meta["NumberOfVolumesDiscarded"]),
            }
        )
    mean_fd = np.asarray(mean_fd)
    edges = np.tanh(z[:, iu[0], iu[1]])
    qcfc = qc_fc(edges, mean_fd) if np.isfinite(mean_fd).all() and len(runs) > 2 else None
    results = {"runs": len(runs), "regions": len(names)}
    if qcfc is not None:
        finite = qcfc[np.isfinite(qcfc)]
        results["QC-FC median |r|"] = float(np.median(np.abs(finite))) if finite.size else None
    path = group / bids_name(ents, suffix="report", extension=".html", require_subject=False)
    return write_group_report(
        path,
        mean=mean,
        names=names,
        runs=rows,
        qcfc=qcfc,
        parameters={"atlas": ents["seg"], "strategy": ents["desc"], "output": str(output)},
        results=results,
    )


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
    folds = min(folds, int(counts.min()))
    if folds < 2:
        raise ValueError(
            f"Each class of {target!r} needs at least 2 participants with outputs; "
            f"got {dict(zip(classes.tolist(), counts.tolist()))}."
        )
    scores = cross_validate(
        result.features[keep], y, folds=folds, repeats=repeats, random_state=random_state
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
        target=target,
        participants=[f"sub-{result.subjects[i]}" for i in keep],
        features="Fisher-z edges, mean over each participant's runs",
    )
    return summary
