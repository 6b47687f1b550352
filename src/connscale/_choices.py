"""Named choices and shared defaults of the API that the command line lists.

Denoising strategies, BIDS-App measures and group features, cohort jobs,
r1DL's backends, storages and selections, LiFE's measures and formulations,
precisions, dtypes, devices, classifiers, the pair summaries, the DFC kinds
and low-rank methods and the degree's default threshold.

They live here, in a module that imports nothing, so that the ``connscale``
parsers (and ``--help``) are built without importing the modules that
implement the choices (torch, nilearn, pybids); those modules import them
from here.
"""

#: XCP-D's nuisance regressor sets (``xcp_d/data/nuisance/<name>.yml``), selected through
#: nilearn's ``load_confounds`` (:mod:`connscale.nuisance`).
NUISANCE_SETS = ("24P", "27P", "36P", "acompcor", "acompcor_gsr", "aroma", "aroma_gsr", "gsr_only")

#: Denoising strategies of :mod:`connscale.denoise` (nilearn's presets, or none), then
#: XCP-D's nuisance sets.
STRATEGIES = ("simple", "scrubbing", "compcor", "ica_aroma", "none", *NUISANCE_SETS)

#: What the BIDS-App's participant level can write per run: atlas-level measures,
#: then voxel-level ones, then voxel maps and r1DL networks (each its own output
#: set, :mod:`connscale.bidsapp.voxel_measures`).
REGION_MEASURES = ("fc", "timeseries", "dfc", "pairs")
VOXEL_MEASURES = ("voxelfc",)
MAP_MEASURES = ("maps", "networks", "alff", "reho")
#: The maps also averaged over each atlas parcel in the atlas-level set.
PARCELLATED_MAPS = ("alff", "reho")
MEASURES = REGION_MEASURES + VOXEL_MEASURES + MAP_MEASURES

#: How the BIDS-App spells its output names: connscale's (giga-connectome's
#: entities) or XCP-D's (:mod:`connscale.bidsapp.xcpd_names`).
OUTPUT_SPELLINGS = ("giga", "xcpd")

#: The kinds of columns of the BIDS-App's group feature table.
GROUP_FEATURES = ("edges", "dfc", "states", "maps", "alff", "reho")

#: Distances of the DFC states' k-means (:class:`connscale.states.DFCStates`'s ``metric``).
STATE_METRICS = ("l1", "correlation", "euclidean")

#: Per-scan jobs of :func:`connscale.cohort.run_cohort` (``connscale.cohort.JOBS``).
COHORT_JOBS = ("dfc", "fc", "pairs")

#: Arithmetic of thresholded correlations on CUDA (:func:`connscale.correlation`'s
#: ``precision``): TF32 decisions with the pairs near a threshold confirmed in fp32,
#: fp32 products, or TF32 products.
PRECISIONS = ("exact", "fp32", "tf32")

#: The classifiers of :func:`connscale.classify.cross_validate` (``model``): a linear
#: SVM or a multi-layer perceptron.
CLASSIFIERS = ("svm", "mlp")

#: The counts of :func:`connscale.classify.cross_validate`'s Clopper-Pearson interval
#: (``interval``): one pass over the subjects, or all repeated predictions.
CV_INTERVALS = ("subjects", "predictions")

#: The summaries of a region pair's windowed correlation, in a store's order
#: (:mod:`connscale.io.pairs`).
PAIR_STATISTICS = ("mean", "std", "fraction_above")

#: The forms of a static correlation matrix (:func:`connscale.correlation`'s ``kind``).
CORRELATION_KINDS = ("dense", "triu", "sparse")

#: The stored forms of sliding-window correlations (:func:`connscale.dynamic_correlation`'s
#: ``kind``).
DFC_KINDS = ("triu", "sparse", "lowrank", "factor")

#: How ``kind='lowrank'`` finds each window's range (:func:`connscale.dynamic_correlation`'s
#: ``method``): GPU-DFC's randomized range finder or an exact SVD.
DFC_METHODS = ("randomized", "svd")

#: The degree centrality's default correlation threshold (``connscale maps``, the
#: BIDS-App's ``maps`` measure).
DEFAULT_THRESHOLD = 0.25

#: The floating dtypes connscale computes in, by the names numpy gives them.
DTYPES = ("float32", "float64")

#: The devices the API and the command line name (and ``'cuda:N'``, a CUDA device
#: by index); ``'auto'`` is CUDA when present, the CPU otherwise.
DEVICES = ("auto", "cpu", "cuda")

#: Where r1DL learns (:func:`connscale.networks.r1dl`'s ``backend``, besides an engine).
R1DL_BACKENDS = ("local", "dask", "spark")

#: Where r1DL's local backend keeps S between passes (``storage``).
R1DL_STORAGES = ("auto", "device", "host", "file")

#: How r1DL picks an atom's loadings: by ``|y|`` or by ``y`` (``selection``).
R1DL_SELECTIONS = ("magnitude", "signed")

#: Edge values of a LiFE connectome (:func:`connscale.life.outputs.connectome`'s ``measure``).
LIFE_MEASURES = ("weight", "count", "evidence")

#: LiFE's signal models (:func:`connscale.life.fit`'s ``formulation``): ENCODE's or dipy's.
LIFE_FORMULATIONS = ("encode", "dipy")

#: The series a censored run publishes (XCP-D's ``--output-type``): the kept
#: volumes, or every volume after the dummy scans with the censored ones interpolated.
OUTPUT_TYPES = ("censored", "interpolated")

#: The filters of the motion parameters (XCP-D's ``--motion-filter-type``):
#: low-pass or notch (:func:`connscale.motion.filter_motion`).
MOTION_FILTERS = ("lp", "notch")
