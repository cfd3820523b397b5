"""The command line's parser class and the error its typed options raise: argparse, with a
usage error told in one line. Kept apart from :mod:`.options` (which loads pandas and the
engines) so that ``dse --help`` builds its parser without them."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence

__all__ = ["OptionValueError", "Parser", "given_twice"]


class OptionValueError(argparse.ArgumentTypeError):
    """An option value out of its range or form; the message is ``VALUE: the fix`` and
    :class:`Parser` puts the option's name in front of it."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command and pointing at --help, and
    a value one of the typed options (:mod:`.options`) refuses reads ``--option VALUE: the
    fix``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self._given: dict[str, object] = {}  # dest -> the value given, for one parse

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # the record of the values given lives on the parser, not in the namespace (which
        # vars(args) and the recorded command line read), and is kept for one parse; a
        # subcommand's parser keeps its own
        self._given = {}
        try:
            return super().parse_known_args(args, namespace)
        finally:
            self._given = {}

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


class _StoreOnce(argparse._StoreAction):
    """argparse's store of one value, refusing a second, different value of the option:
    argparse keeps the last and drops the first without a word (``--out a.csv --out b.csv``
    wrote b.csv only; ``--phase decode --phase prefill`` evaluated the prefill). The same
    value again is harmless. Every :class:`Parser` stores its options of one value with it, a
    first value equal to the default included; options meant to repeat (append, count,
    flags) are not store actions and are untouched."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(parser, "_given", None)
        if self.option_strings and self.nargs in (None, "?") and isinstance(given, dict):
            if self.dest in given and given[self.dest] != values:
                name = max(self.option_strings, key=len)
                raise argparse.ArgumentError(None, given_twice(
                    name, [given[self.dest], values], parser.prog))
            given[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


def given_twice(option: str, values: Sequence[object], command: str) -> str:
    """The one refusal of different values of an option a command takes once, whether
    :class:`Parser` or the command refuses it: ``--out given twice (a.csv, b.csv): give it once,
    or run dse evaluate once for each``. ``values``: the different values, in the order given.
    Passwords are masked, and values that differ only in theirs say so (the masked texts alone
    read the same: ``postgresql://u:***@h/db, postgresql://u:***@h/db``)."""
    from search.credentials import mask_credentials  # re only; a URL's password

    texts = list(dict.fromkeys(str(v) for v in values))
    masked: dict[str, int] = {}  # masked text -> how many different texts read so
    for text in map(mask_credentials, texts):
        masked[text] = masked.get(text, 0) + 1
    shown = [text if same == 1 else
             f"{text} with {'two' if same == 2 else same} different passwords"
             for text, same in masked.items()]
    count = "twice" if len(texts) == 2 else f"{len(texts)} different values"
    return (f"{option} given {count} ({', '.join(shown)}): give it once, or run {command} once "
            "for each")


def _suggestion(message: str) -> str:
    """"; did you mean evaluate?" for argparse's invalid-choice message of a near miss."""
    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not match:
        return ""
    choices = re.findall(r"'([^']*)'", match.group(2))
    close = difflib.get_close_matches(match.group(1), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
