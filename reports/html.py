"""Self-contained HTML reports: one page, every chart with its data beside it.

``write_report`` writes ``index.html`` (Vega, Vega-Lite and vega-embed inlined from
vl-convert's bundle: the page fetches nothing, so it opens offline and from a mail
attachment), and per section ``NAME.svg``, ``NAME.png`` (rendered by vl-convert, which runs
Vega in-process and needs no network either) and ``NAME.csv`` (the frame the chart was drawn
from). Everything is written to a temporary folder beside the target first and moved into
place file by file, ``index.html`` last: an interrupted report never leaves a half-written
page, and a failed one leaves the folder as it was.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import altair as alt
import pandas as pd
import vl_convert

from dse.output import OutputError
from search.credentials import mask_credentials

__all__ = ["ReportError", "Section", "hardware_specs", "write_report"]

# Section names become file names and HTML ids: keep them to what every filesystem and CSS
# selector takes without quoting.
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_RESERVED = {"index"}
#: Rows of a table shown in the page; the CSV beside it always holds all of them.
TABLE_ROWS_SHOWN = 200
# PNG scale: 2x keeps text legible on high-density screens and in slides.
_PNG_SCALE = 2.0


class ReportError(OutputError):
    """A report that cannot be written; the message names the path and the fix."""


@dataclass
class Section:
    """One chart of a report. ``name`` is a file-safe slug (``[a-z0-9][a-z0-9_-]*``): it names
    ``NAME.svg``, ``NAME.png``, ``NAME.csv`` and the page's ``chart-NAME`` element. ``chart``
    is an Altair chart or a Vega-Lite spec (dict); ``data`` the frame it was drawn from."""

    name: str
    title: str
    chart: object
    data: pd.DataFrame
    note: str = ""


# --- Vega-Lite -----------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _vl_version() -> str | None:
    """The Vega-Lite version vl-convert should use: Altair's own (e.g. ``6.4``) when
    vl-convert ships it, so the page's library, the PNG/SVG renderer and the spec's
    ``$schema`` agree; otherwise vl-convert's default (its newest)."""
    major_minor = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return major_minor if major_minor in vl_convert.get_vegalite_versions() else None


@lru_cache(maxsize=1)
def _javascript_bundle() -> str:
    # vl-convert bundles Vega, Vega-Lite and vega-embed (and their dependencies) into one ES
    # script of about 0.9 MB; building it takes about 1.5 s, so once per process.
    bundle = vl_convert.javascript_bundle(vl_version=_vl_version())
    # Inside <script>, only "</script" can end the element early; "<\/" means the same to JS.
    return re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE)


def _spec(section: Section) -> dict:
    """The section's Vega-Lite spec as plain JSON data (validated by Altair when a chart)."""
    chart = section.chart
    if not isinstance(chart, dict) and not hasattr(chart, "to_dict"):
        raise ReportError(f"section {section.name!r}: chart is a {type(chart).__name__}; give "
                          "an Altair chart or a Vega-Lite spec (dict)")
    try:
        spec = chart if isinstance(chart, dict) else chart.to_dict()
        # Round trip: NaN or a non-JSON value would otherwise surface only in the browser.
        return json.loads(json.dumps(spec, allow_nan=False))
    except (ValueError, TypeError) as exc:  # Altair's SchemaValidationError is a ValueError
        raise ReportError(f"section {section.name!r}: the chart is not a valid Vega-Lite spec "
                          f"({_one_line(exc)}); check it with chart.to_json()") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


# --- the page ------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2.5rem; }
nav ul { columns: 2; } .note { color: #555; max-width: 80ch; } .intro { max-width: 100ch; }
.chart { overflow-x: auto; margin: 0.5rem 0; }
.files a { margin-right: 1rem; font-size: 0.9rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #f4f4f4; }
"""

# Runs before the bundle, so an error while the bundle itself loads is recorded too.
_PRELUDE = """window.__dse_errors = [];
window.addEventListener("error", function (e) { window.__dse_errors.push(String(e.message)); });
"""

# vegaEmbed per chart; ``__dse_rendered`` appears only once every embed has settled, so a
# browser test waits for it and then reads ``__dse_errors``. Actions are off: the action menu
# links to the online Vega editor.
_EMBED = """(function () {
  var specs = %s;
  var names = Object.keys(specs);
  function fail(name, err) {
    var msg = "chart " + name + ": " + (err && err.message ? err.message : String(err));
    window.__dse_errors.push(msg);
    console.error(msg);
    throw err;
  }
  var runs = names.map(function (name) {
    try {
      return vegaEmbed("#chart-" + name, specs[name], {renderer: "svg", actions: false})
        .catch(function (err) { fail(name, err); });
    } catch (err) {
      return Promise.reject(err).catch(function (e) { fail(name, e); });
    }
  });
  Promise.allSettled(runs).then(function (results) {
    window.__dse_rendered = results.filter(function (r) {
      return r.status === "fulfilled"; }).length;
  });
})();
"""


def _script_json(value) -> str:
    # JSON is a JavaScript expression; escaping "<" keeps "</script>" in a data label from
    # ending the element, and stays valid JSON.
    return json.dumps(value, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _table_html(frame: pd.DataFrame) -> str:
    shown = frame.head(TABLE_ROWS_SHOWN)
    table = shown.to_html(index=False, na_rep="", border=0, escape=True,
                          float_format=lambda v: f"{v:.6g}")
    if len(frame) > len(shown):
        table += (f'\n<p class="note">First {len(shown)} of {len(frame)} rows; the CSV holds '
                  "all of them.</p>")
    return table


def hardware_specs(hardware: Sequence) -> pd.DataFrame:
    """One row per accelerator (``accelerator_models.Accelerator``): its name and the fields
    the roofline divides by, so a page says which specs its numbers come from."""
    rows = []
    for acc in hardware:
        sparse = getattr(acc, "sparse_tensor", None)
        block = getattr(acc, "block_sparse", None)
        rows.append({
            "hardware": acc.name,
            "dram_bandwidth_bytes_per_s": acc.dram_bandwidth_bytes_per_s,
            **{f"tensor_flops_per_s.{k}": v for k, v in sorted(acc.tensor_flops_per_s.items())},
            **{f"vector_flops_per_s.{k}": v for k, v in sorted(acc.vector_flops_per_s.items())},
            "sparse_tensor.patterns": ", ".join(f"{n}:{m}" for n, m in sparse.patterns)
            if sparse is not None else "none",
            "sparse_tensor.nonzero_rate": sparse.nonzero_rate if sparse is not None else None,
            "block_sparse": (f"from {block.min_block_size}x{block.min_block_size}"
                             if block is not None and block.supported else "no"),
            "overrides": "; ".join(getattr(acc, "overrides", ())),
        })
    return pd.DataFrame(rows)


def _provenance(command: str | None, specs: pd.DataFrame) -> str:
    """The page's record of how it was made: command, dse version, date, hardware specs."""
    import datetime

    import dse

    esc = html.escape
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    # People share the page: a password in a storage URL of the command never goes into it.
    lines = [f"<p class=\"note\">Made by <code>{esc(mask_credentials(command))}</code>"
             if command
             else '<p class="note">Made', f" with dse {esc(dse.__version__)} on {when}.</p>"]
    if len(specs):
        lines.append(f"<details><summary>Hardware specs used</summary>\n"
                     f"{_table_html(specs)}</details>")
    return "".join(lines[:2]) + "\n" + "\n".join(lines[2:])


def _page(title: str, sections: Sequence[Section], specs: dict[str, dict],
          tables: Sequence[tuple[str, str, pd.DataFrame]], provenance: str = "",
          intro: Sequence[str] = ()) -> str:
    esc = html.escape
    toc = [f'<li><a href="#section-{s.name}">{esc(s.title)}</a></li>' for s in sections]
    toc += [f'<li><a href="#table-{slug}">{esc(t)}</a></li>' for t, slug, _ in tables]
    body = []
    for s in sections:
        note = f'<p class="note">{esc(s.note)}</p>' if s.note else ""
        body.append(
            f'<section id="section-{s.name}">\n<h2>{esc(s.title)}</h2>\n{note}\n'
            f'<div class="chart" id="chart-{s.name}"></div>\n'
            f'<p class="files"><a href="{s.name}.svg">SVG</a><a href="{s.name}.png">PNG</a>'
            f'<a href="{s.name}.csv">data (CSV)</a></p>\n</section>')
    for table_title, slug, frame in tables:
        body.append(
            f'<section id="table-{slug}">\n<h2>{esc(table_title)}</h2>\n{_table_html(frame)}\n'
            f'<p class="files"><a href="{slug}.csv">CSV</a></p>\n</section>')
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{_STYLE}</style>",
        f"<script>{_PRELUDE}</script>",
        f"<script>{_javascript_bundle()}</script>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        provenance,
        *(f'<p class="intro">{esc(p)}</p>' for p in intro),
        f"<nav><ul>{''.join(toc)}</ul></nav>" if len(toc) > 1 else "",
        *body,
        f"<script>{_EMBED % _script_json(specs)}</script>",
        "</body>",
        "</html>",
        "",
    ])


# --- files ---------------------------------------------------------------------------------------

def _check_sections(sections: Sequence[Section]) -> None:
    seen = set()
    for s in sections:
        if not isinstance(s, Section):
            raise ReportError(f"sections: expected reports.Section, got {type(s).__name__}")
        if not _SLUG.match(s.name) or s.name in _RESERVED:
            raise ReportError(f"section name {s.name!r} is not a file-safe slug; use lower-case "
                              "letters, digits, '-' and '_' (e.g. 'roofline'), not 'index'")
        if s.name in seen:
            raise ReportError(f"section name {s.name!r} is used twice; give each its own name")
        if not isinstance(s.data, pd.DataFrame):
            raise ReportError(f"section {s.name!r}: data is a {type(s.data).__name__}; give the "
                              "pandas DataFrame the chart was drawn from")
        seen.add(s.name)


def _table_slugs(tables, taken: set[str]) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, file-safe slug, frame) per table; slugs start with ``table-`` so they never
    collide with a section's files, and get ``-2``, ``-3``... when titles collide."""
    out = []
    for item in tables:
        try:
            table_title, frame = item
        except (TypeError, ValueError):
            raise ReportError("tables: give a sequence of (title, DataFrame) pairs") from None
        if not isinstance(frame, pd.DataFrame):
            raise ReportError(f"table {table_title!r}: expected a DataFrame, got "
                              f"{type(frame).__name__}")
        base = "table-" + (re.sub(r"[^a-z0-9]+", "-", str(table_title).lower()).strip("-")[:50]
                           or "untitled")
        slug, n = base, 1
        while slug in taken:
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug)
        out.append((str(table_title), slug, frame))
    return out


def _prepare_parent(folder: Path) -> None:
    """The target itself is created only when files move in; its parent must exist now to
    hold the temporary folder (created, with its parents, when missing)."""
    if folder.exists() and not folder.is_dir():
        raise ReportError(f"{folder}: a file is in the way; remove it or choose another folder")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ReportError(f"{folder}: a file is in the way of its parent folder; remove it or "
                          "choose another folder") from None
    except NotADirectoryError:
        raise ReportError(f"{folder}: a file is in the way of its parent folder; remove it or "
                          "choose another folder") from None
    except OSError as exc:
        raise ReportError(f"{folder}: cannot create its parent folder ({_one_line(exc)}); "
                          "choose a writable location") from None


def _render(staging: Path, section: Section, spec: dict) -> None:
    text = json.dumps(spec)
    try:
        svg = vl_convert.vegalite_to_svg(text, vl_version=_vl_version())
        png = vl_convert.vegalite_to_png(text, vl_version=_vl_version(), scale=_PNG_SCALE)
    except Exception as exc:  # vl-convert raises plain ValueError/RuntimeError for bad specs
        raise ReportError(f"section {section.name!r}: the chart cannot be rendered "
                          f"({_one_line(exc)}); check its spec with chart.to_json()") from None
    (staging / f"{section.name}.svg").write_text(svg, encoding="utf-8")
    (staging / f"{section.name}.png").write_bytes(png)
    section.data.to_csv(staging / f"{section.name}.csv", index=False)


def _move_into(staging: Path, folder: Path, names: list[str]) -> None:
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise ReportError(f"{folder}: cannot create the folder ({_one_line(exc)}); choose a "
                          "writable location") from None
    for name in names:
        if (folder / name).is_dir():
            raise ReportError(f"{folder / name}: a folder is in the way of the report's file; "
                              "remove it or choose another folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ReportError(f"{folder}: not writable; fix its permissions or choose another "
                          "folder")
    # index.html last: whoever opens the page sees either the old one or the finished new one.
    for name in sorted(names, key=lambda n: n == "index.html"):
        try:
            os.replace(staging / name, folder / name)
        except OSError as exc:
            raise ReportError(f"{folder / name}: cannot write ({_one_line(exc)}); fix the "
                              "folder's permissions or choose another folder") from None


def write_report(folder: Path | str, title: str, sections: Sequence[Section],
                 tables: Sequence[tuple[str, pd.DataFrame]] = (), *,
                 command: str | None = None, hardware: Sequence = (),
                 intro: Sequence[str] = ()) -> Path:
    """Write a self-contained report into ``folder``; returns the path of its ``index.html``.

    Per section: ``NAME.svg``, ``NAME.png`` and ``NAME.csv``; per table (title, DataFrame):
    an HTML table in the page (first 200 rows) and ``table-SLUG.csv``. ``index.html`` embeds
    every chart with vega-embed (SVG renderer), its scripts inlined; once every embed has
    settled it sets ``window.__dse_rendered`` to the number of charts shown, and it records
    each embed error in ``window.__dse_errors`` (and on the console).

    The page records how it was made: ``command`` (the command line, e.g. ``dse report
    ...``), dse's version, the date, and the specs of ``hardware`` (accelerators; also written
    as ``hardware-specs.csv``). ``intro``: paragraphs of plain text shown under the title
    (e.g. what the expected numbers are, ``dse report --calibrated``).

    Atomic per file and as a whole: nothing in ``folder`` changes until every file has been
    rendered into a temporary folder beside it; files then move in by ``os.replace``,
    ``index.html`` last. Other files in an existing ``folder`` are left alone. Raises
    :class:`ReportError` (a ``ValueError``) for bad sections, unrenderable charts, and a
    folder that cannot be created or written.
    """
    folder = Path(folder).resolve()
    sections = list(sections)
    _check_sections(sections)
    table_list = _table_slugs(tables, {s.name for s in sections})
    specs = {s.name: _spec(s) for s in sections}
    _prepare_parent(folder)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    except OSError as exc:
        raise ReportError(f"{folder}: cannot write beside it in {folder.parent} "
                          f"({_one_line(exc)}); choose a writable location") from None
    try:
        for section in sections:
            _render(staging, section, specs[section.name])
        for _, slug, frame in table_list:
            frame.to_csv(staging / f"{slug}.csv", index=False)
        hw_specs = hardware_specs(hardware)
        if len(hw_specs):
            hw_specs.to_csv(staging / "hardware-specs.csv", index=False)
        page = _page(title, sections, specs, table_list, _provenance(command, hw_specs),
                     [str(p) for p in intro])
        (staging / "index.html").write_text(page, encoding="utf-8")
        names = [p.name for p in staging.iterdir()]
        _move_into(staging, folder, names)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / "index.html"
