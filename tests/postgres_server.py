"""A real, throwaway PostgreSQL server for tests, started by the tests themselves.

Shared Optuna studies talk to PostgreSQL through SQLAlchemy; mocking that away would test
nothing, so these helpers run ``initdb`` + ``pg_ctl`` on a fresh cluster that listens on
127.0.0.1 only, with password authentication, and tear it down afterwards.

Usage::

    with postgres_server(tmp_dir) as url:  # postgresql://dse:<pw>@127.0.0.1:<port>/dse
        engine = sqlalchemy.create_engine(url)
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

PG_PROGRAMS = ("initdb", "pg_ctl", "postgres")
# Debian/Ubuntu install the server binaries here, not on PATH.
DEBIAN_PG_GLOB = "/usr/lib/postgresql/*/bin"
# Unprivileged account created when running as root on a system without a ``postgres`` user.
FALLBACK_USER = "dse-pg"
DB_NAME = "dse"
DB_USER = "dse"
# A unix socket path (``<dir>/.s.PGSQL.<port>``) must fit in sockaddr_un.sun_path (108 bytes
# with the terminating NUL); keep a margin so a deep pytest tmp dir cannot break startup.
MAX_SOCKET_DIR_LEN = 80
START_ATTEMPTS = 3
LOG_TAIL_LINES = 40


def _has_programs(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) and (directory / name).is_file()
               for name in PG_PROGRAMS)


def _version_key(bin_dir: str) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin: sort "15" above "9.6" numerically, not as strings.
    version = Path(bin_dir).parent.name
    return tuple(int(part) for part in re.findall(r"\d+", version)) or (-1,)


def find_postgres_bin() -> Path | None:
    """Directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None.

    PATH wins (it is what the user chose); then Debian's versioned directories, newest first.
    All three must sit in one directory so that they are of one version.
    """
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and _has_programs(Path(entry)):
            return Path(entry)
    for bin_dir in sorted(glob.glob(DEBIAN_PG_GLOB), key=_version_key, reverse=True):
        if _has_programs(Path(bin_dir)):
            return Path(bin_dir)
    return None


def ensure_postgres_bin() -> Path:
    """Like find_postgres_bin, but installs the Debian ``postgresql`` package when possible
    (root with apt-get) and raises RuntimeError when the server programs cannot be had."""
    found = find_postgres_bin()
    if found is not None:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        # Said in the run's output (pytest's warnings summary): the suite changed the system.
        warnings.warn("the shared-study tests install Debian's postgresql package with apt-get "
                      "(once)", stacklevel=2)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            # A fresh container often has empty package lists; refresh only when needed,
            # since `apt-get update` is the slow, network-hungry part.
            subprocess.run(["apt-get", "update"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
        found = find_postgres_bin()
        if found is not None:
            return found
    raise RuntimeError(
        "PostgreSQL server programs (initdb, pg_ctl, postgres) were not found on PATH or in "
        "/usr/lib/postgresql/*/bin: install the PostgreSQL server package (e.g. "
        "`apt-get install postgresql` on Debian/Ubuntu) to run the shared-study tests.")


def _server_user() -> pwd.struct_passwd | None:
    """The account to run the server as, or None to run it as ourselves.

    PostgreSQL refuses to start as root (a compromised or buggy server would own the machine),
    and initdb/pg_ctl check this too, so under root (containers, CI images) we switch to an
    unprivileged account: Debian's ``postgres`` if the package made one, else our own.
    """
    if os.geteuid() != 0:
        return None
    for name in ("postgres", FALLBACK_USER):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    result = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", FALLBACK_USER], capture_output=True, text=True)
    try:
        # Another test process (pytest-xdist) may have created it first: that is fine.
        return pwd.getpwnam(FALLBACK_USER)
    except KeyError:
        raise RuntimeError(f"could not create system user {FALLBACK_USER!r} to run "
                           f"PostgreSQL as (PostgreSQL refuses root): {result.stderr.strip()}"
                           ) from None


def _can_traverse(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may search every directory from / down to ``path``."""
    groups = {user.pw_gid} | {g for g in os.getgrouplist(user.pw_name, user.pw_gid)}
    for directory in [path, *path.parents]:
        st = directory.stat()
        if st.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _make_workdir(base_dir: Path, user: pwd.struct_passwd | None) -> Path:
    """A fresh directory, owned by the server's user, for the cluster, socket and log.

    Prefer one under base_dir; fall back to /tmp when base_dir is unreachable for the server
    user (pytest's /tmp/pytest-of-root is mode 0700 root) or too deep for a unix socket path.
    """
    base_dir = Path(base_dir).resolve()
    base_dir.mkdir(parents=True, exist_ok=True)
    reachable = user is None or _can_traverse(base_dir, user)
    if reachable and len(str(base_dir)) < MAX_SOCKET_DIR_LEN - 20:
        workdir = Path(tempfile.mkdtemp(prefix="pg-", dir=base_dir))
    else:
        workdir = Path(tempfile.mkdtemp(prefix="dse-pg-", dir="/tmp"))
    # Only the server's user needs to get in; 0700 also guards the trust-authenticated socket.
    workdir.chmod(0o700)
    if user is not None:
        os.chown(workdir, user.pw_uid, user.pw_gid)
    return workdir


def _url_scheme() -> str:
    """The plain scheme users type. The project depends on SQLAlchemy >= 2.1, where a bare
    ``postgresql://`` means psycopg 3 (also a dependency); the tests use what users use."""
    return "postgresql"


def _free_port() -> int:
    # Bind port 0 so the kernel picks a free port; there is a small window before postgres
    # binds it, which _start covers by retrying with another port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty server log)"


class _Runner:
    """Runs the PostgreSQL programs as the server's user, with a clean environment."""

    def __init__(self, bin_dir: Path, workdir: Path, user: pwd.struct_passwd | None):
        self.bin_dir = bin_dir
        self.workdir = workdir
        self.user = user
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        if user is not None:
            env.update(HOME=str(workdir), USER=user.pw_name, LOGNAME=user.pw_name)
        self.env = env

    def run(self, program: str, *args: str, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kwargs = {}
        if self.user is not None:
            # setgid/setgroups/setuid in the child: real and effective ids both become the
            # user's, which is what postgres checks.
            kwargs = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        try:
            return subprocess.run([str(self.bin_dir / program), *args], input=stdin,
                                  capture_output=True, text=True, env=self.env,
                                  cwd=self.workdir, timeout=timeout, **kwargs)
        except (OSError, subprocess.SubprocessError) as exc:  # timeout, missing binary
            raise RuntimeError(f"PostgreSQL test server: {program} failed: {exc}\n"
                               f"--- server log tail ---\n{_tail(self.workdir / 'server.log')}"
                               ) from exc

    def write(self, path: Path, text: str) -> None:
        path.write_text(text)
        path.chmod(0o600)
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)


def _fail(what: str, result: subprocess.CompletedProcess[str] | None, log: Path) -> RuntimeError:
    output = ""
    if result is not None:
        output = f"\n--- {what} output (exit {result.returncode}) ---\n"
        output += (result.stdout + result.stderr).strip()
    return RuntimeError(f"PostgreSQL test server: {what} failed.{output}\n"
                        f"--- server log tail ---\n{_tail(log)}")


def _major_version(runner: _Runner) -> int:
    result = runner.run("postgres", "--version")
    match = re.search(r"(\d+)", result.stdout)
    return int(match.group(1)) if match else 0


def _kill_leftover(data_dir: Path) -> None:
    """SIGKILL the postmaster if `pg_ctl stop` left it running (it should not)."""
    pid_file = data_dir / "postmaster.pid"
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def postgres_server(base_dir: Path) -> Iterator[str]:
    """Start a fresh PostgreSQL cluster and yield its SQLAlchemy URL.

    The URL is ``postgresql+<driver>://dse:<password>@127.0.0.1:<port>/dse`` (see _url_scheme):
    role ``dse`` (cluster superuser) owns database ``dse``; TCP is password-authenticated and
    bound to 127.0.0.1 only. The cluster is stopped (immediate mode) and deleted on exit.
    Failures raise RuntimeError carrying the server log tail.
    """
    bin_dir = ensure_postgres_bin()
    user = _server_user()
    workdir = _make_workdir(base_dir, user)
    runner = _Runner(bin_dir, workdir, user)
    data_dir = workdir / "data"
    log = workdir / "server.log"
    password = secrets.token_urlsafe(18)  # URL-safe: no quoting needed in the URL
    started = False
    try:
        # scram-sha-256 is the default password hashing from PostgreSQL 14; older servers
        # store md5 hashes, which only the md5 method accepts.
        host_auth = "scram-sha-256" if _major_version(runner) >= 14 else "md5"
        pwfile = workdir / "pwfile"
        runner.write(pwfile, password + "\n")
        # -U dse: the bootstrap superuser is our role, so no separate CREATE ROLE is needed.
        # --no-sync: durability is pointless for a throwaway cluster and costs seconds.
        result = runner.run("initdb", "-D", str(data_dir), "-U", DB_USER, f"--pwfile={pwfile}",
                            "--auth-local=trust", f"--auth-host={host_auth}",
                            "--encoding=UTF8", "--locale=C", "--no-sync")
        pwfile.unlink()
        if result.returncode != 0:
            raise _fail("initdb", result, log)

        # Only the password-checked loopback line; initdb's default also admits ::1 and
        # replication. The unix socket stays trusted: it lives in a 0700 directory.
        runner.write(data_dir / "pg_hba.conf",
                     "local all all trust\n"
                     f"host all all 127.0.0.1/32 {host_auth}\n")
        with (data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# dse test server\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{workdir}'\n"
                "max_connections = 200\n"  # several processes x SQLAlchemy pools
                "fsync = off\n"  # throwaway data: trade durability for speed
                "synchronous_commit = off\n"
                "full_page_writes = off\n"
                "logging_collector = off\n")

        # The database must exist before clients connect; single-user mode creates it
        # without a running server or a client program (psql is not always installed).
        result = runner.run("postgres", "--single", "-D", str(data_dir), "-j", "template1",
                            stdin=f'CREATE DATABASE "{DB_NAME}" OWNER "{DB_USER}";\n')
        if result.returncode != 0 or "ERROR" in result.stderr:
            raise _fail("creating database dse (postgres --single)", result, log)

        port = 0
        for attempt in range(START_ATTEMPTS):
            port = _free_port()
            result = runner.run("pg_ctl", "start", "-w", "-t", "60", "-D", str(data_dir),
                                "-l", str(log), "-o", f"-p {port}")
            if result.returncode == 0:
                started = True
                break
            # Someone took the port between our probe and postgres's bind: try another.
            if "could not bind" not in _tail(log) or attempt == START_ATTEMPTS - 1:
                raise _fail("pg_ctl start", result, log)
            _kill_leftover(data_dir)
        yield f"{_url_scheme()}://{DB_USER}:{password}@127.0.0.1:{port}/{DB_NAME}"
    finally:
        try:
            if started:
                result = runner.run("pg_ctl", "stop", "-w", "-t", "60", "-D", str(data_dir),
                                    "-m", "immediate", timeout=90)
                if result.returncode != 0:
                    _kill_leftover(data_dir)
                    time.sleep(0.5)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
