"""The ``connscale`` command: one sub-command per capability."""

from __future__ import annotations

import argparse
import importlib
import sys

from connscale._version import __version__
from connscale.io._lock import OutputLockedError

# Sub-command modules of connscale.cli; each defines add_parser(subparsers).
_COMMANDS = ("fc", "dfc", "pairs", "cohort", "r1dl", "life", "classify", "demo")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``connscale`` command."""
    parser = argparse.ArgumentParser(
        prog="connscale",
        description=(
            "Fast, scalable brain connectivity: static and dynamic functional "
            "connectivity, functional networks and structural connectome "
            "pruning, on the CPU, a CUDA GPU or a cluster."
        ),
        epilog=(
            "Run 'connscale COMMAND --help' for the options of a command. Exit status: 0 done; "
            "1 some scans of a cohort failed; 2 stopped with a one-line error (bad input, "
            "output being written by another run, disk full or another write error: "
            "unfinished files are kept hidden, and a re-run resumes)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"connscale {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(f"connscale.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``connscale`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, OSError, OutputLockedError) as exc:
        # Bad input, a failed write or a locked output: a clear message, no
        # traceback (use -vv for one).
        if getattr(args, "verbose", 0) >= 2:
            raise
        print(f"connscale {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
