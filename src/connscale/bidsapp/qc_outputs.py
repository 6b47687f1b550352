"""The QC tables of the participant level, and ``--despike``.

Per run, its own output set (:func:`qc_set`) holding one row of
:func:`connscale.qc.qc_row` (XCP-D's ``desc-linc_qc.tsv`` columns)::

    <source>_desc-<strategy>_qc.tsv / .json

and, at the participant level's end, the dataset's table of every published
run's row (:func:`write_dataset_qc`)::

    <output>/desc-<strategy>_qc.tsv / .json

DVARS needs the voxel series: they are read when the reports or a voxel
measure are on; otherwise the DVARS columns are n/a and the sidecar says why
(the QC table does not force a read of the BOLD's voxels).

``--despike`` (:func:`despike_run`): XCP-D despikes the BOLD before
denoising, so the voxel series are despiked (:func:`connscale.despike.despike`,
on the device) and the region means recomputed from them; the decoder's
region sums, made without torch, are of the raw voxels.

A CIFTI run's table is the same, its DVARS of the grayordinate series (always
read). ``--despike`` despikes its grayordinates (:func:`despike_cifti_run`,
as XCP-D does for CIFTI: ``3dDespike`` per grayordinate, in
``xcp_d/workflows/bold/postprocessing.py``) into a copy (the memory-mapped
file is never written to); its parcel means are made from that copy.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.bidsapp.outputs import bids_uri, set_prefix
from connscale.io.atomic import write_json_atomic, write_text_atomic
from connscale.io.bids import bids_name
from connscale.qc import QC_COLUMNS

__all__ = [
    "QC_METADATA",
    "atlas_centroids",
    "despike_cifti_run",
    "despike_run",
    "initial_dvars",
    "qc_name",
    "qc_set",
    "write_dataset_qc",
    "write_group_qc_fc",
    "write_qc",
]

#: The set name's extra entity, so that it differs from the voxel set's (same ``desc``).
_SET_STAT = "qc"

_DVARS_NOTE = (
    "Standardised DVARS (Nichols 2013), as XCP-D's compute_dvars: the RMS over voxels of the "
    "temporal difference divided by its expected value from each voxel's robust standard "
    "deviation and lag-1 autocorrelation; 0 at the first volume, included in the mean."
)

#: The sidecar's description of each column (XCP-D's, adapted).
QC_METADATA = {
    "mean_fd": {
        "LongName": "Mean Framewise Displacement",
        "Description": "Mean framewise displacement of the volumes after the dummy scans "
        "(high-motion volumes included), the FD the censoring used.",
        "Units": "mm",
    },
    "max_fd": {
        "LongName": "Maximum Framewise Displacement",
        "Description": "Largest framewise displacement of the volumes after the dummy scans.",
        "Units": "mm",
    },
    "mean_fd_post_censoring": {
        "LongName": "Mean Framewise Displacement After Censoring",
        "Description": "Mean framewise displacement of the volumes kept.",
        "Units": "mm",
    },
    "mean_dvars_initial": {
        "LongName": "Mean DVARS Before Postprocessing",
        "Description": "Mean standardised DVARS of the BOLD after the dummy scans, before "
        f"despiking and denoising. {_DVARS_NOTE}",
    },
    "mean_dvars_final": {
        "LongName": "Mean DVARS After Postprocessing",
        "Description": f"Mean standardised DVARS of the denoised volumes kept. {_DVARS_NOTE}",
    },
    "num_dummy_volumes": {
        "LongName": "Number of Dummy Volumes",
        "Description": "Leading non-steady-state volumes removed.",
    },
    "num_censored_volumes": {
        "LongName": "Number of Censored Volumes",
        "Description": "Volumes after the dummy scans that the denoising left out.",
    },
    "num_retained_volumes": {
        "LongName": "Number of Retained Volumes",
        "Description": "Volumes kept (no dummy scan, no censored volume).",
    },
    "retained_seconds": {
        "LongName": "Retained Time",
        "Description": "Duration of the kept volumes: their number times the repetition time.",
        "Units": "s",
    },
    "fd_dvars_correlation_initial": {
        "LongName": "FD-DVARS Correlation Before Postprocessing",
        "Description": "Pearson correlation of framewise displacement with the initial DVARS "
        "over the volumes after the dummy scans.",
    },
    "fd_dvars_correlation_final": {
        "LongName": "FD-DVARS Correlation After Postprocessing",
        "Description": "Pearson correlation of framewise displacement with the final DVARS "
        "over the kept volumes.",
    },
}


def qc_name(entities: dict, extension: str = ".tsv") -> str:
    """Return the name of a QC table: ``<entities>_qc<extension>``."""
    return bids_name(entities, suffix="qc", extension=extension, require_subject="sub" in entities)


def qc_set(config, run, folder: Path, inputs: list) -> tuple:
    """Return the run's QC set: ``(folder, prefix, fingerprint)``.

    Its fingerprint holds the inputs and what changes the row: the cleaning
    (the final DVARS, the kept volumes) and despiking. Not whether the voxel
    series are read: a table published with DVARS n/a stays so when the
    run's other sets are made again with the reports on (``--overwrite``
    makes it again), as the reports' switch moves no other set.
    """
    from connscale.io.fingerprint import run_fingerprint

    parameters = {
        k: v for k, v in config.voxel_parameters().items() if k not in ("measures", "standardize")
    }
    parameters.update({"t_r": run.t_r, "measure": "qc"})
    prefix = set_prefix(dict(run.entities), {"stat": _SET_STAT, "desc": config.desc})
    return folder, prefix, run_fingerprint(inputs, parameters)


def _dummy_scans(context: dict) -> int:
    return int(context.get("dummy_scans") or 0)


def initial_dvars(config, decoded, context: dict) -> np.ndarray | None:
    """Return the standardised DVARS of the run's BOLD after its dummy scans (None: not read).

    Called before despiking: the initial DVARS is of the BOLD as fMRIPrep wrote it.
    """
    from connscale.bidsapp.cleaned_voxels import device_series
    from connscale.qc import dvars

    if decoded.data is None:
        return None
    data = device_series(config, decoded, context)[_dummy_scans(context) :]
    limit = config.memory_limit
    return dvars(data, device=config.device, dtype=config.dtype, memory_limit=limit)[1]


def despike_run(config, decoded, context: dict, timings: dict):
    """Return the run with its voxel series despiked and its region means recomputed from them.

    The volumes after the dummy scans are despiked (XCP-D despikes the BOLD
    once the dummy scans are dropped); the dummy scans are left as read.
    """
    from connscale.denoise import region_signals
    from connscale.despike import despike

    tic = time.perf_counter()
    start = _dummy_scans(context)
    data = decoded.data.copy()
    data[start:] = despike(
        decoded.data[start:],
        device=config.device,
        dtype=config.dtype,
        memory_limit=config.memory_limit,
    )
    means = decoded.region_means
    if means is not None:
        means = region_signals(
            data,
            decoded.atlas[decoded.mask],
            regions=decoded.regions,
            device=config.device,
            dtype="float64",
            memory_limit=config.memory_limit,
        )
    timings["clean"] += time.perf_counter() - tic
    return replace(decoded, data=data, region_means=means)


def despike_cifti_run(config, decoded, context: dict, timings: dict):
    """Return the CIFTI run with a despiked copy of its grayordinate series.

    The volumes after the dummy scans are despiked, the dummy scans copied as
    read; the memory-mapped series are left untouched. The parcel means of
    the run's region set are made from the copy
    (:func:`connscale.cifti.parcellate`). Called within
    :func:`~connscale.bidsapp.cifti_decode.read_only_series`.
    """
    from connscale.despike import despike

    tic = time.perf_counter()
    start = _dummy_scans(context)
    data = np.empty(decoded.data.shape, dtype=np.float32)  # the file's map stays read-only
    data[:start] = decoded.data[:start]
    data[start:] = despike(
        decoded.data[start:],
        device=config.device,
        dtype=config.dtype,
        memory_limit=config.memory_limit,
    )
    timings["clean"] += time.perf_counter() - tic
    return replace(decoded, cifti=replace(decoded.cifti, data=data))


def _final_dvars(config, decoded, context: dict) -> np.ndarray | None:
    """Return the standardised DVARS of the denoised kept volumes (None: voxels not read)."""
    from connscale.bidsapp.cleaned_voxels import unstandardised_series
    from connscale.qc import dvars

    if decoded.data is None:
        return None
    cleaned = unstandardised_series(config, decoded, context)
    return dvars(cleaned, dtype=config.dtype, memory_limit=config.memory_limit)[1]


def _format(value) -> str:
    """Return a TSV cell: n/a for NaN, integers as such, floats to 8 significant digits."""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.8g}"
    return str(value)


def _table(rows: list[dict]) -> str:
    """Return rows of the same keys as a TSV (header line, one line per row)."""
    header = list(rows[0])
    lines = ["\t".join(header)] + ["\t".join(_format(r[k]) for k in header) for r in rows]
    return "\n".join(lines) + "\n"


def write_qc(config, run, decoded, out, context: dict, timings: dict) -> list[str]:
    """Compute and publish the run's QC table (one row) and its sidecar; commit the set."""
    from connscale.qc import qc_row

    if "qc_error" in context:  # the initial DVARS, computed before despiking, failed
        raise context["qc_error"]
    tic = time.perf_counter()
    n_volumes = int(decoded.data.shape[0]) if run.is_cifti else int(decoded.img.shape[3])
    fd = context["fd"]
    if fd is not None and fd.size != n_volumes:
        context["qc_notes"] = [
            f"The FD columns are n/a: the confounds file has {fd.size} rows, the BOLD "
            f"{n_volumes} volumes."
        ]
        fd = None
    row = qc_row(
        np.full(n_volumes, np.nan) if fd is None else fd,
        context["operator"].volumes,
        run.t_r,
        dummy_scans=_dummy_scans(context),
        dvars_initial=context.get("dvars_initial"),
        dvars_final=_final_dvars(config, decoded, context),
    )
    timings["compute"] += time.perf_counter() - tic
    entities = {k: v for k, v in run.entities.items() if v is not None}
    name = qc_name({**entities, "desc": config.desc})
    write_text_atomic(out.path(name), _table([{**entities, **row}]))
    write_json_atomic(out.path(name[:-4] + ".json"), _sidecar(config, run, decoded, fd, context))
    out.commit(extra={"run": run.name})
    return [name, name[:-4] + ".json"]


def _sidecar(config, run, decoded, fd, context: dict) -> dict:
    """Return the sidecar of a run's QC table: what each column is, and what is n/a and why."""
    sources = [p for p in (run.bold, run.mask, run.confounds) if p is not None]
    meta = {
        **{k: QC_METADATA[k] for k in QC_COLUMNS},
        "Sources": [bids_uri(p, Path(config.derivatives)) for p in sources],
        "DenoiseStrategy": config.strategy,
        "Despiked": bool(config.despike),
        "RepetitionTime": run.t_r,
        "SoftwareName": "connscale",
        "SoftwareVersion": __version__,
    }
    notes = list(context.get("qc_notes", []))
    if fd is None and not notes:
        notes.append("The FD columns are n/a: the confounds file has no framewise_displacement.")
    if decoded.data is None:
        notes.append(
            "The DVARS columns are n/a: the run's voxel series were not read (no report, "
            "no voxel measure, no despiking); run with the reports on (and --overwrite "
            "once published) to have them."
        )
    if notes:
        meta["Notes"] = notes
    return meta


def write_dataset_qc(output: Path, desc: str) -> Path | None:
    """Write the dataset's QC table: every published run's row, in name order.

    ``<output>/desc-<desc>_qc.tsv`` (and its sidecar), rebuilt from the runs'
    published tables; None when there is none. Written atomically: calls on
    other participants that end at the same time each write a whole table.
    """
    import pandas as pd

    tables = sorted(Path(output).glob(f"sub-*/**/func/*_desc-{desc}_qc.tsv"))
    if not tables:
        return None
    frame = pd.concat(
        [pd.read_csv(p, sep="\t", na_values=["n/a"], dtype=str) for p in tables],
        ignore_index=True,
    )
    columns = [c for c in frame.columns if c not in QC_COLUMNS] + list(QC_COLUMNS)
    path = Path(output) / qc_name({"desc": desc})
    write_text_atomic(path, frame[columns].to_csv(sep="\t", index=False, na_rep="n/a"))
    write_json_atomic(
        path.with_suffix(".json"),
        {
            **{k: QC_METADATA[k] for k in QC_COLUMNS},
            "Sources": [p.relative_to(output).as_posix() for p in tables],
            "SoftwareName": "connscale",
            "SoftwareVersion": __version__,
        },
    )
    return path


def atlas_centroids(output: Path, relmat_sidecar: dict, names: list[str]) -> np.ndarray | None:
    """Return the centroid (mm) of each region ``names`` of the runs' atlas, or None.

    The atlas and its labels file are those the run's relmat sidecar names
    (``AtlasFile``, ``AtlasLabelsFile``, relative to the output); None when
    the atlas is not a 3-D label image there (a CIFTI ``.dlabel.nii``, a
    moved file).
    """
    import nibabel as nib

    from connscale.bidsapp.atlas import read_atlas_labels
    from connscale.qc import region_centroids

    atlas_file = relmat_sidecar.get("AtlasFile")
    if atlas_file is None or not (Path(output) / atlas_file).is_file():
        return None
    if not str(atlas_file).endswith((".nii", ".nii.gz")):
        return None
    img = nib.load(Path(output) / atlas_file)
    if img.ndim != 3:
        return None
    labels_file = relmat_sidecar.get("AtlasLabelsFile")
    if labels_file is not None:
        value_of = {
            name: value for value, name in read_atlas_labels(Path(output) / labels_file).items()
        }
    else:
        value_of = {f"label-{v}": v for v in np.unique(np.asarray(img.dataobj)).astype(int)}
    if any(name not in value_of for name in names):
        return None
    atlas = np.asarray(img.dataobj).astype(np.int64)
    return region_centroids(atlas, img.affine, [value_of[n] for n in names])


def write_group_qc_fc(
    out, output: Path, data, qcfc: np.ndarray, results: dict
) -> np.ndarray | None:
    """Write the group's QC-FC table (one row per edge, with its length) into the set ``out``.

    ``<seg>_meas-PearsonCorrelation_stat-qcfc_desc-<strategy>_qc.tsv`` (and
    its sidecar, with the distance dependence: Spearman's ρ of QC-FC with
    the distance between the region centroids, Ciric et al. 2017). Adds the
    distance dependence to ``results`` (the page's table). Returns the edges'
    distances (mm), or None when the atlas's centroids are not known.
    """
    import json

    from connscale.qc import edge_distances, qc_fc_distance

    sidecar = json.loads(data.runs[0]["path"].with_suffix(".json").read_text())
    centroids = atlas_centroids(output, sidecar, data.labels)
    distances = None if centroids is None else edge_distances(centroids)
    rho = math.nan if distances is None else qc_fc_distance(qcfc, distances)
    if distances is not None:
        results["QC-FC distance dependence (Spearman rho)"] = None if math.isnan(rho) else rho
    i, j = np.triu_indices(len(data.labels), 1)
    rows = [
        {
            "node_from": data.labels[a],
            "node_to": data.labels[b],
            "qcfc": float(qcfc[k]),
            "distance_mm": math.nan if distances is None else float(distances[k]),
        }
        for k, (a, b) in enumerate(zip(i, j))
    ]
    ents = {**data.entities, "stat": "qcfc"}
    name = bids_name(ents, suffix="qc", extension=".tsv", require_subject=False)
    write_text_atomic(out.path(name), _table(rows))
    write_json_atomic(
        out.path(name[:-4] + ".json"),
        {
            "Description": "QC-FC: across runs, the Pearson correlation of each edge's "
            "correlation with the run's mean framewise displacement; distance_mm: the "
            "Euclidean distance between the centroids of the edge's two regions in the atlas.",
            "DistanceDependence": None if math.isnan(rho) else rho,
            "DistanceDependenceDescription": "Spearman's rank correlation of QC-FC with "
            "distance_mm over the edges (Ciric et al. 2017); n/a without the atlas's centroids.",
            "NumberOfRuns": len(data.runs),
            "SoftwareName": "connscale",
            "SoftwareVersion": __version__,
        },
    )
    return distances
