"""Grayordinates (CIFTI-2): dense and parcellated connectomes, parcellation, maps.

Each module's public functions are re-exported here.
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
