"""Engine and session factory. SQLite (WAL) is the embedded default; PostgreSQL for replicas."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATION_LOCK_KEY = 0x636C6F75  # "clou"


def normalise_url(url: str) -> str:
    """Accept the plain ``postgresql://`` form users type; use psycopg 3 underneath."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'cloudlet.db'}"


def make_private_sqlite(url: str) -> None:
    """An SQLite store's file, and its -wal and -shm beside it, readable by the server's user
    alone (SQLite gives -wal and -shm the database file's mode)."""
    if not url.startswith("sqlite:///") or url in ("sqlite://", "sqlite:///:memory:"):
        return
    path = Path(url[len("sqlite:///") :].split("?", 1)[0])
    if not path.name or path.name == ":memory:":
        return
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)


def make_engine(url: str) -> Engine:
    url = normalise_url(url)
    if url.startswith("sqlite"):
        make_private_sqlite(url)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=8,
            max_overflow=8,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        writers = _WriterGate()
        event.listen(engine, "begin", writers.begin)
        event.listen(engine, "commit", writers.end)
        event.listen(engine, "rollback", writers.end)
        return engine
    return create_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" listener issue BEGIN itself
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class _WriterGate:
    """SQLite allows one writer. Writers take the write lock at BEGIN (a deferred transaction
    that reads and then writes can fail at once with "database is locked" when another writer got
    in between), and queue for it here first: SQLite's own busy handler sleeps in steps of
    milliseconds, which would put whole milliseconds on every contended write. Read-only
    sessions (see ``read_session_factory``) stay deferred and never wait on writers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def begin(self, conn: Any) -> None:
        if conn.get_execution_options().get("cloudlet_read_only", False):
            conn.exec_driver_sql("BEGIN")
            return
        if not self._lock.acquire(timeout=30):
            raise TimeoutError("waited 30 s for the store's write lock")
        conn.info["cloudlet_writer"] = True
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            self.end(conn)
            raise

    def end(self, conn: Any) -> None:
        if conn.info.pop("cloudlet_writer", False):
            self._lock.release()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def read_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions for requests that only read (GET)."""
    return sessionmaker(engine.execution_options(cloudlet_read_only=True), expire_on_commit=False)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (run on every server start)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Replicas starting together: one migrates, the others wait and then find nothing to do.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
