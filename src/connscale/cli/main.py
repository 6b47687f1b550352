"""The ``connscale`` command: one sub-command per capability."""

from __future__ import annotations

import argparse
import importlib
import sys

from connscale._version import __version__
from connscale.cli._common import api_to_flags

# Sub-command modules of connscale.cli; each defines add_parser(subparsers),
# and may define check_arguments(args), which raises ValueError for options
# that do not go together. Their top-level imports stay light (no torch,
# nilearn, pybids...): a command imports what it computes with in its run
# function, so that --help, --version and argument errors come at once.
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
    """An argument parser whose usage errors are one line on stderr (exit 2).

    Sub-command parsers inherit it.
    """

    subcommands: dict[str, argparse.ArgumentParser]  # set by build_parser
    checks: dict  # each command's check_arguments (or None), set by build_parser

    def error(self, message: str):
        message = message.rstrip(".")
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help').\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``connscale`` command."""
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
    parser.checks = {}
    for name in _COMMANDS:
        module = importlib.import_module(f"connscale.cli.{name.replace('-', '_')}")
        module.add_parser(subparsers)
        parser.checks[name] = getattr(module, "check_arguments", None)
    parser.subcommands = subparsers.choices
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``connscale`` command; returns the exit status."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        command = parser.subcommands[args.command]
        if unknown:  # named by the sub-command's parser, whose --help lists the options
            command.error(f"unrecognized arguments: {' '.join(unknown)}")
        check = parser.checks[args.command]
        if check is not None:  # options that do not go together, before any import or read
            try:
                check(args)
            except ValueError as exc:
                command.error(api_to_flags(str(exc), command))
    except SystemExit as exc:  # --help, --version or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    from connscale.io.lock import OutputLockedError

    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, OSError, OutputLockedError) as exc:
        # Bad input, a failed write or a locked output: a clear message, no
        # traceback (use -vv for one).
        if getattr(args, "verbose", 0) >= 2:
            raise
        print(f"connscale {args.command}: error: {_message(exc, command)}", file=sys.stderr)
        return 2


def _message(exc: Exception, command: argparse.ArgumentParser) -> str:
    """Return one line for an error.

    The API's parameter names become the command's flags, and an OSError's file is named.
    """
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        message = f"{exc.filename}: {exc.strerror}"
        if exc.filename2 is not None:
            message += f" (-> {exc.filename2})"
    return api_to_flags(message, command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
