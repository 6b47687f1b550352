"""Classification of patients vs controls from connectomes.

Feature loaders (:mod:`connscale.classify.features`) and repeated stratified
cross-validation with Clopper–Pearson intervals
(:mod:`connscale.classify.cross_validation`).
"""

from connscale.classify.cross_validation import (
    METRICS,
    build_pipeline,
    clopper_pearson,
    compare_features,
    cross_validate,
)
from connscale.classify.features import (
    FeatureSet,
    align_labels,
    fisher_z,
    load_connectome_features,
    load_feature_table,
    load_features,
    load_pair_features,
    read_pair_summary,
    read_participants,
    read_relmat,
    subject_id_from_path,
)

__all__ = [
    "METRICS",
    "FeatureSet",
    "align_labels",
    "build_pipeline",
    "clopper_pearson",
    "compare_features",
    "cross_validate",
    "fisher_z",
    "load_connectome_features",
    "load_feature_table",
    "load_features",
    "load_pair_features",
    "read_pair_summary",
    "read_participants",
    "read_relmat",
    "subject_id_from_path",
]
