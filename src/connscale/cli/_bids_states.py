"""The DFC-states options of ``connscale bids`` (group level) and the ``states`` measure.

``participant --measures states`` is an alias of ``dfc``
(:data:`connscale.bidsapp.config.MEASURE_ALIASES`): the participant level
writes each run's DFC, and the group level clusters the DFC of every run into
states (:mod:`connscale.bidsapp.group_states`).
"""

from __future__ import annotations

import argparse

from connscale.cli import _types


def add_state_arguments(group: argparse._ArgumentGroup) -> None:
    """--states, --state-metric and --random-state of the group level."""
    group.add_argument(
        "--states",
        type=_types.count,
        default=5,
        metavar="K",
        help="Number of DFC states, clustered from every run's DFC when the participant "
        "outputs have DFC (or --measures states is given, which requires it).",
    )
    group.add_argument(
        "--state-metric",
        choices=["l1", "correlation", "euclidean"],
        default="l1",
        help="Distance of the states' k-means (l1: medians, as Allen et al. 2014).",
    )
    group.add_argument(
        "--random-state",
        type=_types.natural,
        default=0,
        help="Seed of the states' k-means and of the cross-validation.",
    )


def group_options(args: argparse.Namespace) -> dict:
    """Keyword arguments of :func:`connscale.bidsapp.group.run_group` for the states."""
    asked = "states" in [m.strip() for m in args.measures.split(",")]
    return {
        "states": True if asked else None,
        "n_states": args.states,
        "state_metric": args.state_metric,
        "random_state": args.random_state,
        "device": args.device,
        "overwrite": args.overwrite,
    }
