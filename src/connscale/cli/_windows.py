"""The windows of the commands that slide them (``dfc``, ``dfc-states``).

Their options (length and step in time points or seconds, the repetition
time, the taper) are the fields of :mod:`connscale._fields`; here they are
turned into time points once the repetition time is known.
"""

from __future__ import annotations

from connscale._validation import to_timepoints


def resolve_window(config, path) -> tuple[int, int, float | None]:
    """Return (window, step) in time points and the repetition time used (or None).

    ``config`` holds ``window``, ``step`` and ``t_r``; without ``t_r`` the
    repetition time is read from ``path``. dynamic_correlation checks them.
    """
    from connscale.fc.windows import repetition_time

    t_r = config.t_r if config.t_r is not None else repetition_time(path)
    return (
        to_timepoints(config.window, "window_length", t_r=t_r),
        to_timepoints(config.step, "step", t_r=t_r),
        t_r,
    )
