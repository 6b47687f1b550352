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

__all__ = [
    "CiftiCorrelation",
    "cifti_correlation",
    "read_relmat_brain_model",
]
