"""``cloudlet server``: open the store, migrate, bootstrap, start the reconciler, serve HTTP."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.api.app import create_app
from cloudlet.api.deps import AppState
from cloudlet.control.clusters import ClusterReconciler
from cloudlet.control.dispatch_batcher import DispatchBatcher
from cloudlet.control.instance_watch import InstanceWatch
from cloudlet.control.instances import InstanceDriver
from cloudlet.control.reconciler import OperationReconciler
from cloudlet.providers.base import NodeProvider
from cloudlet.providers.local import LocalProvider
from cloudlet.services import bootstrap
from cloudlet.services.storage import DataRoot
from cloudlet.store import db

log = logging.getLogger("cloudlet.server")


def resolve_home(home: str | None) -> Path:
    """The server's home, readable by the server's user alone: it holds the credentials, the
    database and the nodes' directories (docs/isolation.md)."""
    path = Path(home or os.environ.get("CLOUDLET_HOME") or Path.home() / ".cloudlet").expanduser()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _private(path: Path) -> IO[str]:
    """Open (creating) a file of the home for reading and appending, mode 0600."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "a+")


@dataclass
class ReplicaIdentity:
    """A replica keeps its id across restarts while it holds its home's lock, so it can take back
    its own leases at once; a second process on the same home gets a fresh id."""

    id: str
    lock_file: IO[str] | None


def replica_identity(home: Path) -> ReplicaIdentity:
    handle = _private(home / "replica.lock")  # held for the process lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return ReplicaIdentity(f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}", None)
    id_file = home / "replica-id"
    with _private(id_file) as ids:
        ids.seek(0)
        if not ids.read().strip():
            ids.write(f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}\n")
    return ReplicaIdentity(id_file.read_text().strip(), handle)


def open_store(
    home: Path, db_url: str | None
) -> tuple[sessionmaker[Session], sessionmaker[Session], str, str]:
    engine = db.make_engine(db_url or os.environ.get("CLOUDLET_DB") or db.sqlite_url(home))
    db.migrate(engine)
    sessions = db.session_factory(engine)
    with sessions.begin() as session:
        inst = bootstrap.bootstrap(session, home)
        installation_id, secret = inst.id, inst.token_secret
    return sessions, db.read_session_factory(engine), installation_id, secret


def build_state(home: Path, db_url: str | None, replica: ReplicaIdentity) -> AppState:
    sessions, read_sessions, installation_id, secret = open_store(home, db_url)
    lease_ttl = float(os.environ.get("CLOUDLET_LEASE_TTL_S", "10"))
    data = DataRoot(Path(os.environ.get("CLOUDLET_DATA") or home / "data"))
    state = AppState(
        sessions=sessions,
        read_sessions=read_sessions,
        token_secret=secret,
        installation_id=installation_id,
        home=home,
        reconciler=None,
        data=data,
    )
    providers: dict[str, NodeProvider] = {"local": LocalProvider(home / "nodes")}
    instances = InstanceDriver(sessions, providers, installation_id, data, lambda: state.endpoint, secret)
    state.reconciler = OperationReconciler(sessions, replica.id, lease_ttl_s=lease_ttl, instances=instances)
    state.clusters = ClusterReconciler(
        sessions,
        replica.id,
        installation_id,
        providers,
        state.notifier,
        data,
        lambda: state.endpoint,
        lease_ttl_s=lease_ttl,
    )
    reconciler = state.reconciler
    assert reconciler is not None
    clusters = state.clusters
    assert clusters is not None
    state.batcher = DispatchBatcher(sessions, data, lambda: state.endpoint, state.notifier, clusters.wake.set)
    state.instance_watch = InstanceWatch(
        sessions, replica.id, data, lease_ttl_s=lease_ttl, on_operation=reconciler.wake.set
    )
    return state


def run_server(
    host: str = "127.0.0.1", port: int = 8571, home: str | None = None, db: str | None = None
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    home_path = resolve_home(home)
    replica = replica_identity(home_path)
    state = build_state(home_path, db, replica)
    app = create_app(state)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    endpoint = f"http://{host}:{bound_port}"
    state.endpoint = endpoint
    with state.sessions() as session:
        bootstrap.write_client_config(home_path, endpoint, bootstrap.default_scope(session))
    log.info(
        "cloudlet %s serving on %s (home %s, replica %s)",
        state.installation_id,
        endpoint,
        home_path,
        replica.id,
    )
    access_log = bool(os.environ.get("CLOUDLET_ACCESS_LOG"))  # one line per request, for diagnosis
    config = uvicorn.Config(app, log_level="info" if access_log else "warning", access_log=access_log)
    uvicorn.Server(config).run(sockets=[sock])
