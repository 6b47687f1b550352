"""Shared parameter documentation, filled into docstrings by :func:`fill_doc`.

This works as nilearn's ``@fill_doc`` and ``docdict``.
"""

from __future__ import annotations

docdict = {
    "device": """device : {'auto', 'cpu', 'cuda', 'cuda:N'}, default='auto'
        Where to compute. ``'auto'`` uses the current CUDA device when one is
        present and the CPU otherwise.""",
    "dtype": """dtype : {'float32', 'float64'}, default='float32'
        Working precision. Means and norms are accumulated in float64 either
        way; TF32 matrix products stay off.""",
    "memory_limit": """memory_limit : int, str or None, default=None
        Most memory the computation may use on the device and for the
        in-memory result, in bytes or as a string such as ``'8GB'``. None
        uses up to 80% of what is free.""",
    "random_state": """random_state : int, numpy.random.Generator or None, default=None
        Seed of every random step, for reproducible results.""",
    "verbose": """verbose : int, default=0
        0 is silent; 1 shows a progress bar; 2 also logs details.""",
    "timeseries": """timeseries : array-like of shape (n_timepoints, n_series)
        Time series as nilearn maskers return them: one column per voxel or
        region.""",
}


def fill_doc(func):
    """Replace ``%(name)s`` placeholders in a docstring by :data:`docdict`."""
    if func.__doc__:
        func.__doc__ = func.__doc__ % docdict
    return func
