"""A sub-command's ``--help`` as the snapshot tests read it."""

from connscale.cli.main import build_parser


def command_help(monkeypatch, command: str) -> str:
    """Return ``connscale <command> --help`` formatted 100 columns wide."""
    monkeypatch.setenv("COLUMNS", "100")
    return build_parser().subcommands[command].format_help()


def words(text: str) -> str:
    """Return ``text`` with its whitespace collapsed (the wrapping depends on Python's version)."""
    return " ".join(text.split())
