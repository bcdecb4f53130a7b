"""Why a queued job waits: its place in its compute's queue, the one reason that holds it, and when
it is expected to start.

The facts come from where the scheduler and the autoscaler take them: the queue in the scheduler's
order (``dispatch.queue_in_order``), an instance's free vCPUs as the scheduler counts them, and the
lock and quota limits the autoscaler reads (``services.compute.scaling_limits``, the one function
both call), all read once per compute every few seconds (``queue_snapshots``); ``domain.jobs.job_wait``
and ``domain.jobs.queue_places`` turn them into a code, a sentence and an estimate.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.job_wait import (
    QueuePlace,
    WaitCode,
    WaitReason,
    cluster_reason,
    instance_reason,
)
from cloudlet.domain.jobs.queue_places import in_words, position_text, queue_reason
from cloudlet.services.jobs import dispatch
from cloudlet.services.jobs.queue_snapshots import QUEUE_READ, Snapshot, snapshot
from cloudlet.store.schema import Compute, Job

__all__ = ["QUEUE_READ", "waiting_of_rows", "why_waiting"]


def why_waiting(session: Session, job: Job) -> dict[str, Any] | None:
    """For a queued or preparing job: ``code`` and ``message`` (``domain.jobs.job_wait.WaitCode``),
    its 1-based ``position`` in its compute's queue (None when placed, or deeper than
    ``QUEUE_READ``: then ``position_text`` is "10,000+"), the jobs ``ahead`` and the cores they
    need, its estimated start ``eta`` (ISO time; None when not known) and ``eta_in_s``,
    ``eta_boot_s`` and ``eta_note`` where that start waits for a node to boot (the boot it adds,
    and what it comes from), and ``as_of``, when the queue was read (at most a few seconds ago).
    None for any other status."""
    if job.status == JobStatus.PREPARING:
        message = job.status_message or "its nodes are being prepared"
        return _answer(WaitReason(WaitCode.PREPARING, message), QueuePlace(None, 0, 0, 0), job.compute_name)
    if job.status != JobStatus.QUEUED:
        return None
    compute = _compute(session, job.workspace_id, job.compute_name)
    if compute is None:  # serverless, local, or a compute since deleted: nodes made for the job
        message = job.status_message or "waiting for nodes made for this job"
        reason = WaitReason(WaitCode.WAITING_FOR_NODES, message)
        return _answer(reason, QueuePlace(None, 0, 0, 0), job.compute_name)
    snap = snapshot(session, compute, want=job.id)
    return _from_snapshot(
        snap, job.id, job.instance_count, job.spec, bool(job.cancel_requested), compute.name
    )


def waiting_of_rows(session: Session, workspace_id: int, rows: Iterable[Any]) -> dict[int, dict[str, Any]]:
    """``why_waiting`` for a page of a job list (rows with ``id``, ``status``, ``compute_name``,
    ``spec``, ``status_message``): each queued job's answer from its compute's snapshot, one per
    compute, by job id. A job the snapshot does not hold yet (newer than it) gets its reason
    without a position."""
    out: dict[int, dict[str, Any]] = {}
    computes: dict[str | None, Compute | None] = {}
    for row in rows:
        if row.status == JobStatus.PREPARING:
            reason = WaitReason(WaitCode.PREPARING, row.status_message or "its nodes are being prepared")
            out[row.id] = _answer(reason, QueuePlace(None, 0, 0, 0), row.compute_name)
            continue
        if row.status != JobStatus.QUEUED:
            continue
        if row.compute_name not in computes:
            computes[row.compute_name] = _compute(session, workspace_id, row.compute_name)
        compute = computes[row.compute_name]
        if compute is None:
            reason = WaitReason(
                WaitCode.WAITING_FOR_NODES, row.status_message or "waiting for nodes made for this job"
            )
            out[row.id] = _answer(reason, QueuePlace(None, 0, 0, 0), row.compute_name)
            continue
        snap = snapshot(session, compute)
        nodes = int(((row.spec or {}).get("resources") or {}).get("instance_count") or 1)
        out[row.id] = _from_snapshot(snap, row.id, nodes, row.spec or {}, False, compute.name)
    return out


def _from_snapshot(
    snap: Snapshot, job_id: int, nodes: int, spec: dict[str, Any], canceling: bool, compute: str
) -> dict[str, Any]:
    found = snap.entry(job_id)
    entry, place = found if found is not None else (None, None)
    if place is not None:
        where = QueuePlace(
            place.position, place.ahead, place.ahead_cores, place.ahead_higher_priority, place.ahead_nodes
        )
    else:  # deeper than the part read (or newer than the snapshot): at least all of it is ahead
        jobs, cores, nodes_ahead = snap.tail
        where = QueuePlace(None, jobs, cores, 0, nodes_ahead)
    if canceling or (entry is not None and entry.canceled):
        reason = WaitReason(WaitCode.CANCELING, "cancel requested: it leaves the queue")
    elif snap.instance is not None:
        vcpus = min(dispatch.processes_per_node(spec), snap.instance.vcpus) if snap.instance.vcpus else 1
        base = instance_reason(where, dataclasses.replace(snap.instance, job_vcpus=vcpus))
        reason = _ordered(base, snap, entry, place)
    else:
        assert snap.cluster is not None
        base = cluster_reason(
            where, dataclasses.replace(snap.cluster, job_nodes=entry.nodes if entry else nodes)
        )
        reason = _ordered(base, snap, entry, place)
    eta = snap.taken_at + place.start_in_s if place is not None and place.start_in_s is not None else None
    answer = _answer(reason, where, compute, eta, snap.taken_at)
    if eta is not None and place is not None and place.waits_for_boot and snap.boot is not None:
        # Its start waits for a node that is not up yet: the estimate includes that node's boot.
        answer["eta_boot_s"] = round(snap.boot.seconds)
        answer["eta_note"] = f"includes ~{round(snap.boot.seconds)} s for a node to start ({snap.boot.basis})"
    if place is None:
        answer["position_text"] = position_text(None, snap.deeper_than)
    return answer


def _ordered(base: WaitReason, snap: Snapshot, entry: Any, place: Any) -> WaitReason:
    standing = snap.standings.get(entry.team) if entry is not None and entry.team is not None else None
    return queue_reason(base, place, bool(entry and entry.spot), standing)


def _answer(
    reason: WaitReason,
    place: QueuePlace,
    compute: str | None,
    eta: float | None = None,
    as_of: float | None = None,
) -> dict[str, Any]:
    now = time.time()
    return {
        "code": reason.code.value,
        "message": reason.message,
        "position": place.position,
        "position_text": position_text(place.position, None),
        "ahead": place.ahead,
        "ahead_cores": place.ahead_cores,
        "compute": compute,
        "eta": _iso(eta),
        "eta_in_s": None if eta is None else max(0, round(eta - now)),
        "eta_text": None if eta is None else in_words(eta - now),
        "as_of": _iso(as_of),
        "eta_boot_s": None,
        "eta_note": None,
    }


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _compute(session: Session, workspace_id: int, name: str | None) -> Compute | None:
    if name is None:
        return None
    return session.scalar(select(Compute).where(Compute.workspace_id == workspace_id, Compute.name == name))
