"""The store-derived families of ``/metrics`` over a real (migrated) store, in-process: jobs by status
and compute, queue depth and the oldest queued job's age, nodes by compute name (their owner is a
compute id), operations by status; and the extra families a scrape is given, which it also yields from (one
that fails costs the scrape nothing else)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from cloudlet.server import Store, open_store
from cloudlet.services.core import metrics
from cloudlet.store.schema import Compute, Job, Node, Workspace

NOW = 1_800_000_000.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path, None)
    with opened.control.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        stamp = datetime.now(UTC)
        session.execute(
            insert(Compute),
            [
                {
                    "workspace_id": ws.id,
                    "name": "gpu",
                    "type": "amlcompute",
                    "location": "local",
                    "spec": {},
                    "created_by": "t",
                    "provisioning_state": "Succeeded",
                    "created_on": stamp,
                    "last_modified_on": stamp,
                }
            ],
        )
        gpu = session.scalars(select(Compute.id)).one()
        jobs = [("Queued", NOW - 30), ("Queued", NOW - 90), ("Running", NOW - 500), ("Completed", NOW - 900)]
        session.execute(
            insert(Job),
            [
                {
                    "workspace_id": ws.id,
                    "name": f"j{i}",
                    "compute_name": "gpu",
                    "spec": {},
                    "status": status,
                    "created_by": "t",
                    "submitted_at": submitted,
                }
                for i, (status, submitted) in enumerate(jobs)
            ],
        )
        node = {
            "workspace_id": ws.id,
            "owner_type": "computes",
            "owner_id": gpu,
            "installation_id": "t",
            "location": "local",
            "provider": "local",
            "size": "s",
            "family": "f",
            "vcpus": 1,
            "memory_gb": 1.0,
            "tier": "dedicated",
            "state_since": NOW,
            "token_hash": "x",
            "created_at": NOW,
        }
        session.execute(
            insert(Node),
            [
                {**node, "id": "n1", "state": "busy"},
                {**node, "id": "n2", "state": "busy"},
                {**node, "id": "n3", "state": "terminated"},
            ],
        )
    yield opened
    for sessions in (opened.sessions, opened.control):
        sessions.kw["bind"].dispose()


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_store_families(store: Store) -> None:
    with store.read_sessions() as session:
        families = {f.name: f for f in metrics.store_families(session, NOW)}
    where = (("compute", "gpu"), ("workspace", "default"))

    def value(name: str, *extra: tuple[str, str]) -> float | None:
        labels = tuple(sorted((*where, *extra)))
        found = [s.value for s in families[name].samples if tuple(sorted(s.labels.items())) == labels]
        return found[0] if found else None

    assert value("cloudlet_jobs", ("status", "Queued")) == 2
    assert value("cloudlet_jobs", ("status", "Running")) == 1
    assert value("cloudlet_jobs", ("status", "Completed")) == 1
    assert value("cloudlet_queue_depth") == 2
    assert value("cloudlet_queue_oldest_age_seconds") == pytest.approx(90)
    assert value("cloudlet_nodes", ("state", "busy")) == 2
    assert value("cloudlet_nodes", ("state", "terminated")) is None, "terminated nodes are history"


def test_extra_collectors_are_scraped_and_a_failing_one_is_skipped(store: Store) -> None:
    def job_gauges(session: Session) -> Iterable[Metric]:
        family = GaugeMetricFamily("cloudlet_job_cpu_cores", "a monitoring helper's gauge", labels=["job"])
        for name in session.scalars(select(Job.name).where(Job.status == "Running")):
            family.add_metric([name], 0.97)
        yield family

    def broken(_session: Session) -> Iterable[Metric]:
        raise RuntimeError("this collector fails")

    samples = _samples(metrics.exposition(store.read_sessions, [broken, job_gauges]))
    assert samples[("cloudlet_job_cpu_cores", (("job", "j2"),))] == 0.97
    assert samples[("cloudlet_queue_depth", (("compute", "gpu"), ("workspace", "default")))] == 2
