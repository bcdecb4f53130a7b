"""``cloudlet server``: open the store, migrate, bootstrap, start the reconciler, serve HTTP (and
the same app over HTTPS on a second port, for the ARM facade: ``cloudlet/tls.py``)."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import logging
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import anyio.to_thread
import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from cloudlet import tls
from cloudlet.api import direct
from cloudlet.api.app import create_app
from cloudlet.api.deps import AppState, HttpsEndpoint, ServerURL
from cloudlet.control import online_shared
from cloudlet.control.attached_vms import VmDriver
from cloudlet.control.clusters import ClusterReconciler
from cloudlet.control.compute_steps import ComputeSteps
from cloudlet.control.dispatch_batcher import DispatchBatcher
from cloudlet.control.event_retention import EventRetentionLoop
from cloudlet.control.instance_watch import InstanceWatch
from cloudlet.control.instances import InstanceDriver
from cloudlet.control.job_schedules import JobScheduleLoop
from cloudlet.control.notifications import NotificationLoop
from cloudlet.control.online_inflight import InFlightBoard, board_path
from cloudlet.control.parent_jobs import ParentJobLoop
from cloudlet.control.reconciler import OperationReconciler
from cloudlet.control.replica_hosts import NodeMaker
from cloudlet.control.steps import StepRegistry
from cloudlet.domain import forwarded, public_url
from cloudlet.domain.assets.uploads import UploadLimits
from cloudlet.providers.provider_set import ProviderSet
from cloudlet.providers.registry import REGISTRY, ProviderContext
from cloudlet.services.compute import instance_activity, locations
from cloudlet.services.compute.agent_protocol import AgentProtocol
from cloudlet.services.compute.host_keys import HostKeyBook
from cloudlet.services.core import bootstrap, effects, wake
from cloudlet.services.core import events as _events  # noqa: F401  (registers the feed's writers)
from cloudlet.services.core.feed_wake import FeedWake
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch
from cloudlet.services.tracking import tracking
from cloudlet.store import db
from cloudlet.studio import app as studio

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


@dataclass(frozen=True)
class Store:
    """The opened store: the API's sessions (writes, reads) and the control plane's own."""

    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]
    warm_reads: db.WarmReads  # the API requests' read sessions, kept between requests
    control: sessionmaker[Session]  # reconcilers, instance watch
    # The dispatch batcher's writer: the control plane's pool (API load cannot starve it), but it
    # answers API requests, so its wait for SQLite's write gate is the API's.
    dispatch: sessionmaker[Session]
    installation_id: str
    token_secret: str
    limits: db.StoreLimits


def open_store(
    home: Path, db_url: str | None, limits: db.StoreLimits | None = None, processes: bool = False
) -> Store:
    """PROCESSES: a worker of ``--workers N`` (its writers queue with the other workers')."""
    url = db_url or os.environ.get("CLOUDLET_DB") or db.sqlite_url(home)
    engines = db.open_engines(url, limits, processes=processes)
    db.migrate(engines.control)
    control = db.session_factory(engines.control)
    with control.begin() as session:
        inst = bootstrap.bootstrap(session, home)
        installation_id, secret = inst.id, inst.token_secret
    bounded = engines.control.execution_options(cloudlet_write_timeout_s=engines.limits.write_timeout_s)
    read_sessions = db.read_session_factory(engines.api)
    return Store(
        db.session_factory(engines.api),
        read_sessions,
        db.WarmReads(engines.reads, read_sessions, engines.limits.warm_reads),
        control,
        db.session_factory(bounded),
        installation_id,
        secret,
        engines.limits,
    )


def provider_set(
    sessions: sessionmaker[Session],
    home: Path,
    installation_id: str,
    reads: sessionmaker[Session] | None = None,
) -> ProviderSet:
    """Each location's provider, from the registry and the location's stored configuration;
    SSH providers keep host keys in the store (READS: read-only sessions for their lookups)."""

    def load() -> list[locations.LocationProvider]:
        # Read each second by every worker's loops: without the write lock.
        with db.read_only(sessions) as session:
            return locations.provider_settings(session)

    context = ProviderContext(home, installation_id, host_keys=HostKeyBook(sessions, reads))
    return ProviderSet(REGISTRY, context, load)


def build_state(
    home: Path,
    db_url: str | None,
    replica: ReplicaIdentity,
    bus: wake.WakeBus | None = None,
    worker: int = 0,
) -> tuple[AppState, Store]:
    """BUS: the wake-ups to and from the other workers of this server (none when it runs alone);
    WORKER: this worker's slot among them (worker 0 runs the online deployments' replicas,
    control/online_shared.py)."""
    bus = bus or wake.WakeBus()
    store = open_store(home, db_url, processes=bus.shared)
    # The control loops use their own pool: API load cannot take the connections they need.
    control, installation_id, secret = store.control, store.installation_id, store.token_secret
    lease_ttl = float(os.environ.get("CLOUDLET_LEASE_TTL_S", "10"))
    data = DataRoot(Path(os.environ.get("CLOUDLET_DATA") or home / "data"), UploadLimits.from_env())
    url = ServerURL()  # where agents and the server itself reach it
    public = ServerURL()  # the base of the links it hands out (AppState.endpoint), set by serve
    notifier = NodeNotifier(peers=wake.NodePeers(bus) if bus.shared else None)
    providers = provider_set(control, home, installation_id, store.read_sessions)
    https = HttpsEndpoint()  # set once the TLS socket is bound (bind_listeners)
    instances = InstanceDriver(
        control, providers, installation_id, data, url, secret, https=lambda: (https.value, https.ca_file)
    )
    vms = VmDriver(control, providers, installation_id, url)
    reconciler = OperationReconciler(
        control,
        replica.id,
        StepRegistry(ComputeSteps(instances, vms)),
        lease_ttl_s=lease_ttl,
    )
    clusters = ClusterReconciler(
        control,
        replica.id,
        installation_id,
        providers,
        notifier,
        data,
        url,
        # the clusters' reconcile interval (a pass also runs at once when woken): 1 s by default
        poll_s=float(os.environ.get("CLOUDLET_CLUSTER_PASS_S") or 1.0),
        lease_ttl_s=lease_ttl,
    )
    parents = ParentJobLoop(
        control,
        replica.id,
        data,
        notifier,
        url,
        clusters.wake.set,
        metric_history=tracking.metric_history,  # a sweep's primary metric, per trial
        lease_ttl_s=lease_ttl,
    )
    online, online_wakeups = online_shared.runtime(
        bus,
        worker == 0,
        store.sessions,
        data,
        home,
        installation=installation_id,
        replica_id=replica.id,  # holds the online lease while this server runs the replicas
        lease_ttl_s=lease_ttl,
        # the gateway's in-flight count (the 429 rule, the autoscaler) across the workers
        inflight=InFlightBoard(board_path(home), worker, bus.members) if bus.shared else None,
        # managed replicas' nodes, made by the worker that runs the replicas (an agent's reports
        # may reach any worker: control/replica_board_shared.py)
        nodes=NodeMaker(control, providers, installation_id, url) if worker == 0 else None,
    )
    # Job schedules (az ml schedule): due fires make their jobs (control/job_schedules.py).
    schedules = JobScheduleLoop(
        control,
        replica.id,
        data,
        notifier,
        url,
        clusters.wake.set,
        poll_s=float(os.environ.get("CLOUDLET_SCHEDULE_PASS_S") or 1.0),
        lease_ttl_s=lease_ttl,
    )
    # Job notifications: the outbox's sender, under its own lease (control/notifications.py).
    notifications = NotificationLoop(
        control, replica.id, lambda: public.value or url.value, lease_ttl_s=lease_ttl
    )
    # The events feed's streams, woken by the commits that record events, here and in the other
    # workers (services/core/feed_wake.py).
    feed = FeedWake(share=lambda payload: bus.send(wake.EVENTS, payload)) if bus.shared else FeedWake()
    if bus.shared:
        _share_wakeups(bus, notifier, reconciler, clusters, parents, online_wakeups, notifications, feed)
    publisher = effects.Publisher(
        wake_node=notifier.notify,
        on_demand=clusters.wake.set,
        on_operations=reconciler.wake.set,
        on_parent_work=parents.wake.set,
        on_notifications=notifications.wake.set,
        on_events=feed.published,
    )
    for made in (store.dispatch, control):  # their owners hand placed run specs over themselves
        publisher.install(made)
    # A request's placed run specs go to the agents' long polls once it commits; a request that
    # changed an online endpoint's desired state waits (bounded) for the online loop to take it.
    requests = replace(
        publisher,
        after=lambda session: notifier.deliver(dispatch.deliveries(session)),
        on_endpoints=online.loop.changed,
    )
    requests.install(store.sessions)
    batcher = DispatchBatcher(
        store.dispatch, data, url, notifier, clusters.wake.set, queue_timeout_s=store.limits.write_timeout_s
    )
    instance_watch = InstanceWatch(
        control, replica.id, data, lease_ttl_s=lease_ttl, on_operation=reconciler.wake.set
    )

    def wake_nodes(nodes: list[str]) -> None:
        for node_id in set(nodes):
            notifier.notify(node_id)

    agents = AgentProtocol(
        store.sessions, store.read_sessions, data, url, notifier, wake_nodes, clusters.wake.set
    )
    state = AppState(
        sessions=store.sessions,
        read_sessions=store.read_sessions,
        warm_reads=store.warm_reads,
        token_secret=secret,
        installation_id=installation_id,
        home=home,
        data=data,
        url=url,
        notifier=notifier,
        loops=(
            reconciler,
            clusters,
            instance_watch,
            parents,
            EventRetentionLoop(control),
            notifications,
            schedules,
        ),
        batcher=batcher,
        agents=agents,
        online=online,
        https=https,
        replica_id=replica.id,
        public=public,
        feed=feed,
    )
    return state, store


def _share_wakeups(
    bus: wake.WakeBus,
    notifier: NodeNotifier,
    reconciler: OperationReconciler,
    clusters: ClusterReconciler,
    parents: ParentJobLoop,
    online: dict[bytes, Callable[[str], None]],
    notifications: NotificationLoop,
    feed: FeedWake,
) -> None:
    """What wakes a loop or a poll in this worker wakes it in the others too (``services/core/wake.py``);
    set before anything holds the loops' ``wake.set``."""
    operations = reconciler.wake = wake.SharedEvent(bus, wake.OPERATIONS)
    cluster_loop = clusters.wake = wake.SharedEvent(bus, wake.CLUSTERS)
    parent_loop = parents.wake = wake.SharedEvent(bus, wake.PARENTS)
    notification_loop = notifications.wake = wake.SharedEvent(bus, wake.NOTIFICATIONS)
    instance_activity.share(lambda name, at: bus.send(wake.ACTIVITY, f"{name} {at!r}"))

    def leading(_payload: str) -> None:
        # A worker that holds no cluster's lease would only try the leases (a write) and wait
        # again: it passes at its interval, which is what takes over a lapsed lease.
        if clusters.leases.holds_any(clusters.clock.now()):
            cluster_loop.set_here()

    def parents_leading(_payload: str) -> None:  # as for clusters: only the lease holder passes
        if parents.leases.holds_any(parents.clock.now()):
            parent_loop.set_here()

    def notifications_leading(_payload: str) -> None:  # as for clusters: only the lease holder sends
        if notifications.leases.holds_any(notifications.clock.now()):
            notification_loop.set_here()

    def activity(payload: str) -> None:
        name, _, at = payload.rpartition(" ")
        instance_activity.remember(name, float(at))

    bus.listen(
        {
            wake.NODE: lambda node_id: notifier.notify_here(node_id, seen_only=True),
            wake.MAIL: lambda payload: notifier.receive(*wake.parse_mail(payload)),
            wake.OPERATIONS: operations.set_here,
            wake.CLUSTERS: leading,
            wake.PARENTS: parents_leading,
            wake.NOTIFICATIONS: notifications_leading,
            wake.ACTIVITY: activity,
            wake.EVENTS: feed.received,
            **online,  # the online gateway's view and what followers ask of its owner
        }
    )


class _Server(uvicorn.Server):
    """uvicorn's server with the AnyIO thread limiter (which runs the sync endpoints) set to the
    size the API's connection pool was made for, on the server's own event loop; it also serves
    the same app, with the same protocol, lifespan and shutdown, on a TLS socket."""

    def __init__(
        self,
        config: uvicorn.Config,
        threads: int,
        tls_socket: socket.socket | None = None,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(config)
        self.threads = threads
        self.tls_socket, self.tls_context = tls_socket, tls_context

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = self.threads
        direct.THREADS.configure(self.threads)
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.started or self.tls_socket is None:
            return
        config = self.config

        def protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop
            )

        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            protocol, sock=self.tls_socket, ssl=self.tls_context, backlog=config.backlog
        )
        self.servers.append(server)  # closed with the others on shutdown


# The collector's full passes walk every object the process holds, and nearly all of them were
# made at start-up (modules, the app, the ORM's mappings) and live for good: measured under the
# mixed load (bench/mixed_load.py) a full pass took 100-290 ms, during which no request moves.
# Frozen once the server is built, they are never walked again (a full pass then took ~10 ms),
# and a higher first threshold makes young collections rarer (each request allocates thousands).
GC_GEN0_THRESHOLD = 5000


def settle_heap() -> None:
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def bind_socket(host: str, port: int, wait_free: bool = False) -> socket.socket:
    """WAIT_FREE: the port may still be held by the workers of a supervisor just killed (they die
    with it, a moment later): wait for them rather than fail (``--workers``)."""
    if wait_free and port:
        _wait_free(host, port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


PORT_FREE_WAIT_S = 5.0  # the workers of a supervisor just killed take a moment to die with it


def _wait_free(host: str, port: int) -> None:
    """Until nothing is bound on PORT (EADDRINUSE after PORT_FREE_WAIT_S)."""
    deadline = time.monotonic() + PORT_FREE_WAIT_S
    while True:
        try:
            bind_socket(host, port).close()
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _url_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


@dataclass
class Listeners:
    """The bound sockets (HTTP, and HTTPS for the ARM facade) and the URLs clients reach them at."""

    http_socket: socket.socket
    tls_socket: socket.socket
    endpoint: str
    https_endpoint: str
    files: tls.TlsFiles
    host: str  # the bind host
    public_url: str = ""  # --public-url (domain/public_url.py), "" when not given

    @property
    def link_base(self) -> str:
        """The base of the absolute links the server hands out (``AppState.endpoint``)."""
        return self.public_url or self.endpoint

    @property
    def tls_hosts(self) -> list[str]:
        return tls_hosts(self.host, self.public_url)


def tls_hosts(host: str, public: str = "") -> list[str]:
    """The names the certificate carries whatever the store says: the bind host and the public
    URL's host (browsers and the SDK on other machines reach the server by that name)."""
    return [host, public_url.host(public)] if public else [host]


TLS_NAMES_ENV = "CLOUDLET_TLS_NAMES"  # more names clients reach the server at (comma-separated)
TLS_CHECK_S = 2.0  # how soon a location's new server_address gets into the served certificate


def tls_names(hosts: list[str], sessions: sessionmaker[Session]) -> list[str]:
    """Every address the server is told it is reached at: HOSTS (``tls_hosts``), the addresses
    locations tell their agents to dial (``server_address``) and ``CLOUDLET_TLS_NAMES``."""
    with sessions() as session:
        told = locations.server_addresses(session)
    extra = [name.strip() for name in os.environ.get(TLS_NAMES_ENV, "").split(",") if name.strip()]
    return [*hosts, *told, *extra]


def ensure_tls(
    home: Path, hosts: list[str], installation_id: str, sessions: sessionmaker[Session]
) -> tls.TlsFiles:
    return tls.ensure(home, tls_names(hosts, sessions), installation_id)


def watch_tls(
    home: Path,
    hosts: list[str],
    installation_id: str,
    sessions: sessionmaker[Session],
    context: tls.ReloadingContext,
    stop: threading.Event,
) -> None:
    """Every TLS_CHECK_S until STOP: re-issue the certificate when an address it must name is new
    (a location given a server_address now, through any worker or replica) and serve the newest
    (re-issued here or by another worker). A thread of its own: it reads the store and files."""
    names: list[str] = []
    while not stop.wait(TLS_CHECK_S):
        try:
            wanted = tls_names(hosts, sessions)
            if wanted != names:  # a certificate is read and checked only when the names change
                tls.ensure(home, wanted, installation_id)
                names = wanted
            if context.refresh():
                log.info("serving the re-issued TLS certificate (%s)", context.files.cert)
        except Exception:  # the store busy, a file being written: the next check tries again
            log.exception("checking the TLS certificate's names failed")


def bind_listeners(
    home: Path,
    host: str,
    port: int,
    tls_port: int | None,
    installation_id: str,
    sessions: sessionmaker[Session],
    wait_free: bool = False,
    public: str = "",
) -> Listeners:
    """Bind both ports and write the client configuration (``config.json``) that names them.
    PUBLIC: the public URL (``domain/public_url.parse``'s), "" when not given."""
    sock = bind_socket(host, port, wait_free)
    endpoint = f"http://{host}:{sock.getsockname()[1]}"
    if not public and public_url.is_wildcard(host):
        log.warning(
            "listening on every address (--host %s) with no public URL: the links this server hands "
            "out (studio, compute instances, sign-in, scoring URIs) will name %s, which opens on no "
            "other machine; set the address people reach it at with --public-url or "
            "CLOUDLET_PUBLIC_URL (e.g. %s)",
            host,
            endpoint,
            public_url.EXAMPLE,
        )
    files = ensure_tls(home, tls_hosts(host, public), installation_id, sessions)
    tls_port = (port + 1 if port else 0) if tls_port is None else tls_port
    tls_sock = bind_socket(host, tls_port, wait_free)
    https_endpoint = f"https://{_url_host(host)}:{tls_sock.getsockname()[1]}"
    with sessions() as session:
        extra = {"https_endpoint": https_endpoint, "ca_file": str(files.ca)}
        bootstrap.write_client_config(home, endpoint, bootstrap.default_scope(session), extra)
    return Listeners(sock, tls_sock, endpoint, https_endpoint, files, host, public)


def serve(
    state: AppState, store: Store, listeners: Listeners, trusted_proxies: Sequence[str] = (forwarded.DEFAULT,)
) -> None:
    """Serve the API on LISTENERS until told to stop (SIGTERM, SIGINT). TRUSTED_PROXIES: the peers
    whose ``X-Forwarded-Proto`` / ``-For`` stand for the client's (``domain/forwarded.py``)."""
    app = create_app(state)
    studio.install(app)  # the web UI under /studio (issue 27)
    state.url.value = listeners.endpoint
    state.public.value = listeners.public_url
    public_host = public_url.host(listeners.public_url) if listeners.public_url else ""
    state.https.set(listeners.https_endpoint, str(listeners.files.ca), public_host)
    log.info(
        "cloudlet %s serving on %s and %s (CA %s; links on %s; forwarded headers from %s; home %s, "
        "replica %s)",
        state.installation_id,
        listeners.endpoint,
        listeners.https_endpoint,
        listeners.files.ca,
        listeners.link_base,
        ",".join(trusted_proxies) or "no peer",
        state.home,
        state.replica_id,
    )
    settle_heap()
    access_log = bool(os.environ.get("CLOUDLET_ACCESS_LOG"))  # one line per request, for diagnosis
    config = uvicorn.Config(
        app,
        log_level="info" if access_log else "warning",
        access_log=access_log,
        proxy_headers=True,
        # given whole, never None: uvicorn would then read its own FORWARDED_ALLOW_IPS
        forwarded_allow_ips=list(trusted_proxies),
    )
    log.info(
        "API: %d request threads, %d pooled connections (%g s to get one); control plane: %d",
        store.limits.api_threads,
        store.limits.api_pool,
        store.limits.pool_timeout_s,
        store.limits.control_pool,
    )
    tls_context = tls.ReloadingContext(listeners.files)
    stop = threading.Event()
    watch = threading.Thread(
        target=watch_tls,
        args=(state.home, listeners.tls_hosts, state.installation_id, state.read_sessions, tls_context, stop),
        name="tls-watch",
        daemon=True,
    )
    watch.start()
    try:
        _Server(config, store.limits.api_threads, listeners.tls_socket, tls_context.front).run(
            sockets=[listeners.http_socket]
        )
    finally:
        stop.set()


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
