"""Voxel maps and r1DL networks of a run: the participant measures ``maps`` and ``networks``.

Both start from the run's denoised voxel series inside its own brain mask
(the cleaning of the ``voxelfc`` measure: :func:`connscale.denoise.clean_signals`
with the run's operator) and write images through that mask, under the
run's folder ``sub-<s>/[ses-<t>/]func/``, each with a JSON sidecar.

``maps`` (:mod:`connscale.maps`): binary and weighted degree centrality at
each threshold of ``degree_thresholds`` (one pass), eigenvector centrality
(fastECM) and global correlation, one 3-D map each::

    <source>_meas-r<θ>_stat-degree_desc-<strategy>_boldmap.nii.gz / .json
    <source>_meas-r<θ>_stat-weighteddegree_desc-<strategy>_boldmap.nii.gz / .json
    <source>_stat-ecm_desc-<strategy>_boldmap.nii.gz / .json
    <source>_stat-gcor_desc-<strategy>_boldmap.nii.gz / .json
    <source>_stat-maps_desc-<strategy>_report.html

The threshold's label is that of ``connscale maps`` (0.25 gives ``r025``,
:func:`connscale.io.maps.threshold_label`), in the ``meas-`` entity: ``stat-``
names the map, ``desc-`` the strategy, as in every other output.

``networks`` (:class:`connscale.networks.R1DL`, the defaults of
``connscale r1dl``: tol 0.01, at most 100 updates per atom, magnitude
selection, standardised columns, seed 0): the atoms' spatial maps as one
4-D image (one volume per network) and their time courses over the kept
volumes (one column per network), as tedana and fMRIPrep name ICA
components and mixing matrices::

    <source>_stat-r1dl_desc-<strategy>_components.nii.gz / .json
    <source>_stat-r1dl_desc-<strategy>_mixing.tsv / .json
    <source>_stat-r1dl_desc-<strategy>_report.html

Each measure is its own output set (:class:`connscale.io.publish.OutputSet`,
prefixes ``<source>_stat-maps_desc-<strategy>`` and
``<source>_stat-r1dl_desc-<strategy>``): adding one to a run does not touch
the run's other results, a set made with other parameters is refused without
``overwrite``, and a replaced set's files that the new one does not name
(the maps of other thresholds) are removed once it is published.

With ``write_denoised``, the denoised BOLD (the kept volumes, through the
mask) is its own set too::

    <source>_desc-<strategy>_bold.nii.gz / .json
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from connscale._version import __version__
from connscale.bidsapp.outputs import (
    MEASURE,
    bids_uri,
    note_constant_voxels,
    run_sidecars,
    set_prefix,
)
from connscale.io.atomic import write_json_atomic
from connscale.io.bids import bids_name

__all__ = [
    "NEIGHBOURHOOD",
    "alff_band",
    "check_degree_thresholds",
    "map_sets",
    "write_denoised",
    "write_maps",
    "write_networks",
    "write_voxel",
]

#: The defaults of ``connscale r1dl`` that the participant level does not expose.
R1DL_DEFAULTS = {
    "tol": 0.01,
    "max_iter": 100,
    "selection": "magnitude",
    "standardize": True,
    "n_init": 1,
    "random_state": 0,
}
_MAX_DRAWN_NETWORKS = 10
_SET_STAT = {"maps": "maps", "networks": "r1dl", "alff": "alff", "reho": "reho"}
#: XCP-D's band-pass defaults (``--lower-bpf``, ``--upper-bpf``): ALFF's band without a filter.
_DEFAULT_BAND = (0.01, 0.08)

#: ReHo's neighbourhood (AFNI ``3dReHo -nneigh``), XCP-D's.
NEIGHBOURHOOD = 27

_CLEANING = ("strategy", "strategy_params", "detrend", "standardize", "low_pass", "high_pass")


def alff_band(config) -> tuple[float, float]:
    """Return ALFF's band (high_pass, low_pass) in Hz: the run's filter, else XCP-D's default."""
    high = _DEFAULT_BAND[0] if config.high_pass is None else config.high_pass
    low = _DEFAULT_BAND[1] if config.low_pass is None else config.low_pass
    return float(high), float(low)


def check_degree_thresholds(thresholds) -> tuple[float, ...]:
    """Return the degree thresholds of ``maps``, sorted, each with its own name label.

    Raises
    ------
    ValueError
        No threshold, or two thresholds that the names cannot tell apart.
    """
    from connscale.io.maps import threshold_label

    values = tuple(sorted({float(v) for v in thresholds}))
    if not values:
        raise ValueError("The measure maps needs at least one degree threshold.")
    labels = [threshold_label(v) for v in values]
    for i in range(1, len(values)):
        if labels[i] == labels[i - 1]:
            raise ValueError(
                f"The degree thresholds {values[i - 1]!r} and {values[i]!r} both name their "
                f"maps meas-{labels[i]}; give thresholds that differ within 6 digits."
            )
    return values


def measure_parameters(config, measure: str) -> dict:
    """Return what changes the outputs of a map measure ('maps', 'networks', 'alff', 'reho')."""
    kept = {k: v for k, v in config.parameters().items() if k in (*_CLEANING, "dtype")}
    if measure == "maps":
        kept["degree_thresholds"] = [float(v) for v in config.degree_thresholds]
        kept["precision"] = config.precision
    elif measure in ("alff", "reho"):
        kept["band"] = list(alff_band(config)) if measure == "alff" else None
        kept["neighbourhood"] = NEIGHBOURHOOD if measure == "reho" else None
        kept["surfaces"] = None if config.surfaces is None else [str(s) for s in config.surfaces]
    else:
        kept.update(
            n_atoms=int(config.n_atoms), network_sparsity=config.network_sparsity, **R1DL_DEFAULTS
        )
    if config.despike:
        kept["despike"] = True
    return kept


def map_sets(config, run, folder: Path, inputs: list, measures) -> dict:
    """Return the output sets of the requested map measures.

    ``{measure: (folder, prefix, fingerprint)}``, as
    :func:`connscale.bidsapp.run_sets.output_sets` lists them.
    """
    from connscale.io.fingerprint import run_fingerprint

    sets = {}
    for measure in measures:
        prefix = set_prefix(dict(run.entities), {"stat": _SET_STAT[measure], "desc": config.desc})
        fingerprint = run_fingerprint(
            inputs, {**measure_parameters(config, measure), "measure": measure, "t_r": run.t_r}
        )
        sets[measure] = (folder, prefix, fingerprint)
    return sets


def _cleaned_voxels(
    config, run, decoded, context, timings, *, on_device: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Return the run's denoised in-mask series (n_kept, n_voxels) and which are constant.

    The constant ones are counted in ``context['constant']`` and named by the
    run's warning. ``on_device``: the series as a tensor left on the device
    (checked there), not copied to the host.
    """
    from connscale.bidsapp.cleaned_voxels import device_series
    from connscale.denoise import clean_signals

    n = decoded.data.shape[1]
    if n < 2:
        raise ValueError(f"The mask of {run.bold.name} holds fewer than 2 voxels.")
    tic = time.perf_counter()
    voxels = clean_signals(
        device_series(config, decoded, context),
        context["operator"],
        standardize=config.standardize,
        device=config.device,
        dtype=config.dtype,
        return_tensor=on_device,
    )
    timings["clean"] += time.perf_counter() - tic
    constant = note_constant_voxels(run, voxels, context)
    context["constant"] = int(constant.sum())
    return voxels, constant


def _image(values: np.ndarray, mask: np.ndarray, affine: np.ndarray):
    """(..., n_voxels) values put back on the mask's grid (voxels in C order)."""
    import nibabel as nib

    values = np.asarray(values, dtype=np.float32)
    volume = np.zeros(mask.shape + values.shape[:-1], dtype=np.float32)
    volume[mask] = values.T
    img = nib.Nifti1Image(volume, affine)
    img.header.set_xyzt_units("mm")
    return img


def _mean_image(decoded):
    """Return the run's mean BOLD inside its mask: the background of the report's maps."""
    mask = decoded.mask
    return _image(decoded.data.mean(axis=0), mask, np.asarray(decoded.img.affine))


def _common_sidecar(config, run, decoded, context, n_voxels: int) -> dict:
    """Return the keys every map shares: sources, denoising, volumes kept, software."""
    _, meta = run_sidecars(config, run, [], context, decoded.data.shape[0])
    for key in ("Columns", "SamplingFrequency", "Atlas", "AtlasFile", "AtlasLabelsFile"):
        meta.pop(key)
    meta["NumberOfVoxels"] = int(n_voxels)
    meta["NumberOfConstantVoxels"] = context["constant"]
    meta["Mask"] = bids_uri(run.mask, Path(config.derivatives))
    meta["Code"] = f"connscale {__version__}"
    return meta


def _publish(out, written: list[str], run) -> None:
    """Commit the set, then remove what the set it replaced named and this one does not."""
    from connscale.io.publish import IncompleteOutputError, read_manifest

    try:
        previous = set(read_manifest(out.out_dir, out.prefix, verify="none")["files"])
    except IncompleteOutputError:
        previous = set()
    out.commit(extra={"run": run.name})
    for name in sorted(previous - set(written)):
        (out.out_dir / name).unlink(missing_ok=True)


def _report(
    out, name: str, *, config, run, figures: list, results: dict, timings, outputs, started
) -> None:
    """Write the set's report, beside ``outputs`` (the names of its other files)."""
    from connscale.bidsapp.report import run_header
    from connscale.report import write_report

    record = {
        "command": f"bids participant: {run.name}",
        **run_header(config.device, started),
        "parameters": {
            "strategy": config.strategy,
            "bold": str(run.bold),
            "mask": str(run.mask),
            "confounds": str(run.confounds),
            "t_r": run.t_r,
        },
        "results": results,
        "timings_s": dict(timings),
        "figures": [str(f) for f in figures],
        "outputs": outputs,
    }
    out.path(name)
    write_report(record, out.staging, filename=name)


def write_maps(config, run, decoded, out, context, timings) -> list[str]:
    """Degree (binary, weighted), eigenvector centrality and global correlation maps.

    The cleaned voxel series stay on the device from their cleaning to the
    last map. Each map is written (compressed) by a thread of its own as
    soon as it is computed, beside the computation of the next ones; the set
    is published once every file is written.

    Returns the names of the files published (in ``out.out_dir``).
    """
    from concurrent.futures import ThreadPoolExecutor

    from connscale.maps.prepare import normalize_once

    mask = decoded.mask
    n = int(mask.sum())
    thresholds = [float(v) for v in config.degree_thresholds]
    out.check_space(4 * mask.size * (2 * len(thresholds) + 2), what=f"the maps of {run.name}")
    voxels, _ = _cleaned_voxels(config, run, decoded, context, timings, on_device=True)

    tic = time.perf_counter()
    # one normalisation on the device for the three maps
    series = normalize_once(voxels, device=config.device, dtype=config.dtype)
    del voxels
    common = _common_sidecar(config, run, decoded, context, n)
    writer = _MapWriter(config, run, decoded, out, {**common, "Nodes": "voxels"})
    with ThreadPoolExecutor(2 * len(thresholds) + 2, thread_name_prefix="connscale-map") as pool:
        info = _compute_maps(series, config, thresholds, n, lambda *m: writer.submit(pool, *m))
        del series
        written, drawn = writer.result()
    seconds = time.perf_counter() - tic
    timings["compute"] += seconds - writer.waited
    timings["write"] += writer.waited

    if config.reports:
        tic = time.perf_counter()
        figures = _map_figures(out, drawn, _mean_image(decoded))
        name = bids_name(
            {**run.entities, "stat": _SET_STAT["maps"], "desc": config.desc},
            suffix="report",
            extension=".html",
        )
        _report(
            out,
            name,
            config=config,
            run=run,
            figures=figures,
            results={
                "voxels in mask": n,
                "volumes kept": int(context["operator"].volumes.size),
                "degree thresholds": thresholds,
                "degree method": info["method"],
            },
            timings=timings,
            outputs=list(written),
            started=decoded.started,
        )
        written.append(name)
        timings["write"] += time.perf_counter() - tic
    tic = time.perf_counter()
    _publish(out, written, run)
    timings["write"] += time.perf_counter() - tic
    return written


def _compute_maps(series, config, thresholds: list[float], n: int, emit) -> dict:
    """Compute the maps of normalised ``series``, handing each to ``emit`` as it comes.

    ``emit(entities, values, sidecar, title)``; returns the degree's ``info``
    (method, confirmation).
    """
    from connscale.io.maps import map_sidecar, threshold_label
    from connscale.maps import eigenvector_centrality, global_correlation
    from connscale.maps.degree import compute_degree

    (binary, weighted), info = compute_degree(
        series,
        thresholds,
        memory_limit=config.memory_limit,
        precision=config.precision,
        both=True,
    )
    for theta, counts, sums in zip(thresholds, binary, weighted):
        label = {"meas": threshold_label(theta)}
        kept = f"r > {theta:.6g}"
        for weighted_map, values in ((False, counts), (True, sums)):
            emit(
                {**label, "stat": "weighteddegree" if weighted_map else "degree"},
                values,
                map_sidecar(
                    "Weighted degree centrality" if weighted_map else "Degree centrality",
                    (
                        f"Sum of r over the other in-mask voxels with {kept} (denoised series)"
                        if weighted_map
                        else f"Number of other in-mask voxels with {kept} (denoised series)"
                    ),
                    n_nodes=n,
                    Threshold=theta,
                    Weighted=weighted_map,
                    Method=info["method"],
                    Precision=config.precision,
                    Confirmation=info["confirmation"],
                ),
                f"{'weighted degree' if weighted_map else 'degree'}, r > {theta:.6g}",
            )
    emit(
        {"stat": "ecm"},
        eigenvector_centrality(series),
        map_sidecar(
            "Eigenvector centrality",
            "Leading eigenvector of R + 1 (fastECM, Wink et al. 2012), unit norm",
            n_nodes=n,
        ),
        "eigenvector centrality",
    )
    emit(
        {"stat": "gcor"},
        global_correlation(series),
        map_sidecar("Global correlation", "Mean r to all other in-mask voxels", n_nodes=n),
        "global correlation",
    )
    return info


class _MapWriter:
    """Write a run's maps on threads as they are computed; their names in order at the end.

    ``waited``: the seconds the computing thread spent waiting for the writes.
    """

    def __init__(self, config, run, decoded, out, common: dict) -> None:
        self.config, self.run, self.out, self.common = config, run, out, common
        self.mask = decoded.mask
        self.affine = np.asarray(decoded.img.affine, dtype=np.float64)
        self.pending: list[tuple] = []  # (future, name, title)
        self.waited = 0.0

    def submit(self, pool, extra: dict, values, sidecar: dict, title: str) -> None:
        """Queue the write of one map (its image and sidecar) on ``pool``."""
        from connscale.io.maps import write_map

        name = bids_name(
            {**self.run.entities, **extra, "desc": self.config.desc},
            suffix="boldmap",
            extension=".nii.gz",
        )
        path = self.out.path(name)
        self.out.path(name[: -len(".nii.gz")] + ".json")
        image = _image(values, self.mask, self.affine)  # on the host, here
        future = pool.submit(write_map, path, image, {**sidecar, **self.common})
        self.pending.append((future, name, title))

    def result(self) -> tuple[list[str], list[tuple[str, str]]]:
        """Wait for every write (the first failure raises); return (names written, drawn)."""
        tic = time.perf_counter()
        for future, _, _ in self.pending:
            future.result()
        self.waited = time.perf_counter() - tic
        written, drawn = [], []
        for _, name, title in self.pending:
            written += [name, name[: -len(".nii.gz")] + ".json"]
            drawn.append((name, title))
        return written, drawn


def _map_figures(out, drawn: list, background) -> list[Path]:
    """One PNG per map over the run's mean image (in the staging folder, not published)."""
    from connscale.report.maps import plot_stat_map

    folder = out.staging / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    return [
        plot_stat_map(
            out.staging / name,
            folder / (name[: -len(".nii.gz")] + ".png"),
            bg_img=background,
            title=title,
        )
        for name, title in drawn
    ]


def write_networks(config, run, decoded, out, context, timings) -> list[str]:
    """r1DL of the run's denoised voxel series: spatial maps and time courses.

    Returns the names of the files published (in ``out.out_dir``).
    """
    from connscale.io.nifti import save_nifti_gz
    from connscale.io.r1dl import network_names
    from connscale.io.timeseries import save_timeseries
    from connscale.networks import R1DL

    entities = {**run.entities, "stat": _SET_STAT["networks"], "desc": config.desc}
    mask, affine = decoded.mask, np.asarray(decoded.img.affine, dtype=np.float64)
    n = int(mask.sum())
    if config.n_atoms > decoded.data.shape[0]:
        raise ValueError(
            f"--n-atoms {config.n_atoms} is more than the {decoded.data.shape[0]} volumes "
            f"of {run.bold.name}."
        )
    out.check_space(
        4 * mask.size * config.n_atoms + 16 * decoded.data.shape[0] * config.n_atoms,
        what=f"the networks of {run.name}",
    )
    voxels, _ = _cleaned_voxels(config, run, decoded, context, timings)

    tic = time.perf_counter()
    estimator = R1DL(
        config.n_atoms,
        config.network_sparsity,
        device=config.device,
        dtype=config.dtype,
        memory_limit=config.memory_limit,
        **R1DL_DEFAULTS,
    )
    estimator.fit(voxels, checkpoint=out.staging / "r1dl_checkpoint")
    del voxels
    timings["compute"] += time.perf_counter() - tic

    tic = time.perf_counter()
    result = estimator.result_
    names = network_names(config.n_atoms)
    common = _common_sidecar(config, run, decoded, context, n)
    parameters = {
        "NumberOfAtoms": int(config.n_atoms),
        "Sparsity": config.network_sparsity,
        "VoxelsPerNetwork": int(result.sparsity),
        "Tolerance": R1DL_DEFAULTS["tol"],
        "MaxIterations": R1DL_DEFAULTS["max_iter"],
        "Selection": R1DL_DEFAULTS["selection"],
        "StandardizedColumns": R1DL_DEFAULTS["standardize"],
        "RandomState": R1DL_DEFAULTS["random_state"],
        "Iterations": result.n_iter.tolist(),
        "Converged": result.converged.tolist(),
    }
    components = bids_name(entities, suffix="components", extension=".nii.gz")
    maps_img = _image(estimator.components_.toarray(), mask, affine)
    save_nifti_gz(out.path(components), maps_img)
    write_json_atomic(
        out.path(components[: -len(".nii.gz")] + ".json"),
        {
            "Measure": "r1DL spatial maps",
            "MeasureDescription": "Sparse loadings of each rank-1 dictionary learning atom "
            "(Li et al. 2016) on the denoised in-mask voxel series; volume k is the "
            "network of column k of the mixing TSV",
            "Columns": names,
            **parameters,
            **common,
        },
    )
    mixing = bids_name(entities, suffix="mixing", extension=".tsv")
    save_timeseries(out.path(mixing), estimator.dictionary_, names)
    write_json_atomic(
        out.path(mixing[:-4] + ".json"),
        {
            "Measure": "r1DL time courses",
            "MeasureDescription": "Unit-norm time course of each r1DL atom over the kept "
            "volumes (KeptVolumes), one column per network",
            "SamplingFrequency": 1.0 / run.t_r,
            "Columns": names,
            **parameters,
            **common,
        },
    )
    written = [components, components[: -len(".nii.gz")] + ".json", mixing, mixing[:-4] + ".json"]
    timings["write"] += time.perf_counter() - tic

    if config.reports:
        from connscale.report.plots import plot_networks

        tic = time.perf_counter()
        folder = out.staging / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        figure = plot_networks(
            estimator.dictionary_,
            maps_img,
            folder / "networks.png",
            max_networks=_MAX_DRAWN_NETWORKS,
            bg_img=_mean_image(decoded),
            title=f"r1DL networks (the first {min(config.n_atoms, _MAX_DRAWN_NETWORKS)}): "
            "time course and spatial map",
        )
        name = bids_name(entities, suffix="report", extension=".html")
        _report(
            out,
            name,
            config=config,
            run=run,
            figures=[figure],
            results={
                "voxels in mask": n,
                "volumes kept": int(context["operator"].volumes.size),
                "networks": int(config.n_atoms),
                "voxels per network": int(result.sparsity),
                "mean updates per atom": result.mean_iterations,
                "atoms converged": int(result.converged.sum()),
            },
            timings=timings,
            outputs=list(written),
            started=decoded.started,
        )
        written.append(name)
        timings["write"] += time.perf_counter() - tic
    tic = time.perf_counter()
    _publish(out, written, run)
    timings["write"] += time.perf_counter() - tic
    return written


def write_voxel(config, run, decoded, out, context, timings) -> list[str]:
    """Voxel-by-voxel correlation of the cleaned in-mask series, with the voxels' places."""
    from connscale.fc.static import compute_correlation
    from connscale.io.hdf5 import add_datasets

    entities = dict(run.entities)
    operator = context["operator"]
    mask, data = decoded.mask, decoded.data
    n = data.shape[1]
    name = bids_name(
        {**entities, "meas": MEASURE, "desc": config.desc}, suffix="relmat", extension=".h5"
    )
    itemsize = 8 if config.dtype == "float64" else 4
    out.check_space(
        itemsize * n * (n - 1) // 2 + 32 * n + mask.size,
        what=f"the voxel-level matrix of {run.bold.name} ({n} voxels)",
    )
    voxels, constant = _cleaned_voxels(config, run, decoded, context, timings)

    tic = time.perf_counter()
    path = out.path(name)
    path.unlink(missing_ok=True)
    source = bids_uri(run.bold, Path(config.derivatives))
    compute_correlation(
        voxels,
        kind="triu",
        device=config.device,
        dtype=config.dtype,
        memory_limit=config.memory_limit,
        out=path,
        attrs={
            "source": source,
            "strategy": config.strategy,
            "space": entities.get("space", "n/a"),
        },
    )
    del voxels
    timings["compute"] += time.perf_counter() - tic

    tic = time.perf_counter()
    ijk = np.argwhere(mask).astype(np.int32)  # the C order of data's columns
    affine = np.asarray(decoded.img.affine, dtype=np.float64)
    add_datasets(
        path,
        {
            "mask": mask.astype(np.uint8),
            "affine": affine,
            "voxels/ijk": ijk,
            "voxels/xyz": ijk @ affine[:3, :3].T + affine[:3, 3],
            "kept_volumes": operator.volumes,
        },
        attrs={"mask_source": bids_uri(run.mask, Path(config.derivatives))},
        compress=("mask",),
    )
    relmat_meta, _ = run_sidecars(config, run, [], context, data.shape[0])
    relmat_meta.pop("NodeNames")
    for key in ("Atlas", "AtlasFile", "AtlasLabelsFile"):
        relmat_meta.pop(key)
    relmat_meta.update(
        {
            "MeasureDescription": "Pearson correlation of the denoised series of each pair of "
            "voxels of the run's brain mask (no shrinkage)",
            "ValidDiagonal": False,
            "StorageFormat": "HDF5 relmat (connscale.io.hdf5): strictly-upper triangle, pair "
            "(i, j), i < j, at k = i*N - i*(i+1)/2 + j - i - 1; voxel i is "
            "voxels/ijk[i] (voxels/xyz[i] in mm) of /mask",
            "NumberOfVoxels": int(n),
            "NumberOfConstantVoxels": int(constant.sum()),
            "ConstantVoxels": np.flatnonzero(constant).tolist(),
        }
    )
    write_json_atomic(out.path(name[:-3] + ".json"), relmat_meta)
    out.commit(extra={"run": run.name})
    timings["write"] += time.perf_counter() - tic
    return [name, name[:-3] + ".json"]


def write_denoised(config, run, decoded, out, context, timings) -> list[str]:
    """Publish the run's denoised BOLD through its mask (``_desc-<strategy>_bold.nii.gz``).

    The kept volumes of the in-mask series, cleaned and standardized as every
    voxel measure's are, float32, 0 outside the mask (a voxel constant over
    time is 0 too: counted in the sidecar and the run's warning); the
    image's fourth zoom is the repetition time.
    """
    from connscale.io.nifti import save_nifti_gz

    mask = decoded.mask
    n_kept = int(context["operator"].volumes.size)
    out.check_space(4 * mask.size * n_kept, what=f"the denoised BOLD of {run.name}")
    voxels, _ = _cleaned_voxels(config, run, decoded, context, timings)
    tic = time.perf_counter()
    img = _image(np.asarray(voxels), mask, np.asarray(decoded.img.affine, dtype=np.float64))
    del voxels
    img.header.set_zooms((*decoded.img.header.get_zooms()[:3], float(run.t_r)))
    img.header.set_xyzt_units("mm", "sec")
    name = bids_name({**run.entities, "desc": config.desc}, suffix="bold", extension=".nii.gz")
    save_nifti_gz(out.path(name), img)
    meta = _common_sidecar(config, run, decoded, context, int(mask.sum()))
    meta["Description"] = (
        "The run's denoised BOLD: the kept volumes (KeptVolumes) of its in-mask voxel series, "
        "cleaned with the run's confounds and filter; 0 outside the mask"
    )
    sidecar = name[: -len(".nii.gz")] + ".json"
    write_json_atomic(out.path(sidecar), meta)
    _publish(out, [name, sidecar], run)
    timings["write"] += time.perf_counter() - tic
    return [name, sidecar]
