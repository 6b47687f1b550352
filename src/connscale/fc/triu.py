"""Edge-vector index helpers, re-exported from :mod:`connscale._triu`.

The index arithmetic lives below the capabilities (every capability and
``io`` use it); this module keeps ``connscale.fc.triu`` for users.
"""

from connscale._triu import (
    from_nilearn_vec,
    matrix_to_vec,
    n_pairs,
    to_nilearn_vec,
    triu_index,
    triu_pairs,
    triu_row_offsets,
    vec_to_matrix,
)

__all__ = [
    "from_nilearn_vec",
    "matrix_to_vec",
    "n_pairs",
    "to_nilearn_vec",
    "triu_index",
    "triu_pairs",
    "triu_row_offsets",
    "vec_to_matrix",
]
