"""The ``connscale`` command: one sub-command per capability."""

from __future__ import annotations

import argparse
import importlib
import sys

from connscale._version import __version__
from connscale.io._lock import OutputLockedError

# Sub-command modules of connscale.cli; each defines add_parser(subparsers).
_COMMANDS = (
    "fc",
    "dfc",
    "dfc-states",
    "pairs",
    "cohort",
    "bids",
    "maps",
    "r1dl",
    "life",
    "classify",
    "demo",
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit 2);
    sub-command parsers inherit it."""

    subcommands: dict[str, argparse.ArgumentParser]  # set by build_parser

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help').\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``connscale`` command."""
    parser = _Parser(
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
        importlib.import_module(f"connscale.cli.{name.replace('-', '_')}").add_parser(subparsers)
    parser.subcommands = subparsers.choices
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``connscale`` command; returns the exit status."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # named by the sub-command's parser, whose --help lists the options
            parser.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # --help, --version or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, OSError, OutputLockedError) as exc:
        # Bad input, a failed write or a locked output: a clear message, no
        # traceback (use -vv for one).
        if getattr(args, "verbose", 0) >= 2:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"connscale {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
