"""Prometheus metrics (issue 29): the in-process instruments, the store's gauges read at scrape
time, and the text a scrape is answered with (``GET /metrics``, ``api/routes_metrics.py``).

Two kinds of numbers, counted two ways:

- **In-process** (HTTP requests, the online gateway, reconcile passes, agent connections) are
  ``prometheus_client`` instruments each process updates as it works. Under ``--workers N`` every
  worker runs with ``PROMETHEUS_MULTIPROC_DIR`` (made, empty, by the supervisor for each server run,
  ``serving.py``): the library keeps each process's values in a memory-mapped file there, and a scrape,
  whichever worker answers it, sums every worker's files (``MultiProcessCollector``), including
  those of a worker that exited (its counts stay in the server's totals; its live gauges are dropped,
  ``mark_process_dead``). One process alone keeps them in memory.
- **Store-derived** (jobs, queues, nodes, operations) are read at scrape time by ``StoreCollector``
  with a few grouped COUNT queries over indexed columns. They are counted once per scrape by the
  worker that answers, never per worker, so ``--workers N`` does not multiply them.

``exposition``'s ``extras`` are the extension point for other store-derived families (the per-job monitoring
gauges): each is called with the scrape's session and yields its metric families.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.resources import COMPUTES
from cloudlet.store.schema import Compute, Job, Node, Operation, Workspace

log = logging.getLogger("cloudlet.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus_client when it is imported
CONTENT_TYPE = CONTENT_TYPE_LATEST
UNMATCHED_ROUTE = "unmatched"  # a request no route took (404): one label, not its raw path

# -- in-process instruments ----------------------------------------------------------------------
HTTP_REQUESTS = Counter(
    "cloudlet_http_requests_total",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "cloudlet_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by method and route template.",
    ["method", "route"],
)
RECONCILE_PASS = Histogram(
    "cloudlet_reconcile_pass_duration_seconds",
    "How long one pass of a control loop took, by loop (control/loop.py).",
    ["loop"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
ONLINE_REQUESTS = Counter(
    "cloudlet_online_requests_total",
    "Scoring requests the online gateway sent to a deployment's replicas.",
    ["endpoint", "deployment"],
)
ONLINE_ERRORS = Counter(
    "cloudlet_online_request_errors_total",
    "Scoring requests that failed (timeout, unreachable replica, the model's non-200 answer).",
    ["endpoint", "deployment"],
)
ONLINE_DURATION = Histogram(
    "cloudlet_online_request_duration_seconds",
    "Time from forwarding a scoring request to the end of the replica's answer.",
    ["endpoint", "deployment"],
)
AGENT_CONNECTIONS = Gauge(
    "cloudlet_agent_connections",
    "Node agents connected now: long polls held open by the server (every worker's).",
    multiprocess_mode="livesum",
)


# -- store-derived families ----------------------------------------------------------------------
StoreFamilies = Callable[[Session], Iterable[Metric]]


def store_families(session: Session, now: float) -> list[Metric]:
    """Jobs by status and compute, queue depth and oldest queued age per compute, nodes by state
    and compute, operations by status: four grouped queries (the jobs' one reads the queue-order
    index, ``ix_jobs_queue_order``, which covers it) and two small lookups of names."""
    workspaces = dict(session.execute(select(Workspace.id, Workspace.name)).all())
    computes = {
        compute_id: (workspaces.get(ws_id, ""), name)
        for compute_id, ws_id, name in session.execute(select(Compute.id, Compute.workspace_id, Compute.name))
    }
    labels = ["workspace", "compute"]
    jobs = GaugeMetricFamily(
        "cloudlet_jobs", "Jobs by status, per workspace and compute.", labels=[*labels, "status"]
    )
    depth = GaugeMetricFamily("cloudlet_queue_depth", "Jobs waiting in a compute's queue.", labels=labels)
    oldest = GaugeMetricFamily(
        "cloudlet_queue_oldest_age_seconds",
        "How long the oldest job in a compute's queue has waited (0 when none waits).",
        labels=labels,
    )
    job_rows = session.execute(
        select(
            Job.workspace_id, Job.compute_name, Job.status, func.count(), func.min(Job.submitted_at)
        ).group_by(Job.workspace_id, Job.compute_name, Job.status)
    )
    queues: dict[tuple[str, str], tuple[int, float]] = {}  # (workspace, compute) -> depth, oldest
    for ws_id, compute, status, count, first in job_rows:
        where = (workspaces.get(ws_id, ""), compute or "")
        jobs.add_metric([*where, status], count)
        if status == JobStatus.QUEUED:  # two workspaces of one name (other groups) share a series
            had, earliest = queues.get(where, (0, first))
            queues[where] = (had + count, min(earliest, first))
    for where, (count, first) in queues.items():
        depth.add_metric(list(where), count)
        oldest.add_metric(list(where), max(0.0, now - first))
    nodes = GaugeMetricFamily(
        "cloudlet_nodes",
        "Nodes by state (those not terminated), per workspace and compute (a job's own node: no compute).",
        labels=[*labels, "state"],
    )
    node_rows = session.execute(
        select(Node.workspace_id, Node.owner_type, Node.owner_id, Node.state, func.count())
        .where(Node.state != NodeState.TERMINATED)
        .group_by(Node.workspace_id, Node.owner_type, Node.owner_id, Node.state)
    )
    for ws_id, owner_type, owner_id, state, count in node_rows:
        owner = computes.get(owner_id) if owner_type == COMPUTES and owner_id is not None else None
        nodes.add_metric([*(owner or (workspaces.get(ws_id, ""), "")), state], count)
    operations = GaugeMetricFamily(
        "cloudlet_operations", "Long-running operations by status.", labels=["status"]
    )
    for status, count in session.execute(select(Operation.status, func.count()).group_by(Operation.status)):
        operations.add_metric([status], count)
    return [_summed(jobs), depth, oldest, _summed(nodes), operations]


def _summed(family: GaugeMetricFamily) -> GaugeMetricFamily:
    """FAMILY with samples of equal labels added up (nodes of one compute grouped by owner id and
    workspace; jobs of a compute name and of no compute)."""
    totals: dict[tuple[str, ...], float] = {}
    for sample in family.samples:
        key = tuple(sample.labels.values())
        totals[key] = totals.get(key, 0.0) + sample.value
    if len(totals) == len(family.samples):
        return family
    names = list(family.samples[0].labels) if family.samples else []
    summed = GaugeMetricFamily(family.name, family.documentation, labels=names)
    for key, value in totals.items():
        summed.add_metric(list(key), value)
    return summed


class StoreCollector(Collector):
    """The store-derived families and EXTRAS (other services' families, e.g. the per-job
    monitoring's, passed in by the route: this module is below them), read in one session per
    scrape."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        extras: Sequence[StoreFamilies] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sessions, self.extras, self.clock = sessions, extras, clock

    def collect(self) -> Iterator[Metric]:
        with self.sessions() as session:
            yield from store_families(session, self.clock())
            for extra in self.extras:
                try:  # another item's families: its failure must not cost the scrape the others
                    yield from list(extra(session))
                except Exception:
                    log.exception("metrics collector %r failed", extra)


class _ThisProcess(Collector):
    """The default registry's instruments (one process alone, no multiprocess directory)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


class _EveryWorker(Collector):
    """Every worker's instruments, summed from the multiprocess directory; only cloudlet's own
    families (a child process that inherited the variable and imported prometheus_client for its
    own metrics would otherwise add them to the server's)."""

    def __init__(self, directory: str) -> None:
        self.files = MultiProcessCollector(None, directory)

    def collect(self) -> Iterator[Metric]:
        for family in self.files.collect():
            if family.name.startswith("cloudlet_"):
                yield family


def exposition(sessions: sessionmaker[Session], extras: Sequence[StoreFamilies] = ()) -> bytes:
    """A scrape's answer in the text format: every worker's instruments, the store's families and
    EXTRAS'."""
    registry = CollectorRegistry(auto_describe=False)
    directory = os.environ.get(MULTIPROC_ENV)
    if directory:
        registry.register(_EveryWorker(directory))
    else:
        registry.register(_ThisProcess())
    registry.register(StoreCollector(sessions, extras))
    return generate_latest(registry)


# -- who may scrape -----------------------------------------------------------------------------
TOKEN_ENV = "CLOUDLET_METRICS_TOKEN"  # the scrape token itself
TOKEN_FILE_ENV = "CLOUDLET_METRICS_TOKEN_FILE"  # or a file holding it (read on each scrape: rotatable)
LOOPBACK_ENV = "CLOUDLET_METRICS_LOOPBACK"  # "1": loopback clients may scrape without the token


def scrape_token() -> str | None:
    """The configured scrape token, or None when none is."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    path = os.environ.get(TOKEN_FILE_ENV, "").strip()
    if not token and path:
        try:
            token = Path(path).read_text().strip()
        except OSError:
            log.exception("cannot read the scrape token file %s", path)
    return token or None


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def scrape_refusal(authorization: str, client_host: str | None) -> tuple[int, str] | None:
    """Why this scrape is refused (status, message), or None when it may go on: the scrape token as
    ``Authorization: Bearer …``, or a loopback client where loopback scrapes are allowed. Never
    anonymous otherwise; with neither configured, ``/metrics`` is off."""
    token = scrape_token()
    if os.environ.get(LOOPBACK_ENV, "") in ("1", "true", "yes") and _loopback(client_host):
        return None
    if token is None:
        return 403, (
            f"metrics are off: set {TOKEN_ENV} (or {TOKEN_FILE_ENV}) to a scrape token, or "
            f"{LOOPBACK_ENV}=1 to let this host scrape (docs/observability.md)"
        )
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        return 401, "a scrape token is needed as 'Authorization: Bearer …' (docs/observability.md)"
    return None


# -- multiprocess mode (``serving.py``) ------------------------------------------------------------
def prepare_multiprocess_dir(home: Path) -> Path:
    """An empty directory for this server run's worker files, named in the environment the workers
    inherit (set before they start: prometheus_client reads it when it is imported)."""
    path = home / "prometheus-multiproc"
    shutil.rmtree(path, ignore_errors=True)  # an earlier run's counts are not this run's
    path.mkdir(mode=0o700)
    os.environ[MULTIPROC_ENV] = str(path)
    return path


def worker_exited(pid: int, directory: Path) -> None:
    """Drop an exited worker's live gauges (its counters stay: they are part of the totals)."""
    try:
        mark_process_dead(pid, str(directory))
    except OSError:
        log.exception("could not mark metrics of worker pid %d dead", pid)
