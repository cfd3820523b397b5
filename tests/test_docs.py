"""The documentation: README.md and docs/ build into a site with ``mkdocs build --strict``, every
``sh`` and ``python`` block in them runs, every repository path and Python name they mention
exists, and the README stays short and free of words only its authors know.

Examples are collected here rather than by Sybil or pytest-markdown-docs: those run Python
blocks only, and most of dse's examples are shell commands. The convention (see
docs/contributing.md) is an HTML comment on the line right before a fence:
``<!-- skip: REASON -->`` (never run here, with its reason) or ``<!-- requires: EXTRA -->``
(skipped when that extra's packages are not installed).

Blocks of one page run in order and share state, as a reader would run them: shell blocks in
one working folder (a copy of the checkout's files, so that no example writes into the
repository), Python blocks in one namespace, with that folder as the working directory.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+\.md)"\s*$', re.MULTILINE)


def site_pages() -> list[Path]:
    """The README, the pages under docs/, and the Markdown files they include whole
    (pymdownx.snippets: a line ``--8<-- "benchmarks/gpu/COLLECT.md"``)."""
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    included = [ROOT / m["path"] for page in pages
                for m in SNIPPET.finditer(page.read_text(encoding="utf-8"))]
    return pages + [p for p in included if p not in pages]


PAGES = site_pages()

SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py"}
#: The packages each optional extra brings; a block marked ``requires: EXTRA`` runs only when
#: they import.
EXTRAS = {
    "export": ("torch", "timm"),
    "accuracy": ("torch", "timm", "sklearn"),
    "postgres": ("psycopg",),
    "dask": ("distributed",),
}
#: Seconds one shell block may take before it counts as failed (examples are meant to be quick).
BLOCK_TIMEOUT_S = 180
#: At most this many lines in the README (issue 25).
README_MAX_LINES = 250
#: Words that mean something only to the project's authors.
INSIDER = re.compile(r"\bBob\b|\bAlice\b|\bthis task\b|\bthe seed\b|\bthis VM\b|"
                     r"\bthis project's machines?\b", re.IGNORECASE)

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>skip|requires|output-of)\s*:\s*(?P<value>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "sh" or "python"
    code: str
    skip: str | None  # the reason, for <!-- skip: REASON -->
    requires: str | None  # the extra, for <!-- requires: EXTRA -->
    output_of: str | None = None  # for a text block, <!-- output-of: COMMAND -->

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def read_blocks(page: Path) -> list[Block]:
    """The shell and Python blocks of a Markdown page, in order, with their markers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].lower()
        end = i + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence)
                                        and set(lines[end].strip()) == {fence[0]}):
            end += 1
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                         for line in lines[i + 1:end])
        lang = "sh" if info in SHELL else "python" if info in PYTHON else "text"
        marker = MARKER.match(lines[i - 1]) if i else None
        kind, value = (marker["kind"], marker["value"]) if marker else (None, None)
        if lang != "text" or kind == "output-of":
            found.append(Block(page, i + 1, lang, body + "\n",
                               value if kind == "skip" else None,
                               value if kind == "requires" else None,
                               value if kind == "output-of" else None))
        i = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in read_blocks(page)]
BLOCKS = [block for block in ALL_BLOCKS if block.lang != "text"]
#: Shown output, each checked against what its command prints now.
OUTPUTS = [block for block in ALL_BLOCKS if block.lang == "text"]


def missing_packages(extra: str) -> list[str]:
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def ignored(name: str) -> bool:
    """Whether .gitignore's patterns (or git's own folder) cover a file or folder name."""
    gitignore = ROOT / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.is_file() else []
    patterns = [line.strip().strip("/") for line in lines
                if line.strip() and not line.startswith("#")]
    return name == ".git" or any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def checkout_files() -> list[str]:
    """The checkout's files as a fresh clone has them: tracked, plus untracked ones git does not
    ignore (as .ci/run copies them). Outside git (.ci/run tests a copy without .git), every
    file that .gitignore's patterns leave, the virtual environment's folder never entered."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True).stdout.decode()
        return [name for name in listing.split("\0") if name and (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, subfolders, files in os.walk(ROOT):
            subfolders[:] = sorted(d for d in subfolders if not ignored(d))
            found += [os.path.relpath(os.path.join(folder, f), ROOT)
                      for f in sorted(files) if not ignored(f)]
        return found


class PageRun:
    """One page's examples, run in order in one working folder and one Python namespace."""

    def __init__(self, page: Path, folder: Path) -> None:
        self.page = page
        self.folder = folder
        self.blocks = [b for b in BLOCKS if b.page == page]
        self.namespace: dict = {"__name__": "__docs__"}
        self.outcomes: dict[int, str | None] = {}  # line -> None (ran) or the failure
        self.stdout: dict[int, str] = {}  # line -> what a shell block printed

    def run_through(self, block: Block) -> None:
        """Run every earlier runnable block of the page (once), then this one."""
        for earlier in self.blocks:
            if earlier.line not in self.outcomes and runnable(earlier):
                self.outcomes[earlier.line] = self._run(earlier)
            if earlier.line == block.line:
                break
        failure = self.outcomes[block.line]
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        previous = [line for line, outcome in self.outcomes.items()
                    if line < block.line and outcome is not None]
        assert not previous, f"earlier blocks failed (lines {previous})"

    def _run(self, block: Block) -> str | None:
        started = time.perf_counter()
        failure = self._shell(block) if block.lang == "sh" else self._python(block)
        took = time.perf_counter() - started
        print(f"{block.id}: {took:.1f} s")
        return failure

    def _shell(self, block: Block) -> str | None:
        try:
            done = self.shell(block.code)
        except subprocess.TimeoutExpired:
            return f"{block.id}: still running after {BLOCK_TIMEOUT_S} s:\n{block.code}"
        self.stdout[block.line] = done.stdout
        if done.returncode != 0:
            return (f"{block.id}: exit {done.returncode}\n{block.code}\n--- stdout (end) ---\n"
                    f"{done.stdout[-3000:]}\n--- stderr (end) ---\n{done.stderr[-3000:]}")
        return None

    def shell(self, code: str) -> subprocess.CompletedProcess:
        """Run shell code in the page's folder with the environment's commands first on PATH."""
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=self.folder,
                              env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)

    def _python(self, block: Block) -> str | None:
        cwd = os.getcwd()
        os.chdir(self.folder)
        out = io.StringIO()
        try:
            code = compile(block.code, block.id, "exec")
            with contextlib.redirect_stdout(out):
                exec(code, self.namespace)
        except Exception as exc:  # the example's own error, shown as the reader would see it
            return f"{block.id}: {type(exc).__name__}: {exc}\n{block.code}"
        finally:
            os.chdir(cwd)
        return None


def runnable(block: Block) -> bool:
    return block.skip is None and not (block.requires and missing_packages(block.requires))


@pytest.fixture(scope="session")
def checkout_copy(tmp_path_factory) -> Path:
    """A copy of the checkout's files, shared by the pages' working folders."""
    base = tmp_path_factory.mktemp("docs-checkout") / "dse"
    for name in checkout_files():
        target = base / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return base


_RUNS: dict[Path, PageRun] = {}


@pytest.fixture
def page_run(request, checkout_copy, tmp_path_factory):
    def get(page: Path) -> PageRun:
        if page not in _RUNS:
            # The checkout's entries linked, not copied: what a page writes at the top level
            # stays in its own folder, and nothing reaches the repository.
            folder = tmp_path_factory.mktemp("docs-page")
            for entry in checkout_copy.iterdir():
                (folder / entry.name).symlink_to(entry, entry.is_dir())
            _RUNS[page] = PageRun(page, folder)
        return _RUNS[page]
    return get


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_example_runs(block: Block, page_run):
    if block.skip is not None:
        assert block.skip, f"{block.id}: a skip marker gives its reason"
        pytest.skip(f"{block.id}: {block.skip}")
    if block.requires:
        assert block.requires in EXTRAS, (
            f"{block.id}: unknown extra {block.requires!r}; use one of {', '.join(EXTRAS)}")
        missing = missing_packages(block.requires)
        if missing:
            pytest.skip(f"{block.id}: needs the {block.requires} extra "
                        f"({', '.join(missing)} missing)")
    page_run(block.page).run_through(block)


def squeeze(line: str) -> str:
    return " ".join(line.split())


@pytest.mark.parametrize("shown", OUTPUTS, ids=[b.id for b in OUTPUTS])
def test_shown_output_is_what_the_command_prints(shown: Block, page_run):
    """A page that shows a command's output shows what it prints today: every line shown
    (spacing aside) is a line of the output; lines may be left out, none may differ."""
    run = page_run(shown.page)
    # The page's own block of that command, when it has one, is not run a second time.
    same = [b for b in run.blocks
            if b.lang == "sh" and b.code.strip() == shown.output_of and runnable(b)]
    if same:
        run.run_through(same[0])
        stdout = run.stdout[same[0].line]
    else:
        done = run.shell(shown.output_of)
        assert done.returncode == 0, done.stderr[-3000:]
        stdout = done.stdout
    printed = {squeeze(line) for line in stdout.splitlines()}
    stale = [line for line in shown.code.splitlines()
             if line.strip() and squeeze(line) not in printed]
    assert not stale, (f"{shown.id}: `{shown.output_of}` no longer prints these lines:\n"
                       + "\n".join(stale) + "\n--- it prints ---\n" + stdout[-4000:])


def test_examples_were_found():
    # A parser that finds nothing would pass everything above.
    assert len(BLOCKS) >= 20
    assert any(b.lang == "python" for b in BLOCKS) and any(b.lang == "sh" for b in BLOCKS)
    assert [b.line for b in read_blocks(README) if b.lang == "sh"]


def test_reader_sees_markers_only_right_before_a_fence(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- skip: no GPU here -->\n```sh\ndse hw probe --device cuda\n```\n\n"
                    "<!-- requires: export -->\n\n```python\nimport torch\n```\n"
                    "- a list item:\n\n  ```sh\n  dse hw list\n  ```\n"
                    "```toml\nname = 'x'\n```\n"
                    "<!-- output-of: dse hw list -->\n```text\nv100\n```\n"
                    "```text\nnot checked\n```\n")
    page_blocks = read_blocks(page)
    assert [(b.lang, b.skip, b.requires, b.output_of, b.code) for b in page_blocks] == [
        ("sh", "no GPU here", None, None, "dse hw probe --device cuda\n"),
        ("python", None, None, None, "import torch\n"),  # a blank line breaks the marker
        ("sh", None, None, None, "dse hw list\n"),
        ("text", None, None, "dse hw list", "v100\n"),
    ]


# --- the site --------------------------------------------------------------------------------

def hooks():
    """docs/hooks/generated.py, the MkDocs hook that generates pages."""
    spec = importlib.util.spec_from_file_location("docs_hooks_generated",
                                                  ROOT / "docs" / "hooks" / "generated.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_builds_strict(tmp_path):
    """Broken links, anchors, API references and pages missing from the nav fail the build."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is missing: install the test extra, pip install -e '.[test]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "Set-up: the two commands" in home  # the home page is the README
    # The CLI reference is the parsers' own help: every command is there, with its options.
    from dse.cli.main import build_parser
    assert hooks().GENERATED == GENERATED_PAGES
    names = [" ".join(path) for path, _ in hooks().commands(build_parser(), ("dse",))]
    assert {"dse evaluate", "dse search worker", "dse hw probe", "dse bench spmv"} <= set(names)
    for name in names:
        assert f"<code>{name}</code>" in cli, name
    assert "--calibrated" in cli and "--max-acc-drop" in cli
    assert not INSIDER.findall(cli), "the commands' help uses words only the authors know"


# --- what the pages name ---------------------------------------------------------------------

#: Top-level entries of the repository: a code span starting with one of them is a path here.
REPO_ENTRIES = {p.name for p in ROOT.iterdir()
                if not ignored(p.name) and (not p.name.startswith(".") or p.name == ".ci")}
PACKAGES = ("dse", "accelerator_models", "workloads", "formats", "search", "reports",
            "benchmarks")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"^\.?[\w.-]+(/[\w.*-]+)*/?$")
DOTTED = re.compile(r"^(?P<name>[A-Za-z_]\w*(\.[A-Za-z_]\w*)+)(\(.*\))?$")
MODULE_RUN = re.compile(r"python3? -m (?P<module>[\w.]+)")


def prose(page: Path) -> str:
    """The page without its fenced blocks (their commands are run, not read)."""
    text, inside, fence = [], False, ""
    for line in page.read_text(encoding="utf-8").splitlines():
        opening = FENCE.match(line)
        if not inside and opening:
            inside, fence = True, opening["fence"]
        elif inside and line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
            inside = False
        elif not inside:
            text.append(line)
    return "\n".join(text)


#: Pages the site generates (docs/hooks/generated.py): links to them are links to pages.
GENERATED_PAGES = ("index.md", "reference/cli.md")


PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(\.[\w.]+)?$")  # NAME, OUT, NAME.parquet


def named_paths(page: Path) -> list[str]:
    """The code spans of a page's prose that are paths in this repository (a placeholder such
    as ``dse/measure/datasets/NAME.parquet`` stands for any file, and is not one)."""
    spans = [s.strip() for s in CODE_SPAN.findall(prose(page))]
    return [s for s in spans
            if (PATH.match(s) and s.split("/")[0] in REPO_ENTRIES and "/" in s.rstrip("/")
                and not any(PLACEHOLDER.match(part) for part in s.split("/")))
            or s in REPO_ENTRIES]


def resolve(name: str):
    """The module, or the attribute of one, a dotted name names in this checkout; raises
    ImportError or AttributeError where it names none."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def resolves(name: str) -> bool:
    """Whether a dotted name is a module, or an attribute of one, in this checkout."""
    try:
        resolve(name)
    except (ImportError, AttributeError):
        return False
    return True


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_named_paths_exist(page):
    missing = [p for p in named_paths(page)
               if not (list(ROOT.glob(p.rstrip("/"))) if "*" in p else (ROOT / p).exists())]
    links = [target for target in LINK.findall(prose(page))
             if not re.match(r"^[a-z]+:|^#", target)]
    generated = {ROOT / "docs" / name for name in GENERATED_PAGES}
    missing += [t for t in links
                if not ((page.parent / t.split("#")[0]).exists()
                        or (page.parent / t.split("#")[0]).resolve() in generated)]
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_named_python_objects_exist(page):
    if str(ROOT) not in sys.path:  # benchmarks/ is run from the checkout, not installed
        sys.path.insert(0, str(ROOT))
    text = prose(page)
    names = [m["name"] for s in CODE_SPAN.findall(text)
             if (m := DOTTED.match(s.strip())) and m["name"].split(".")[0] in PACKAGES]
    missing = [n for n in names if not resolves(n)]
    missing += [m for m in MODULE_RUN.findall(text)
                if not PLACEHOLDER.match(m) and importlib.util.find_spec(m) is None]
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist: {missing}"


def test_the_name_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("`dse/sim_plan.py` and `examples/my_gpu.toml`, `report/index.html`,\n"
                    "`dse/measure/datasets/NAME.parquet`,\n"
                    "`dse.simulate.SimConfig` and `dse.sim.SimConfig`, `formats.parse(\"2:4\")`\n"
                    "```sh\ncat dse/not_here.py\n```\n")
    assert named_paths(page) == ["dse/sim_plan.py", "examples/my_gpu.toml"]
    assert not resolves("dse.simulate.SimConfig") and resolves("dse.sim.SimConfig")
    assert resolves("formats.parse")


def test_architecture_page_names_every_folder_and_layer():
    """The architecture page matches the checkout: every top-level folder, and every unit of
    the import order that tests/test_layers.py enforces."""
    from tests.test_layers import LAYERS

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    # What a user's runs leave in the checkout (search-report/, report/, ...) is not the
    # project's: a folder counts when it holds a Python, Markdown or TOML file.
    folders = [name for name in checkout_files() if "/" in name
               and name.endswith((".py", ".md", ".toml"))]
    tops = sorted({name.split("/")[0] for name in folders} - {".ci"})
    missing = [f"{top}/" for top in tops if f"`{top}/`" not in text]
    units = [u for u in LAYERS if u.startswith("dse.") and u != "dse.__main__"]
    paths = {u: u.replace(".", "/") for u in units}
    missing += [u for u, path in paths.items()
                if f"`{path}/`" not in text and f"`{path}.py`" not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"


# --- the README ------------------------------------------------------------------------------

def test_readme_is_short_and_plain():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    for page in PAGES:
        words = INSIDER.findall(page.read_text(encoding="utf-8"))
        assert not words, f"{page.relative_to(ROOT)}: {words}"


def test_shipped_spaces_and_examples_are_plain():
    """The files a newcomer is told to copy (the built-in spaces, the examples) use no words
    only the authors know either."""
    files = [*(ROOT / "search" / "spaces").glob("*.toml"), *(ROOT / "examples").glob("*.toml")]
    assert files
    for path in files:
        words = INSIDER.findall(path.read_text(encoding="utf-8"))
        assert not words, f"{path.relative_to(ROOT)}: {words}"


def test_readme_keeps_the_two_setup_commands_for_ci():
    """.ci/run reads the two commands from the set-up section; both leave `dse` usable."""
    text = README.read_text(encoding="utf-8")
    section = re.search(r"^## Set-up: the two commands\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md lost its '## Set-up: the two commands' section"
    lines = section.group(1).splitlines()
    venv = "python3 -m venv .venv && .venv/bin/pip install"
    main_job = [x for x in lines if x.startswith(f"{venv} . && ")]
    tests = [x for x in lines if x.startswith(f"{venv} -e ")]
    assert len(main_job) == 1 and len(tests) == 1
    assert "source .venv/bin/activate" in main_job[0]
