"""Window options shared by the commands that slide windows.

Length and step in time points or seconds, the repetition time, and the taper.
"""

from __future__ import annotations

from connscale._validation import to_timepoints
from connscale.cli import _types


def add_window_arguments(parser, *, required: bool = True) -> None:
    """--window, --step, --t-r, --taper and --taper-sigma."""
    parser.add_argument(
        "--window",
        type=_types.window,
        required=required,
        metavar="W",
        help="Window length in time points (22) or seconds (44s; needs the "
        "TR). For --taper gaussian, the rectangle's width.",
    )
    parser.add_argument(
        "--step",
        type=_types.step,
        default="1",
        metavar="S",
        help="Between window starts, in time points (1) or seconds (2s).",
    )
    parser.add_argument(
        "--t-r",
        type=_types.positive,
        default=None,
        metavar="SECONDS",
        help="Repetition time (default: from the NIfTI header).",
    )
    parser.add_argument(
        "--taper",
        choices=["rectangular", "gaussian"],
        default="rectangular",
        help="Window shape: rectangular, or Allen et al. (2014)'s rectangle "
        "convolved with a Gaussian (weighted Pearson).",
    )
    parser.add_argument(
        "--taper-sigma",
        type=_types.positive,
        default=3.0,
        metavar="TRS",
        help="Sigma of the Gaussian taper, in time points.",
    )


def resolve_window(args, path) -> tuple[int, int, float | None]:
    """Return (window, step) in time points and the repetition time used (or None).

    dynamic_correlation checks them.
    """
    from connscale.fc.windows import repetition_time

    t_r = args.t_r if args.t_r is not None else repetition_time(path)
    return (
        to_timepoints(args.window, "window_length", t_r=t_r),
        to_timepoints(args.step, "step", t_r=t_r),
        t_r,
    )
