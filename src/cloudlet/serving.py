"""``cloudlet server`` (``--workers auto`` by default, or ``N``): the API served by N processes, so that
reads scale across cores.

One Python process serves requests on one core at most (the GIL); ``docs/performance.md`` ("Mixed
load") measured where that leaves the tail at 100 clients. Here a supervisor starts N worker
processes, each a full server replica over the same store (SQLite in WAL mode or PostgreSQL):

- **Listening.** The supervisor binds and listens on both ports and never accepts; every worker
  accepts from those same two sockets (inherited), so there is one queue of new connections per
  port and whichever worker is free takes the next one. A connection stays with the worker that
  accepted it (keep-alive), and no other process can listen on the port. One socket per worker
  (``SO_REUSEPORT``), as before, let the kernel hash each connection to a worker whatever its
  load: under the mixed load the split was up to 58 / 46 connections, and the busier worker's
  clients waited ~40 % longer (its tail was the run's p99); shared, the per-client medians are
  within a few ms of each other. Connections made while a worker restarts wait in the queue.
- **Identity and the control loops.** Worker ``i`` is replica ``<server replica id>-<i>``: the same
  id when it is restarted, so it takes back at once the leases it held. The reconcilers run in
  every worker under the existing leases (``services/core/leases.py``): one worker leads each loop.
- **Wake-ups.** What a worker places for a node whose long poll another worker holds, and what
  wakes a loop another worker leads, reach that worker at once through Unix datagram pairs made
  here (``services/core/wake.py``).
- **Metrics.** Each worker keeps its Prometheus counters in a directory the supervisor empties
  at start (``PROMETHEUS_MULTIPROC_DIR``); a scrape of any worker sums them all
  (``services/core/metrics.py``), and an exited worker's live gauges are dropped.
- **Supervision.** A worker that exits is started again (after a pause that grows while it keeps
  exiting at once). SIGTERM or SIGINT stops them all (SIGKILL after ``STOP_GRACE_S``). A worker
  asks the kernel for SIGKILL when the supervisor dies (``PR_SET_PDEATHSIG``), and exits at once if
  it finds the supervisor already gone: ``kill -9`` of the supervisor leaves no worker serving,
  as ``kill -9`` of a single server process leaves nothing.

Migrations, bootstrap, TLS files and the client configuration are done once, by the supervisor,
before any worker starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cloudlet import server
from cloudlet.control.online_inflight import board_path
from cloudlet.domain import forwarded
from cloudlet.services.core import metrics
from cloudlet.services.core.wake import WakeBus

log = logging.getLogger("cloudlet.serving")

WORKER_ENV = "CLOUDLET_WORKER"  # the worker's spec (JSON): set by the supervisor for its workers
DEFAULT_WORKERS = "auto"  # what `cloudlet server` serves with unless told (--workers, CLOUDLET_WORKERS)
MAX_AUTO_WORKERS = 8
STOP_GRACE_S = 30.0  # SIGTERM to SIGKILL (a held long poll is answered within its timeout)
QUICK_EXIT_S = 10.0  # a worker that exits sooner than this after its start is restarted later
MAX_RESTART_DELAY_S = 10.0
PR_SET_PDEATHSIG = 1
LISTEN_BACKLOG = 2048  # uvicorn's default, which each worker sets again on the same sockets


def parse_workers(value: str) -> int:
    """``auto`` (this host's usable CPUs, at most 8) or a count from 1 to 64."""
    text = value.strip().lower()
    if text == "auto":
        return max(1, min(len(os.sched_getaffinity(0)), MAX_AUTO_WORKERS))
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= 64:
        raise ValueError(f"workers must be 'auto' or a whole number from 1 to 64, not {value!r}")
    return count


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs from its supervisor (passed as JSON in ``CLOUDLET_WORKER``)."""

    slot: int
    supervisor_pid: int
    replica: str
    home: str
    db: str | None
    host: str
    endpoint: str
    https_endpoint: str
    public_url: str  # --public-url (the same links from every worker), "" when not given
    trusted_proxies: list[str]  # --forwarded-allow-ips (domain/forwarded.py), for every worker
    inbox_fd: int
    peer_fds: list[int]
    http_fd: int  # the supervisor's listening sockets, accepted from by every worker
    tls_fd: int


# -- the supervisor ----------------------------------------------------------------------------
@dataclass
class _Slot:
    spec: WorkerSpec
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    quick_exits: int = 0
    due_at: float = 0.0  # when to start it (again)


def supervise(
    host: str,
    port: int,
    home: str | None,
    db: str | None,
    tls_port: int | None,
    workers: int,
    public_url: str = "",
    trusted_proxies: list[str] | None = None,
) -> None:
    """TRUSTED_PROXIES: ``server.serve``'s (None: its default)."""
    logging.basicConfig(level=logging.INFO, format=server.LOG_FORMAT)
    home_path = server.resolve_home(home)
    replica = server.replica_identity(home_path)  # held while the supervisor lives
    store = server.open_store(home_path, db)  # migrate and bootstrap, once
    listeners = server.bind_listeners(
        home_path, host, port, tls_port, store.installation_id, store.sessions, True, public_url
    )
    for sessions in (store.sessions, store.control):
        sessions.kw["bind"].dispose()
    for sock in (listeners.http_socket, listeners.tls_socket):
        sock.listen(LISTEN_BACKLOG)  # connections queue from now on, before any worker is up
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(workers)]
    slots = [
        _Slot(
            WorkerSpec(
                slot=i,
                supervisor_pid=os.getpid(),
                replica=f"{replica.id}-{i}",
                home=str(home_path),
                db=db,
                host=host,
                endpoint=listeners.endpoint,
                https_endpoint=listeners.https_endpoint,
                public_url=listeners.public_url,
                trusted_proxies=[forwarded.DEFAULT] if trusted_proxies is None else trusted_proxies,
                inbox_fd=pairs[i][0].fileno(),
                peer_fds=[pair[1].fileno() for j, pair in enumerate(pairs) if j != i],
                http_fd=listeners.http_socket.fileno(),
                tls_fd=listeners.tls_socket.fileno(),
            )
        )
        for i in range(workers)
    ]
    log.info(
        "cloudlet %s: %d workers on %s and %s (home %s, replica %s)",
        store.installation_id,
        workers,
        listeners.endpoint,
        listeners.https_endpoint,
        home_path,
        replica.id,
    )
    # No worker reads a row of an earlier run's board (control/online_inflight.py).
    board_path(home_path).unlink(missing_ok=True)
    # The workers' Prometheus counters, summed by whichever answers a scrape (services/core/metrics.py).
    metrics_dir = metrics.prepare_multiprocess_dir(home_path)
    code = Supervisor(slots, metrics_dir).run()
    listeners.http_socket.close()
    listeners.tls_socket.close()
    if code:
        sys.exit(code)


class Supervisor:
    def __init__(self, slots: list[_Slot], metrics_dir: Path | None = None) -> None:
        self.slots = slots
        self.metrics_dir = metrics_dir
        self.stopping = False
        self.signals = 0

    def _start(self, slot: _Slot) -> None:
        spec = slot.spec
        env = {**os.environ, WORKER_ENV: json.dumps(asdict(spec))}
        slot.process = subprocess.Popen(
            [sys.executable, "-m", "cloudlet.startup", "cloudlet.serving"],  # cloudlet/startup.py
            env=env,
            pass_fds=[spec.inbox_fd, *spec.peer_fds, spec.http_fd, spec.tls_fd],
        )
        slot.started_at = time.monotonic()
        log.info("worker %d started (pid %d)", spec.slot, slot.process.pid)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.stopping = True
            self.signals += 1

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, self._on_signal)
        selector = selectors.DefaultSelector()
        selector.register(wake_r, selectors.EVENT_READ)
        try:
            for slot in self.slots:
                self._start(slot)
            while not self.stopping:
                self._reap_and_restart()
                if all(slot.quick_exits >= 5 for slot in self.slots):
                    log.error("every worker keeps exiting at once: stopping")
                    self._stop()
                    return 1
                pending = [slot.due_at for slot in self.slots if slot.process is None]
                timeout = max(0.0, min(pending) - time.monotonic()) if pending else 5.0
                if selector.select(timeout):
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 512)
            self._stop()
            return 0
        finally:
            signal.set_wakeup_fd(-1)
            selector.close()
            os.close(wake_r)
            os.close(wake_w)

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            process = slot.process
            if process is not None and process.poll() is not None:
                lived = now - slot.started_at
                slot.quick_exits = slot.quick_exits + 1 if lived < QUICK_EXIT_S else 0
                delay = (
                    min(MAX_RESTART_DELAY_S, 0.5 * 2 ** (slot.quick_exits - 1)) if slot.quick_exits else 0.0
                )
                log.warning(
                    "worker %d (pid %d) exited with %s after %.1f s: starting it again in %.1f s",
                    slot.spec.slot,
                    process.pid,
                    process.returncode,
                    lived,
                    delay,
                )
                if self.metrics_dir is not None:
                    metrics.worker_exited(process.pid, self.metrics_dir)
                slot.process, slot.due_at = None, now + delay
            if slot.process is None and now >= slot.due_at and not self.stopping:
                self._start(slot)

    def _stop(self) -> None:
        running = [slot.process for slot in self.slots if slot.process is not None]
        for process in running:
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in running:
            while process.poll() is None:
                if time.monotonic() > deadline or self.signals > 1:  # a second ^C: at once
                    process.kill()
                    process.wait()
                    break
                time.sleep(0.05)
        log.info("workers stopped")


# -- a worker ------------------------------------------------------------------------------------
def _die_with_supervisor(supervisor_pid: int) -> None:
    """SIGKILL when the supervisor dies; exit now if it already has (it died before the request)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != supervisor_pid:
        os._exit(1)


def run_worker(spec: WorkerSpec) -> None:
    _die_with_supervisor(spec.supervisor_pid)
    logging.basicConfig(
        level=logging.INFO, format=server.LOG_FORMAT.replace("%(name)s", f"w{spec.slot} %(name)s")
    )
    home = Path(spec.home)
    bus = WakeBus.from_fds(spec.inbox_fd, spec.peer_fds)
    state, store = server.build_state(
        home, spec.db, server.ReplicaIdentity(spec.replica, None), bus, worker=spec.slot
    )
    listeners = server.Listeners(
        socket.socket(fileno=spec.http_fd),
        socket.socket(fileno=spec.tls_fd),
        spec.endpoint,
        spec.https_endpoint,
        server.ensure_tls(
            home, server.tls_hosts(spec.host, spec.public_url), state.installation_id, state.read_sessions
        ),
        spec.host,
        spec.public_url,
    )
    server.serve(state, store, listeners, spec.trusted_proxies)


def main() -> None:
    raw = os.environ.pop(WORKER_ENV, None)
    if raw is None:
        raise SystemExit(
            f"cloudlet.serving runs as a worker of `cloudlet server --workers N` ({WORKER_ENV} unset)"
        )
    run_worker(WorkerSpec(**json.loads(raw)))


if __name__ == "__main__":
    main()
