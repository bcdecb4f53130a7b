"""A PostgreSQL for tests: the machine's server if one answers, else a throwaway cluster.

Order: ``CLOUDLET_TEST_PG_URL``; a server on 127.0.0.1:5432 (trust auth, as on these machines);
a throwaway cluster made with ``initdb`` when the binaries exist. Without any of them the tests
are skipped with a loud notice, except under CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return port if port < 32768 else 25432 + os.getpid() % 5000


@contextmanager
def _throwaway_cluster() -> Iterator[str]:
    initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    if not initdb[-1]:
        raise FileNotFoundError("initdb")
    bindir = os.path.dirname(initdb[-1])
    root = tempfile.mkdtemp(prefix="cloudlet-pg-")
    os.chmod(root, 0o777)
    data, port = os.path.join(root, "data"), _free_port()
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(
        [*as_user, f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *as_user,
            f"{bindir}/pg_ctl",
            "-D",
            data,
            "-w",
            "-l",
            f"{root}/log",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root}",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield an admin URL of a running PostgreSQL, or skip/fail as described above."""
    explicit = os.environ.get("CLOUDLET_TEST_PG_URL")
    if explicit:
        yield explicit
        return
    for user in ("postgres", "root"):
        if _answers("127.0.0.1", 5432):
            url = f"postgresql://{user}@127.0.0.1:5432/postgres"
            try:
                psycopg.connect(url, connect_timeout=2).close()
            except psycopg.Error:
                continue
            yield url
            return
    try:
        with _throwaway_cluster() as url:
            yield url
            return
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        message = f"PostgreSQL tests need a PostgreSQL server or its binaries ({exc})"
        if os.environ.get("CI"):
            pytest.fail(message)
        print(f"\n!!! SKIPPING PostgreSQL tests: {message} !!!\n")
        pytest.skip(message)


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    name = f"cloudlet_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin_url.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(admin_url, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except psycopg.Error:
                time.sleep(0.2)
