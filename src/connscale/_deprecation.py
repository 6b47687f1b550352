"""Renamed keywords kept working for one release, with a FutureWarning.

This follows scikit-learn's deprecation style.
"""

from __future__ import annotations

import warnings

from connscale._validation import user_stacklevel

#: Default of a renamed keyword: not passed.
DEPRECATED = "deprecated"


def renamed(new_value, old_value, *, new: str, old: str, new_default, removed_in: str = "0.2"):
    """Return the value of keyword ``new``, taking ``old`` (its former name) with a FutureWarning.

    Parameters
    ----------
    new_value, old_value
        The values passed for the new and the old name (``old_value`` is
        :data:`DEPRECATED` when the old name was not passed).
    new, old : str
        The two names, for the messages.
    new_default
        The new keyword's default: passing both names is an error.
    removed_in : str, default='0.2'
        The release that drops the old name.

    Returns
    -------
    The value to use.
    """
    if isinstance(old_value, str) and old_value == DEPRECATED:
        return new_value
    if new_value is not new_default and new_value != new_default:
        raise ValueError(f"'{old}' was renamed '{new}'; pass only '{new}' (got both).")
    warnings.warn(
        f"'{old}' was renamed '{new}'; '{old}' will be removed in connscale "
        f"{removed_in}. Pass '{new}' instead.",
        FutureWarning,
        stacklevel=user_stacklevel(),
    )
    return old_value
