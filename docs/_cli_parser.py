"""The ``connscale`` command's parser, for sphinx-argparse's reference page.

The help texts are written for a terminal, and sphinx-argparse reads them as
reStructuredText, where ``*_bold.nii.gz`` or ``|r|`` is markup: this returns
the command's own parser (:func:`connscale.cli.main.build_parser`) with the
markup characters of every description, epilog and help text escaped, so
that the page says what ``connscale COMMAND --help`` prints.
"""

from __future__ import annotations

import argparse
import re

from connscale.cli.main import build_parser

_MARKUP = re.compile(r"([\\*`|_])")


def _escape(text: str | None) -> str | None:
    return None if text is None else _MARKUP.sub(r"\\\1", text)


def _escape_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = _escape(parser.description)
    parser.epilog = _escape(parser.epilog)
    for action in parser._actions:
        if action.help not in (None, argparse.SUPPRESS):
            action.help = _escape(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = _escape(choice.help)
            for sub in action.choices.values():
                _escape_parser(sub)


def parser() -> argparse.ArgumentParser:
    """Return ``connscale``'s parser with its texts escaped for reStructuredText."""
    built = build_parser()
    _escape_parser(built)
    return built
