"""Grayordinates (CIFTI-2): parcellation, maps and connectomes of dense series.

The numerical work runs on the (n_timepoints, n_grayordinates) matrix; the
brain model travels beside the result (:mod:`connscale.io.cifti` reads and
writes the files).
"""

from connscale.cifti.correlation import (
    CiftiCorrelation,
    cifti_correlation,
    read_relmat_brain_model,
)
from connscale.cifti.maps import parse_grayordinate, seed_index, seed_indices
from connscale.cifti.parcellate import (
    CiftiParcellation,
    Parcellation,
    parcel_correlation,
    parcellate,
    parcellate_cifti,
    parcellated_names,
    parcels_axis,
    write_parcellated,
)

__all__ = [
    "CiftiCorrelation",
    "CiftiParcellation",
    "Parcellation",
    "cifti_correlation",
    "parcel_correlation",
    "parcellate",
    "parcellate_cifti",
    "parcellated_names",
    "parcels_axis",
    "parse_grayordinate",
    "read_relmat_brain_model",
    "seed_index",
    "seed_indices",
    "write_parcellated",
]
