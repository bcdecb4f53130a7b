"""The service side of job resource monitoring on a real (SQLite) store: samples fold into bounded
buckets, a node cannot write another node's job, the GPU idle warning lands on the job (thresholds
configured short for the test), and the Prometheus gauges carry running jobs' latest samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.jobs import resource_samples as rs
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.jobs import resource_monitoring as monitoring
from cloudlet.store.schema import Job, JobResourceBucket, JobRun, Workspace
from tests.unit.control_fakes import new_store


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    made, _ = new_store(tmp_path / "home")
    with made.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        job = Job(
            workspace_id=ws.id,
            name="train",
            compute_name="gpu-cluster",
            spec={"type": "command", "command": "true"},
            status=JobStatus.RUNNING.value,
            created_by="alice",
            submitted_at=1.0,
        )
        session.add(job)
        session.flush()
        session.add(
            JobRun(
                id="r1",
                job_id=job.id,
                attempt=1,
                rank=0,
                node_id="n1",
                state="running",
                spec={},
                assigned_at=1.0,
            )
        )
    return made


def _samples(start: float, seconds: int, step: int, **values: Any) -> list[dict[str, Any]]:
    return [{"run": "r1", "at": start + t, **values} for t in range(0, seconds, step)]


def test_a_long_job_stays_bounded_and_other_nodes_cannot_write_it(sessions: sessionmaker[Session]) -> None:
    # Six hours of 5 s samples, sent as the agent does: a poll's worth at a time.
    for hour in range(6):
        with sessions.begin() as session:
            for chunk in range(0, 3600, 300):
                batch = _samples(1000.0 + hour * 3600 + chunk, 300, 5, cpu_percent=50.0, memory_bytes=1e6)
                assert monitoring.record_samples(session, "n1", batch, now=1e9) == len(batch)
    with sessions.begin() as session:
        assert (
            monitoring.record_samples(session, "n2", _samples(1000.0, 60, 5, cpu_percent=1.0), now=1e9) == 0
        )
        rows = session.scalar(select(func.count()).select_from(JobResourceBucket))
        kept = session.scalar(select(func.sum(JobResourceBucket.n)))
        job = session.scalars(select(Job)).one()
        view = monitoring.monitoring(session, job, now=1000.0 + 6 * 3600)
    assert rows is not None and rows <= rs.LEVELS[0][1] + rs.LEVELS[1][1] + 40
    assert kept == 6 * 3600 // 5  # every sample counted once, in some bucket
    (node,) = view["nodes"]
    assert node["node"] == "n1" and set(node["series"]["cpu_percent"]) == {50.0}
    assert not view["warnings"] and not view["idle"]


def test_a_gpu_idle_past_the_window_warns_the_job_once(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDLET_GPU_IDLE_MINUTES", "2")
    gpu = {"gpu_percent": 1.0, "gpu_memory_bytes": 2e9, "gpu_count": 1.0, "cpu_percent": 3.0}
    with sessions.begin() as session:
        monitoring.record_samples(session, "n1", _samples(0.0, 60, 5, **gpu), now=60.0)
        assert not session.scalars(select(Job)).one().warnings  # one minute: not yet
        monitoring.record_samples(session, "n1", _samples(60.0, 120, 5, **gpu), now=180.0)
        monitoring.record_samples(session, "n1", _samples(180.0, 20, 5, **gpu), now=200.0)
        job = session.scalars(select(Job)).one()
        assert job.warnings == [monitoring.rs.gpu_idle_warning(monitoring.gpu_idle_rule())]
        view = monitoring.monitoring(session, job, now=200.0)
    assert view["nodes"][0]["gpu"] is True and view["nodes"][0]["gpu_idle"] is True
    assert "2 min" in view["warnings"][0]


def test_a_busy_gpu_gets_no_warning(sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDLET_GPU_IDLE_MINUTES", "2")
    with sessions.begin() as session:
        monitoring.record_samples(
            session, "n1", _samples(0.0, 200, 5, gpu_percent=60.0, gpu_count=1.0), now=200.0
        )
        assert not session.scalars(select(Job)).one().warnings


def test_prometheus_gauges_of_running_jobs(sessions: sessionmaker[Session]) -> None:
    pytest.importorskip("prometheus_client")
    with sessions.begin() as session:
        monitoring.record_samples(
            session, "n1", _samples(100.0, 30, 5, cpu_percent=99.0, memory_bytes=5e8), now=130.0
        )
        families = {m.name: m for m in monitoring.job_resource_metrics(session)}
    (cpu,) = families["cloudlet_job_cpu_percent"].samples
    assert cpu.labels == {"job": "train", "compute": "gpu-cluster", "node": "n1"} and cpu.value == 99.0
    assert families["cloudlet_job_memory_bytes"].samples[0].value == 5e8
    assert families["cloudlet_job_gpu_utilization_percent"].samples == []  # no GPU: no series


def test_gpu_hours_and_idle_gpu_hours_per_user_and_compute(sessions: sessionmaker[Session]) -> None:
    """Ten minutes on two GPUs, busy for the first five and idle for the last five."""
    with sessions.begin() as session:
        session.scalars(select(Job)).one().started_at = 0.0
        busy = _samples(0.0, 300, 5, gpu_percent=80.0, gpu_count=2.0)
        idle = _samples(300.0, 300, 5, gpu_percent=1.0, gpu_count=2.0)
        monitoring.record_samples(session, "n1", busy + idle, now=600.0)
        workspace_id = session.scalars(select(Job)).one().workspace_id
        found = monitoring.gpu_hours_by(session, workspace_id, 0.0, 600.0)
    held, wasted = found[("gpu-cluster", "alice")]
    assert held == pytest.approx(2 * 600 / 3600) and wasted == pytest.approx(2 * 300 / 3600)
