"""The command line's parser class and the error its typed options raise: argparse, with a
usage error told in one line. Kept apart from :mod:`.options` (which loads pandas and the
engines) so that ``dse --help`` builds its parser without them."""

from __future__ import annotations

import argparse
import difflib
import re

__all__ = ["OptionValueError", "Parser"]


class OptionValueError(argparse.ArgumentTypeError):
    """An option value out of its range or form; the message is ``VALUE: the fix`` and
    :class:`Parser` puts the option's name in front of it."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and pointing at --help, and
    a value one of the typed options (:mod:`.options`) refuses reads ``--option VALUE: the
    fix``."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}{_suggestion(message)} "
                     f"(see {self.prog} --help)\n")

    def _get_value(self, action, arg_string):  # argparse's one call of an option's type
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            refusal = exc.__context__
            if not isinstance(refusal, OptionValueError):
                raise
            name = max(action.option_strings, key=len) if action.option_strings \
                else (action.metavar or action.dest)
            raise argparse.ArgumentError(None, f"{name} {refusal}") from None


def _suggestion(message: str) -> str:
    """"; did you mean evaluate?" for argparse's invalid-choice message of a near miss."""
    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not match:
        return ""
    choices = re.findall(r"'([^']*)'", match.group(2))
    close = difflib.get_close_matches(match.group(1), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
