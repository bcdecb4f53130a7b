"""Per-job resource monitoring: the agents' samples stored downsampled, read back for ``job show
--monitor`` and the studio, the GPU idle warning, and the Prometheus gauges of running jobs.

Samples arrive with an agent's poll (``agent_protocol.AgentService.poll_once``); a sample names a
run, and is kept only if that run is on the reporting node (a node cannot write another's jobs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.domain.jobs import resource_samples as rs
from cloudlet.domain.jobs.resource_samples import Bucket, IdleRule
from cloudlet.services.access import workspaces
from cloudlet.services.compute import usage as usage_service
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.store.schema import Job, JobResourceBucket, JobRun

MAX_SAMPLES_PER_POLL = 5000


def gpu_idle_rule() -> IdleRule:
    """The GPU idle rule; CLOUDLET_GPU_IDLE_PERCENT / CLOUDLET_GPU_IDLE_MINUTES change it (tests)."""
    return IdleRule(
        threshold_percent=float(os.environ.get("CLOUDLET_GPU_IDLE_PERCENT") or rs.GPU_IDLE.threshold_percent),
        window_s=60 * float(os.environ.get("CLOUDLET_GPU_IDLE_MINUTES") or rs.GPU_IDLE.window_s / 60),
    )


def cpu_idle_rule() -> IdleRule:
    """A job whose CPU stays under 2 % for a minute is idle; CLOUDLET_CPU_IDLE_SECONDS changes the window."""
    return IdleRule(
        threshold_percent=rs.CPU_IDLE.threshold_percent,
        window_s=float(os.environ.get("CLOUDLET_CPU_IDLE_SECONDS") or rs.CPU_IDLE.window_s),
    )


def _bucket(row: JobResourceBucket) -> Bucket:
    return Bucket(row.node_id, row.level, row.start, row.n, {f: getattr(row, f) for f in rs.FIELDS})


def _write(row: JobResourceBucket, bucket: Bucket) -> None:
    row.n = bucket.n
    row.start = bucket.start
    row.level = bucket.level
    for name in rs.FIELDS:
        setattr(row, name, bucket.values.get(name))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def record_samples(
    session: Session, node_id: str, samples: list[dict[str, Any]], now: float | None = None
) -> int:
    """Fold a poll's samples into their jobs' buckets (then compact them); the samples kept."""
    now = time.time() if now is None else now
    run_ids = {str(s.get("run")) for s in samples[:MAX_SAMPLES_PER_POLL] if s.get("run")}
    if not run_ids:
        return 0
    job_of = dict(
        session.execute(
            select(JobRun.id, JobRun.job_id).where(JobRun.id.in_(run_ids), JobRun.node_id == node_id)
        ).all()
    )
    kept = 0
    touched: set[int] = set()
    for sample in samples[:MAX_SAMPLES_PER_POLL]:
        job_id = job_of.get(str(sample.get("run")))
        at = _number(sample.get("at"))
        if job_id is None or at is None or at > now + 60:
            continue
        values = {name: _number(sample.get(name)) for name in rs.FIELDS}
        start = rs.bucket_start(at, 0)
        row = session.scalar(
            select(JobResourceBucket).where(
                JobResourceBucket.job_id == job_id,
                JobResourceBucket.node_id == node_id,
                JobResourceBucket.level == 0,
                JobResourceBucket.start == start,
            )
        )
        held = {start: _bucket(row)} if row is not None else {}
        merged = rs.add_sample(held, node_id, at, values)
        if row is None:
            row = JobResourceBucket(job_id=job_id, node_id=node_id)
            session.add(row)
        _write(row, merged)
        session.flush()
        kept += 1
        touched.add(job_id)
    for job_id in touched:
        _compact(session, job_id, node_id)
        _warn_gpu_idle(session, job_id, now)
    return kept


def _compact(session: Session, job_id: int, node_id: str) -> None:
    mine = (JobResourceBucket.job_id == job_id, JobResourceBucket.node_id == node_id)
    counts = dict(
        session.execute(
            select(JobResourceBucket.level, func.count()).where(*mine).group_by(JobResourceBucket.level)
        ).all()
    )
    over = {level for level, n in counts.items() if n > rs.LEVELS[level][1]}
    if not over:
        return
    levels = over | {level + 1 for level in over}
    rows = {
        (r.level, r.start): r
        for r in session.scalars(select(JobResourceBucket).where(*mine, JobResourceBucket.level.in_(levels)))
    }
    # A level this overflows is compacted on a later poll (it is counted again then).
    drop, write = rs.compact([_bucket(r) for r in rows.values()], only=over)
    for bucket in drop:
        session.delete(rows.pop((bucket.level, bucket.start)))
    session.flush()
    for bucket in write:
        row = rows.get((bucket.level, bucket.start))
        if row is None:
            row = JobResourceBucket(job_id=job_id, node_id=node_id)
            session.add(row)
        _write(row, bucket)
    session.flush()


def _points(session: Session, job_id: int, field: str, since: float) -> list[tuple[float, float | None]]:
    rows = session.execute(
        select(JobResourceBucket.start, getattr(JobResourceBucket, field)).where(
            JobResourceBucket.job_id == job_id, JobResourceBucket.start >= since
        )
    ).all()
    return [(start, value) for start, value in rows]


def _warn_gpu_idle(session: Session, job_id: int, now: float) -> None:
    rule = gpu_idle_rule()
    points = _points(session, job_id, "gpu_percent", now - rule.window_s - rs.LEVELS[0][0])
    if not rs.idle(points, rule, now):
        return
    job = session.get(Job, job_id)
    warning = rs.gpu_idle_warning(rule)
    if job is not None and warning not in (job.warnings or []):
        job.warnings = [*(job.warnings or []), warning]


def monitoring(session: Session, job: Job, now: float | None = None) -> dict[str, Any]:
    """What ``job show --monitor`` and the studio's Monitoring tab show: per node, the series (time
    order, coarse history first), the latest values, and whether the job's CPU (and GPU) is idle."""
    now = time.time() if now is None else now
    rows = session.scalars(select(JobResourceBucket).where(JobResourceBucket.job_id == job.id)).all()
    nodes: dict[str, list[Bucket]] = {}
    for row in rows:
        nodes.setdefault(row.node_id, []).append(_bucket(row))
    out = []
    running = job.ended_at is None
    for node_id, buckets in sorted(nodes.items()):
        ordered = rs.series(buckets)
        has_gpu = any(b.values.get("gpu_percent") is not None for b in ordered)
        # A finished job is judged on its last window, not on the time since it ended.
        at = now if running else ordered[-1].start + rs.LEVELS[0][0]
        cpu = [(b.start, b.values.get("cpu_percent")) for b in ordered]
        gpu = [(b.start, b.values.get("gpu_percent")) for b in ordered]
        out.append(
            {
                "node": node_id,
                "gpu": has_gpu,
                "cpu_idle": rs.idle(cpu, cpu_idle_rule(), at),
                "gpu_idle": has_gpu and rs.idle(gpu, gpu_idle_rule(), at),
                "latest": {"at": ordered[-1].start, **ordered[-1].values},
                "series": {
                    "t": [b.start for b in ordered],
                    "width": [rs.LEVELS[b.level][0] for b in ordered],
                    "n": [b.n for b in ordered],
                    **{f: [b.values.get(f) for b in ordered] for f in rs.FIELDS if has_gpu or "gpu" not in f},
                },
            }
        )
    return {
        "job": job.name,
        "status": job.status,
        "idle": bool(out) and all(n["cpu_idle"] for n in out),
        "nodes": out,
        "warnings": list(job.warnings or []),
    }


def latest_of_running_jobs(session: Session) -> Iterator[tuple[Job, str, dict[str, float | None]]]:
    """(job, node, latest values) for every running job with samples."""
    latest = (
        select(
            JobResourceBucket.job_id,
            JobResourceBucket.node_id,
            func.max(JobResourceBucket.start).label("start"),
        )
        .where(JobResourceBucket.level == 0)
        .group_by(JobResourceBucket.job_id, JobResourceBucket.node_id)
        .subquery()
    )
    query = (
        select(Job, JobResourceBucket)
        .join(latest, latest.c.job_id == Job.id)
        .join(
            JobResourceBucket,
            (JobResourceBucket.job_id == latest.c.job_id)
            & (JobResourceBucket.node_id == latest.c.node_id)
            & (JobResourceBucket.level == 0)
            & (JobResourceBucket.start == latest.c.start),
        )
        .where(Job.ended_at.is_(None))
    )
    for job, row in session.execute(query).all():
        yield job, row.node_id, {f: getattr(row, f) for f in rs.FIELDS}


PROMETHEUS_GAUGES = {
    "cpu_percent": ("cloudlet_job_cpu_percent", "CPU of the job's processes (100 = one core)"),
    "memory_bytes": ("cloudlet_job_memory_bytes", "resident memory of the job's processes"),
    "read_bps": ("cloudlet_job_read_bytes_per_second", "bytes read from storage per second"),
    "write_bps": ("cloudlet_job_write_bytes_per_second", "bytes written to storage per second"),
    "gpu_percent": ("cloudlet_job_gpu_utilization_percent", "GPU utilisation of the job's node"),
    "gpu_memory_bytes": ("cloudlet_job_gpu_memory_bytes", "GPU memory used on the job's node"),
}


def job_resource_metrics(session: Session) -> Iterable[Any]:
    """Prometheus gauges of running jobs' latest samples, labelled job, compute and node (for the
    /metrics collector list; prometheus_client is imported here so the server runs without it)."""
    from prometheus_client.core import GaugeMetricFamily

    gauges = {
        field: GaugeMetricFamily(name, text, labels=["job", "compute", "node"])
        for field, (name, text) in PROMETHEUS_GAUGES.items()
    }
    for job, node_id, values in latest_of_running_jobs(session):
        for field, gauge in gauges.items():
            value = values.get(field)
            if value is not None:  # no GPU: no GPU series, not zeros
                gauge.add_metric([job.name, job.compute_name or "", node_id], value)
    return list(gauges.values())


def gpu_hours_by(
    session: Session, workspace_id: int, since: float, until: float
) -> dict[tuple[str, str], tuple[float, float]]:
    """(compute, user) → (GPU-hours held, idle GPU-hours) in [since, until), from the samples of the
    workspace's jobs on nodes with GPUs: each bucket counts its width (clipped to the job's run and the
    window) times its GPUs, idle when its mean utilisation is under the GPU idle threshold."""
    query = (
        select(Job.compute_name, Job.created_by, Job.started_at, Job.ended_at, JobResourceBucket)
        .join(JobResourceBucket, JobResourceBucket.job_id == Job.id)
        .where(
            Job.workspace_id == workspace_id,
            JobResourceBucket.gpu_count.is_not(None),
            JobResourceBucket.start < until,
            JobResourceBucket.start >= since - rs.LEVELS[-1][0],
        )
    )
    points: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for compute, user, started, ended, row in session.execute(query).all():
        begin = max(row.start, since, started or row.start)
        end = min(row.start + rs.LEVELS[row.level][0], until, ended or until)
        if end > begin:
            key = (compute or "", user)
            points.setdefault(key, []).append((end - begin, row.gpu_percent or 0.0, int(row.gpu_count or 0)))
    return {key: rs.gpu_hours(found) for key, found in points.items()}


def idle_usage(
    session: Session,
    caller: Caller,
    ref: WorkspaceRef,
    days: int,
    catalogue: Catalogue,
    now: float | None = None,
) -> dict[str, Any]:
    """``cloudlet usage --idle``: per user and compute over the last DAYS days, node-hours and idle
    node-hours (``services/compute/usage``: the node rows and job runs) beside GPU-hours and idle
    GPU-hours (the job samples)."""
    workspace = workspaces.resolve(session, ref, caller, Access.READ)
    found = usage_service.workspace_usage(session, caller, ref, days, catalogue, now)
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def row(compute: str, user: str) -> dict[str, Any]:
        return rows.setdefault(
            (compute, user),
            {
                "compute": compute,
                "user": user,
                "node_hours": 0.0,
                "idle_node_hours": 0.0,
                "gpu_hours": 0.0,
                "idle_gpu_hours": 0.0,
            },
        )

    for r in found.rows:
        target = row(r.compute, r.user)
        target["node_hours"] += r.node_hours
        target["idle_node_hours"] += r.idle_node_hours
    for (compute, user), (held, wasted) in gpu_hours_by(
        session, workspace.id, found.since, found.until
    ).items():
        target = row(compute, user)
        target["gpu_hours"] += held
        target["idle_gpu_hours"] += wasted
    ordered = sorted(
        rows.values(), key=lambda r: (-r["idle_gpu_hours"], -r["idle_node_hours"], r["user"], r["compute"])
    )
    return {"since": found.since, "until": found.until, "days": days, "value": ordered}
