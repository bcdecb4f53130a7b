"""Engines and session factories. SQLite (WAL) is the embedded default; PostgreSQL for replicas.

A server opens two engines on one store (``open_engines``): the API's, whose pool is sized with
the thread pool that serves requests, and the control plane's (reconcilers, the dispatch
batcher's writer), so that no amount of API load can take the connections the control loops need.
Waits are bounded: an API request that cannot get a connection within ``pool_timeout_s``, or the
store's write lock within ``write_timeout_s``, raises ``StoreBusy`` (answered 503 + Retry-After)
instead of queueing for half a minute.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, exc, text
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger("cloudlet.store")
MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATION_LOCK_KEY = 0x636C6F75  # "clou"
CONTROL_TIMEOUT_S = 30.0  # the control loops retry on their next pass; they may wait longer
PG_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout expired
SQLITE_BUSY = 5  # the file's lock stayed held past busy_timeout ("database is locked")


def load_json(text: str | bytes) -> Any:
    """A stored JSON column's value: orjson (the specs of a job list's page are decoded on every
    read), or the standard library for what orjson refuses (an integer beyond 64 bits, NaN)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


class EncodedJson(str):
    """A JSON column's value already encoded (outside the write lock: a thousand run specs cost
    more to encode than to insert); written as it is."""


def dump_json(value: Any) -> str:
    """A JSON column's text: what SQLAlchemy's default (``json.dumps``) writes, unless encoded."""
    if isinstance(value, EncodedJson):
        return str.__str__(value)
    return json.dumps(value)


class StoreBusy(exc.TimeoutError):
    """The store could not be had in time (no pooled connection, or the write lock was held):
    the request should be retried shortly. A ``sqlalchemy.exc.TimeoutError``, like the pool's own."""


@dataclass(frozen=True)
class StoreLimits:
    """How many requests run at once and how long they wait for the store.

    ``api_threads`` is the size of each of the two pools of request threads: AnyIO's limiter
    (FastAPI's handlers run sync endpoints there) and ``api/direct.py``'s (the endpoints that
    need no dependency solving). Each thread holds at most one connection at a time, and a
    request's session is closed just after its answer is sent, so the API pool is both pools'
    threads plus headroom for sessions being closed: a request only waits for a connection when
    something is wrong, and then not for long. The control pool serves the control plane's few
    threads (one connection each)."""

    # 4 request threads: the server is one GIL; more threads only contend for it (at 100
    # clients, 8 threads cost ~20 % more CPU per request than 4; 2-4 measured alike), while a
    # few keep a slow request (a download being packed) from holding every other one up.
    api_threads: int = 4
    api_pool: int = 12
    control_pool: int = 6
    # Warm read sessions (``WarmReads``): one per request thread of both pools by default.
    warm_reads: int = 8
    pool_timeout_s: float = 3.0
    write_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreLimits:
        env = os.environ if env is None else env
        threads = int(env.get("CLOUDLET_API_THREADS") or cls.api_threads)
        return cls(
            api_threads=threads,
            api_pool=int(env.get("CLOUDLET_DB_POOL_SIZE") or 2 * threads + max(4, threads // 2)),
            control_pool=int(env.get("CLOUDLET_DB_CONTROL_POOL_SIZE") or cls.control_pool),
            warm_reads=int(env.get("CLOUDLET_DB_WARM_READS") or 2 * threads),
            pool_timeout_s=float(env.get("CLOUDLET_DB_POOL_TIMEOUT_S") or cls.pool_timeout_s),
            write_timeout_s=float(env.get("CLOUDLET_DB_WRITE_TIMEOUT_S") or cls.write_timeout_s),
        )


@dataclass(frozen=True)
class Engines:
    api: Engine
    control: Engine
    limits: StoreLimits
    reads: Engine  # the warm read sessions' connections (``WarmReads``), a pool of their own


def normalise_url(url: str) -> str:
    """Accept the plain ``postgresql://`` form users type; use psycopg 3 underneath."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'cloudlet.db'}"


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL (None: not SQLite, or in memory)."""
    if not url.startswith("sqlite:///") or url in ("sqlite://", "sqlite:///:memory:"):
        return None
    path = Path(url[len("sqlite:///") :].split("?", 1)[0])
    return None if not path.name or path.name == ":memory:" else path


def make_private_sqlite(url: str) -> None:
    """An SQLite store's file, and its -wal and -shm beside it, readable by the server's user
    alone (SQLite gives -wal and -shm the database file's mode)."""
    path = sqlite_path(url)
    if path is None:
        return
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)


def open_engines(url: str, limits: StoreLimits | None = None, processes: bool = False) -> Engines:
    """The API's engine and the control plane's, on the same store. On SQLite they share one
    write gate: the file has one writer, whichever pool its connection came from. PROCESSES: the
    server's other worker processes write the same file; the gate orders their writers too."""
    limits = limits or StoreLimits.from_env()
    gate = None
    if normalise_url(url).startswith("sqlite"):
        path = sqlite_path(normalise_url(url))
        gate = _WriterGate(_FileGate(Path(f"{path}.writer")) if processes and path else None)
    api = make_engine(url, limits.api_pool, limits.pool_timeout_s, limits.write_timeout_s, gate)
    control = make_engine(url, limits.control_pool, CONTROL_TIMEOUT_S, None, gate)
    reads = make_engine(url, max(1, limits.warm_reads), limits.pool_timeout_s, limits.write_timeout_s, gate)
    return Engines(api, control, limits, reads)


def make_engine(
    url: str,
    pool_size: int = 16,
    pool_timeout_s: float = CONTROL_TIMEOUT_S,
    write_timeout_s: float | None = None,
    gate: _WriterGate | None = None,
) -> Engine:
    """One engine with a fixed pool (no overflow: the size is the bound). WRITE_TIMEOUT_S bounds
    a writer's wait for SQLite's write gate (GATE, shared by the engines of one file; 30 s when
    None) or for a PostgreSQL lock (no bound when None)."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        make_private_sqlite(url)
        # SQLite's own busy wait matters only when another process holds the file's write lock
        # (the gate orders this process's writers): it is bounded like the gate.
        busy_s = CONTROL_TIMEOUT_S if write_timeout_s is None else write_timeout_s
        engine = create_engine(
            url,
            json_deserializer=load_json,
            json_serializer=dump_json,
            connect_args={"check_same_thread": False, "timeout": busy_s},
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=pool_timeout_s,
        )
        event.listen(engine, "connect", functools.partial(_sqlite_pragmas, busy_ms=int(busy_s * 1000)))
        writers = gate or _WriterGate()
        event.listen(engine, "begin", functools.partial(writers.begin, timeout_s=busy_s))
        event.listen(engine, "commit", writers.end)
        event.listen(engine, "rollback", writers.end)
        event.listen(engine, "handle_error", _sqlite_busy)
        return engine
    connect_args: dict[str, Any] = {}
    if write_timeout_s is not None:
        # A statement that waits this long for a row, table or advisory lock gives up (SQLSTATE
        # 55P03): the same "busy, retry shortly" as a full pool.
        connect_args["options"] = f"-c lock_timeout={int(write_timeout_s * 1000)}"
    engine = create_engine(
        url,
        json_deserializer=load_json,
        json_serializer=dump_json,
        connect_args=connect_args,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=pool_timeout_s,
        pool_pre_ping=True,
    )
    event.listen(engine, "handle_error", _pg_busy)
    return engine


def _pg_busy(context: Any) -> BaseException | None:
    if getattr(context.original_exception, "sqlstate", None) == PG_LOCK_NOT_AVAILABLE:
        return StoreBusy(f"waited too long for a lock in the store: {context.original_exception}")
    return None


def _sqlite_busy(context: Any) -> BaseException | None:
    if getattr(context.original_exception, "sqlite_errorcode", None) == SQLITE_BUSY:
        return StoreBusy(f"the store's file stayed locked: {context.original_exception}")
    return None


def _sqlite_pragmas(dbapi_conn: Any, record: Any, busy_ms: int = 30_000) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" listener issue BEGIN itself
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
    cursor.close()
    record.info["cloudlet_busy_ms"] = int(busy_ms)  # the gate changes it per writer when it must


class _WriterGate:
    """SQLite allows one writer. Writers take the write lock at BEGIN (a deferred transaction
    that reads and then writes can fail at once with "database is locked" when another writer got
    in between), and queue for it here first: SQLite's own busy handler sleeps in steps of
    milliseconds, which would put whole milliseconds on every contended write. Read-only
    sessions (see ``read_session_factory``) start no transaction at all: in WAL mode a SELECT
    never waits on a writer, and each one reads the latest committed state.

    The wait is bounded per engine: an API writer that cannot get the gate within its write
    timeout raises ``StoreBusy`` (503 + Retry-After: a client waiting 30 s here is a hang too);
    the control plane's writers wait longer and retry on their next pass."""

    def __init__(self, processes: _FileGate | None = None) -> None:
        self._lock = threading.Lock()
        self._processes = processes

    def begin(self, conn: Any, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        if conn.get_execution_options().get("cloudlet_read_only", False):
            # No BEGIN: each SELECT is its own implicit read transaction (autocommit). A request
            # that only reads saves the BEGIN and the ROLLBACK at its end (two statements, ~80 µs
            # of CPU, and two of the GIL releases where a thread can lose the GIL for a whole
            # switch interval under load), and holds no snapshot between its statements, so
            # the WAL can be checkpointed back to its start while readers keep coming.
            return
        # A session may bound its own wait (the dispatch batcher answers API requests).
        timeout_s = float(conn.get_execution_options().get("cloudlet_write_timeout_s", timeout_s))
        deadline = time.monotonic() + timeout_s
        if not self._lock.acquire(timeout=timeout_s):
            raise StoreBusy(f"waited {timeout_s:g} s for the store's write lock")
        if self._processes is not None and not self._processes.acquire(deadline):
            self._lock.release()
            raise StoreBusy(f"waited {timeout_s:g} s for the store's write lock (other workers)")
        conn.info["cloudlet_writer"] = True
        try:
            busy_ms = int(timeout_s * 1000)
            if conn.info.get("cloudlet_busy_ms") != busy_ms:  # this connection's bound until now
                conn.connection.driver_connection.execute(f"PRAGMA busy_timeout={busy_ms}")
            conn.info["cloudlet_busy_ms"] = busy_ms
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            self.end(conn)
            raise

    def end(self, conn: Any) -> None:
        if conn.info.pop("cloudlet_writer", False):
            if self._processes is not None:
                self._processes.release()
            self._lock.release()


class _FileGate:
    """The write gate between the worker processes of one server (``cloudlet server --workers``):
    an exclusive ``flock`` on a file beside the database, taken after the process's own gate.
    Without it a writer meeting another process's write lock waits in SQLite's busy handler,
    which sleeps 1, 2, 5, 10… ms between tries; here it tries again every 0.1-1 ms. The kernel
    releases the lock of a process that dies."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def acquire(self, deadline: float) -> bool:
        delay = 0.0001
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
            time.sleep(delay)
            delay = min(delay * 2, 0.001)

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


class SessionEnder:
    """Ends sessions (ROLLBACK and the pool's check-in: store I/O) on a thread of its own, for
    code that must not block: an async request's teardown hands its session over with a queue put
    and returns at once. The thread takes every session waiting without sleeping in between, so
    under load it costs less than a thread hop each; each session it holds has a pooled
    connection, so the pools' headroom covers the queue."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Session, Callable[[Session], None] | None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def end(self, session: Session, ending: Callable[[Session], None] | None = None) -> None:
        """End SESSION with ENDING (``Session.close`` unless given) on the ender's thread."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="session-ender", daemon=True)
                    self._thread.start()
        self._queue.put((session, ending))

    def _run(self) -> None:
        while True:
            session, ending = self._queue.get()
            try:
                # close() rolls back and returns the connection without the pool's own reset;
                # rollback() first would end the transaction and leave the pool to roll back again.
                if ending is None:
                    session.close()
                else:
                    ending(session)
            except Exception:  # a broken connection is discarded by the pool; go on
                log.exception("ending a request's session failed")


ENDER = SessionEnder()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def read_only(sessions: sessionmaker[Session]) -> Session:
    """A session of SESSIONS' engine that takes no write lock (as ``read_session_factory``'s):
    for a control loop's look at the store that most passes find nothing in, so it does not
    queue for the writer (on SQLite, across the server's workers) to read."""
    bind = sessions.kw["bind"]
    assert isinstance(bind, Engine)
    return Session(_read_only_engine(bind), expire_on_commit=False)


_READ_ONLY_ENGINE = "_cloudlet_read_only_engine"


def _read_only_engine(engine: Engine) -> Engine:
    """ENGINE with ``cloudlet_read_only``, made once per engine and kept on it (a cycle: collected
    with it). A fresh one per session cost ~28 µs a look more than a kept one (its event dispatch is
    joined with the parent's and filled in on first use): enough that a look without the write lock
    cost as much CPU as the BEGIN IMMEDIATE and ROLLBACK it saved."""
    kept = engine.__dict__.get(_READ_ONLY_ENGINE)
    if kept is None:
        kept = engine.__dict__[_READ_ONLY_ENGINE] = engine.execution_options(cloudlet_read_only=True)
    return kept


def rows_connection(session: Session) -> Connection:
    """SESSION's connection, for a statement read as plain rows (not ORM objects: their loading
    costs more than a small query). What the session holds pending is flushed first, as the ORM's
    autoflush would before a query of its own, so the rows include it."""
    if session.new or session.dirty or session.deleted:
        session.flush()
    return session.connection()


def read_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions for requests that only read (GET): no transaction is begun (``_WriterGate``), so
    each statement sees the latest commit; a write made through one is not rolled back at its end,
    so nothing that writes may use them."""
    return sessionmaker(_read_only_engine(engine), expire_on_commit=False)


class WarmReads:
    """Read-only sessions for API requests, kept between requests instead of made for each.

    A request's fresh session costs ~100-150 µs of CPU before and after its statements (the
    session, its transaction, the pool's check-out and check-in, the first statement's setup in
    a new transaction); a warm one is a ``Session`` bound to a connection it keeps checked out
    of its own pool (``Engines.reads``: the API's pool, which writers use, is not touched). When
    a request ends its session is closed (``release``): its transaction is rolled back (on
    PostgreSQL the snapshot ends there; SQLite's read sessions hold none, ``_WriterGate``) and
    its identity map emptied, so nothing a request loaded is seen by the next one; the
    connection stays. At most ``size`` are made; a request that finds none idle gets a fresh
    session of FALLBACK (the API engine's read sessions), as before. A warm session idle longer
    than ``MAX_IDLE_S`` gives its connection back to its pool and takes one again, so the
    pool's pre-ping (PostgreSQL) checks a connection that may have been idle for long."""

    MAX_IDLE_S = 2.0

    def __init__(self, engine: Engine, fallback: sessionmaker[Session], size: int) -> None:
        self._engine = _read_only_engine(engine)
        self._fallback = fallback
        self._size = size
        self._made = 0
        self._lock = threading.Lock()
        self._idle: list[tuple[float, Session]] = []  # (released at, session), newest last

    def lease(self) -> Session:
        """A read session: a warm one if one is idle (or may be made), else a fresh one."""
        try:
            released_at, session = self._idle.pop()  # atomic: no lock on the hot path
        except IndexError:
            return self._make()
        if time.monotonic() - released_at > self.MAX_IDLE_S:
            self._discard(session)
            return self._make()
        return session

    def release(self, session: Session) -> None:
        """End SESSION's request: a warm one is closed and kept, a fresh one closed."""
        if not session.info.get("cloudlet_warm"):
            session.close()
            return
        try:
            session.close()  # ROLLBACK (no-op when no transaction), identity map emptied
            if len(session.info) > 1:  # a request's memos (``session.info``) end with it
                session.info.clear()
                session.info["cloudlet_warm"] = True
        except Exception:
            log.exception("ending a warm read session failed")
            self._discard(session)
            return
        connection = session.bind
        if not isinstance(connection, Connection) or connection.closed or connection.invalidated:
            self._discard(session)
            return
        self._idle.append((time.monotonic(), session))

    def _make(self) -> Session:
        with self._lock:
            if self._made >= self._size:
                return self._fallback()
            self._made += 1
        try:
            connection = self._engine.connect()
        except BaseException:
            with self._lock:
                self._made -= 1
            raise
        return Session(bind=connection, expire_on_commit=False, info={"cloudlet_warm": True})

    def _discard(self, session: Session) -> None:
        with self._lock:
            self._made -= 1
        connection = session.bind
        try:
            session.close()
            if isinstance(connection, Connection):
                connection.close()
        except Exception:  # a broken connection is discarded by the pool; go on
            log.exception("closing a warm read session failed")


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
