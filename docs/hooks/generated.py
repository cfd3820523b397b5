"""MkDocs hook: the pages that are generated, never written by hand.

* ``index.md`` is README.md, with its links into ``docs/`` made relative to the site, so the
  README and the site's home page are one text.
* ``reference/cli.md`` is the ``--help`` of every ``dse`` command, rendered from the parser
  that the command line itself runs (:func:`dse.cli.main.build_parser`), so the reference
  cannot drift from the options.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]

#: Help is wrapped at this width whatever the terminal that builds the site.
HELP_COLUMNS = "80"
#: The generated pages, by their path under docs/.
GENERATED = ("index.md", "reference/cli.md")


def on_files(files: Files, config) -> Files:
    for path, content in zip(GENERATED, (home_page(), cli_reference()), strict=True):
        files.append(File.generated(config, path, content=content))
    return files


def home_page() -> str:
    """README.md as the site's home page: ``docs/x.md`` becomes ``x.md``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


def commands(parser: argparse.ArgumentParser,
             path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command and subcommand under ``parser``, depth first, in the parser's order."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def cli_reference() -> str:
    from dse.cli.main import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        sections = [
            "# Command-line reference\n",
            "Generated from the parsers of `dse` itself (`docs/hooks/generated.py`): each "
            "section is what `--help` prints for that command.\n",
        ]
        for path, sub in commands(parser, ("dse",)):
            name = " ".join(path)
            sections.append(f"## `{name}`\n\n```text\n{sub.format_help().rstrip()}\n```\n")
        return "\n".join(sections)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
