"""Credentials never reach a file (issue 26, secrets).

A search against the real PostgreSQL server the tests start (``postgres_url``: password
authentication on 127.0.0.1), with the password in the storage URL and a report folder: no file
written anywhere under the test's folder, and nothing printed, holds the password. The usual
ways to keep the password off the command line work: a URL without one, with ``PGPASSWORD`` set
or a ``~/.pgpass`` line (libpq reads both).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reports.html import _provenance
from search.credentials import MASK, mask_credentials, masked_command
from search.storage import has_password, redact
from tests.search_spaces import space_text
from tests.search_spaces import write_space as write_text

# --- the masking function, against hand-written expectations ----------------------------------

MASKED = [
    ("postgresql://dse:s3cret@127.0.0.1:5432/dse", "postgresql://dse:***@127.0.0.1:5432/dse"),
    ("dse search --storage postgresql://u:pw@db.example/dse --report r",
     "dse search --storage postgresql://u:***@db.example/dse --report r"),
    # an unescaped "@" in the password: everything up to the last "@" before the host
    ("postgresql://u:p@ss@host/db", "postgresql://u:***@host/db"),
    ("postgresql+psycopg://u:pw@host/db", "postgresql+psycopg://u:***@host/db"),
    ("postgresql://:pw@host/db", "postgresql://:***@host/db"),
    ("postgresql://u@host/db?password=pw&sslmode=require",
     "postgresql://u@host/db?password=***&sslmode=require"),
    ("host=h user=u password=pw dbname=d", "host=h user=u password=*** dbname=d"),
]
UNCHANGED = ["postgresql://dse@127.0.0.1:5432/dse", "postgresql://127.0.0.1:5432/dse",
             "sqlite:///tmp/study.db", "dse evaluate --model convnext_tiny --hw a100:2"]


@pytest.mark.parametrize("text, masked", MASKED)
def test_passwords_in_urls_and_parameters_are_masked(text, masked):
    assert mask_credentials(text) == masked
    assert has_password(text)


@pytest.mark.parametrize("text", UNCHANGED)
def test_text_without_a_password_is_left_alone(text):
    assert mask_credentials(text) == text


def test_a_command_line_is_masked_argument_by_argument():
    # Inside one argument a password may hold a space or a quote; shlex quotes the argument.
    argv = ["search", "--storage", "postgresql://u:a b'c@h/db", "--storage=postgresql://u:x@h/d"]
    assert masked_command(argv) == ("dse search --storage 'postgresql://u:***@h/db' "
                                    "'--storage=postgresql://u:***@h/d'")


def test_redact_and_the_report_page_mask_too():
    assert redact("postgresql://u:pw@h/db?password=pw") == "postgresql://u:***@h/db?password=***"
    import pandas as pd

    page = _provenance("dse search --storage postgresql://u:pw@h/db", pd.DataFrame())
    assert "pw@" not in page and f"postgresql://u:{MASK}@h/db" in page


# --- a real search against the real PostgreSQL server -----------------------------------------


def _dse(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env)


def _password(url: str) -> str:
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def _without_password(url: str) -> str:
    head, rest = url.split("://", 1)
    user_password, host = rest.split("@", 1)
    return f"{head}://{user_password.split(':', 1)[0]}@{host}"


def _files_holding(folder: Path, secret: str) -> list[str]:
    """Every file under ``folder`` (recursively, binary files too) whose bytes hold
    ``secret``."""
    needle = secret.encode()
    return [str(p.relative_to(folder)) for p in sorted(folder.rglob("*"))
            if p.is_file() and needle in p.read_bytes()]


def _space(folder: Path) -> Path:
    return write_text(folder, space_text(formats='list = ["2:4", "1:8", "2:16"]'))


def test_a_search_with_a_password_url_writes_the_password_nowhere(tmp_path, postgres_url):
    password = _password(postgres_url)
    assert len(password) >= 8  # a real secret, not a substring of everything
    space = _space(tmp_path)
    done = _dse("search", "--space", str(space), "--target", "1.3x_over_2:4",
                "--storage", postgres_url, "--study", "secret-report", "--workers", "2",
                "--out", "out", "--report", "report", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert password not in done.stdout + done.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"index.html", "summary.json", "results.parquet"} <= {p.name for p in written}
    assert _files_holding(tmp_path, password) == []
    # The page still says how it was made, with the password masked.
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    user_host = postgres_url.replace(f":{password}@", f":{MASK}@")
    assert f"Made by <code>dse search --space {space}" in page and user_host in page
    summary = (tmp_path / "out" / "summary.json").read_text(encoding="utf-8")
    assert user_host in summary


def test_pgpassword_keeps_the_password_off_the_command_line(tmp_path, postgres_url):
    password = _password(postgres_url)
    url = _without_password(postgres_url)
    space = _space(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["HOME"] = str(tmp_path)  # no ~/.pgpass: the password can only come from PGPASSWORD
    refused = _dse("search", "--space", str(space), "--target", "1.3x_over_2:4",
                   "--storage", url, "--study", "no-password", "--out", "o1", cwd=tmp_path,
                   env=env)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "--storage" in lines[0] and "Traceback" not in refused.stderr
    done = _dse("search", "--space", str(space), "--target", "1.3x_over_2:4",
                "--storage", url, "--study", "pgpassword", "--out", "o2", "--report", "r2",
                cwd=tmp_path, env={**env, "PGPASSWORD": password})
    assert done.returncode == 0, done.stderr
    assert "meet the target" in done.stdout
    assert _files_holding(tmp_path, password) == []


def test_pgpass_keeps_the_password_off_the_command_line(tmp_path, postgres_url):
    password = _password(postgres_url)
    url = _without_password(postgres_url)
    host_port = url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    user = url.split("://", 1)[1].split("@", 1)[0]
    home = tmp_path / "home"
    home.mkdir()
    pgpass = home / ".pgpass"
    pgpass.write_text(f"{host}:{port}:*:{user}:{password}\n")
    pgpass.chmod(0o600)  # libpq ignores a .pgpass others can read
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["HOME"] = str(home)
    work = tmp_path / "work"
    work.mkdir()
    done = _dse("search", "--space", str(_space(work)), "--target", "1.3x_over_2:4",
                "--storage", url, "--study", "pgpass", "--out", "o", "--report", "r",
                cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert _files_holding(work, password) == []
