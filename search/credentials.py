"""Credentials kept out of everything dse records: the one masking function.

Every command line and URL that dse writes down (a report's "Made by" line, a dataset's or a
predictor's provenance, a probed spec's sources, a search's summary, messages and logs) goes
through :func:`mask_credentials` or :func:`masked_command` first, so that
``postgresql://USER:PASS@HOST/DB`` is recorded as ``postgresql://USER:***@HOST/DB`` and a
``password=...`` query parameter as ``password=***``. Plain text only: this module imports
nothing heavy (the command line builds every parser with it), unlike :mod:`.storage`.

The usual ways to keep a PostgreSQL password off the command line work unchanged: a URL
without one (``postgresql://USER@HOST/DB``) with ``PGPASSWORD`` set or a ``~/.pgpass`` line
(libpq reads both), or the whole URL in ``DSE_SEARCH_STORAGE`` for ``dse search worker``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

__all__ = ["MASK", "mask_credentials", "masked_command"]

#: What a password is replaced by.
MASK = "***"

# scheme://user:password@host: the password runs to the last "@" before the host (an
# unescaped "@" inside a password is common), within one word of free text.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*):(?P<password>[^\s'\"]*)"
    r"@(?=[^@\s'\"]*(?:[\s'\"]|$))")
# The same inside one argument of a command line, where a password may hold spaces or quotes.
_ARG_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@]*):(?P<password>.*)@(?=[^@]*$)", re.DOTALL)
# libpq and SQLAlchemy also take the password as a query parameter or a keyword.
_KEYWORD_PASSWORD = re.compile(r"(?P<head>\b(?:password|passwd|pwd)=)(?P<password>[^&\s'\"]+)",
                               re.IGNORECASE)


def _masked(match: re.Match) -> str:
    return f"{match.group('head')}:{MASK}@" if match.group("password") else match.group(0)


def _keyword(match: re.Match) -> str:
    return f"{match.group('head')}{MASK}"


def mask_credentials(text: str) -> str:
    """``text`` with every password in a URL (``scheme://user:PASSWORD@host``) or a
    ``password=`` parameter replaced by ``***``; everything else as it was."""
    return _KEYWORD_PASSWORD.sub(_keyword, _URL_PASSWORD.sub(_masked, str(text)))


def _mask_argument(argument: str) -> str:
    return _KEYWORD_PASSWORD.sub(_keyword, _ARG_PASSWORD.sub(_masked, argument))


def masked_command(argv: Sequence[str], program: str = "dse") -> str:
    """The command line ``program argv...`` as a shell takes it (``shlex.join``), every
    argument's credentials masked: what files and pages record as "the command"."""
    return shlex.join([program, *(_mask_argument(str(a)) for a in argv)])
