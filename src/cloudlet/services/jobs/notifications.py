"""Job notifications' outbox and delivery log (issue 29 item 4).

``enqueue`` writes one ``notification_deliveries`` row per email recipient and webhook a job's
``notification_setting`` names for the final status it reaches, in the SAME transaction that moves
the job there (``services.jobs.job_status`` calls it): a job that ends has its notifications
recorded, and one whose move rolls back has none. The notification loop
(``control/notifications.py``) reads ``due`` rows, sends them, and records each try with
``record_try``; ``deliveries`` is the job's delivery log (REST, ``cloudlet job deliveries``).
Sending never happens here: a slow or failing receiver cannot hold the job's transaction.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, NamedTuple

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import not_found
from cloudlet.domain.jobs import notifications as rules
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.webhook_secrets import WorkspaceSigning
from cloudlet.services.access import workspaces
from cloudlet.services.core import effects
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.store.schema import Job, NotificationDelivery, ResourceGroup, WebhookSecret, Workspace

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
_READ: Any = object()  # enqueue's setting: not known to the caller, read it
_MAX_ERROR = 1000

# Whether the job asks for notifications: one column of one row, read on every job's end (plain
# SQL, built once: the ORM's per-statement work cost more than the read itself).
_SETTING = select(Job.spec["notification_setting"].label("setting")).where(Job.id == bindparam("job"))
# What a message says about the job, read only for a job that has a setting.
_JOB_FACTS = (
    select(
        Job.name,
        Job.status_message,
        Job.error,
        Workspace.name.label("workspace"),
        ResourceGroup.name.label("resource_group"),
        ResourceGroup.subscription_id,
    )
    .join(Workspace, Workspace.id == Job.workspace_id)
    .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
    .where(Job.id == bindparam("job"))
)


def enqueue(session: Session, job_id: int, to: JobStatus, now: float, setting: Any = _READ) -> int:
    """Record the notifications job JOB_ID owes for reaching TO (inside the caller's transaction);
    how many. SETTING: the job's ``notification_setting`` when the caller holds it (else read).
    Wakes the notification loop once the transaction commits."""
    if rules.event_of(to) is None:
        return 0
    connection = session.connection()
    if setting is _READ:
        setting = connection.execute(_SETTING, {"job": job_id}).scalar()
    planned = rules.planned(setting, to) if setting else []
    if not planned:
        return 0
    facts = connection.execute(_JOB_FACTS, {"job": job_id}).one()
    payload = {
        "job": facts.name,
        "status": to.value,
        "message": facts.status_message,
        "error": facts.error,
        "workspace": facts.workspace,
        "studio_path": studio_path(facts.subscription_id, facts.resource_group, facts.workspace, facts.name),
    }
    connection.execute(  # plain SQL, as the status write beside it: ORM objects cost more
        insert(NotificationDelivery),
        [
            {
                "job_id": job_id,
                "kind": kind,
                "target": target,
                "event": event,
                "payload": payload,
                "state": PENDING,
                "attempts": 0,
                "created_at": now,
                "next_try_at": now,
            }
            for kind, target, event in planned
        ],
    )
    effects.notifications_pending(session)
    return len(planned)


def studio_path(subscription: str, resource_group: str, workspace: str, job: str) -> str:
    """The job's page in the studio (``studio/shell.ws_url``'s scheme), from the server's root."""
    parts = (subscription, resource_group, workspace, "jobs", job)
    return "/studio/ws/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)


class Due(NamedTuple):
    delivery: NotificationDelivery
    setting: dict[str, Any]  # the job's stored notification_setting
    signing: WorkspaceSigning | None  # the job's workspace's webhook secret, if it has one


def due(session: Session, now: float, limit: int) -> list[Due]:
    """Pending deliveries whose time has come, oldest first, with their job's stored setting and
    its workspace's signing secret (read at each try: a rotation signs the next try)."""
    query = (
        select(
            NotificationDelivery,
            Job.spec["notification_setting"],
            WebhookSecret.secret,
            WebhookSecret.previous_secret,
            WebhookSecret.previous_until,
        )
        .join(Job, Job.id == NotificationDelivery.job_id)
        .outerjoin(WebhookSecret, WebhookSecret.workspace_id == Job.workspace_id)
        .where(NotificationDelivery.state == PENDING, NotificationDelivery.next_try_at <= now)
        .order_by(NotificationDelivery.next_try_at, NotificationDelivery.id)
        .limit(limit)
    )
    return [
        Due(row, setting or {}, WorkspaceSigning(secret, previous, until) if secret is not None else None)
        for row, setting, secret, previous, until in session.execute(query)
    ]


def still_due(session: Session, delivery_id: int, attempts: int) -> bool:
    """Whether the delivery is still pending after ATTEMPTS tries (no try recorded since it was read)."""
    query = select(NotificationDelivery.id).where(
        NotificationDelivery.id == delivery_id,
        NotificationDelivery.state == PENDING,
        NotificationDelivery.attempts == attempts,
    )
    return session.scalar(query) is not None


def record_try(
    session: Session,
    delivery_id: int,
    attempts: int,
    ok: bool,
    status: int | None,
    error: str | None,
    now: float,
) -> None:
    """A try of the delivery ended: delivered, to be tried again with backoff, or given up."""
    values: dict[str, Any] = {"attempts": attempts, "last_status": status, "last_error": (error or None)}
    if values["last_error"]:
        values["last_error"] = values["last_error"][:_MAX_ERROR]
    if ok:
        values.update(state=DELIVERED, delivered_at=now, next_try_at=None)
    else:
        later = rules.next_try(attempts, now)
        values.update(state=PENDING if later is not None else FAILED, next_try_at=later)
    session.execute(  # only over the state the try began from: a try is recorded once
        update(NotificationDelivery)
        .where(NotificationDelivery.id == delivery_id, NotificationDelivery.attempts == attempts - 1)
        .values(values)
    )


def deliveries(session: Session, ref: WorkspaceRef, caller: Caller, name: str) -> list[dict[str, Any]]:
    """The delivery log of job NAME, for a caller who may read it: per delivery its target, event,
    state, attempts, last status or error and next try."""
    _, job = workspaces.resolve_child(session, ref, caller, Access.READ, Job, name)
    if job is None:
        raise not_found("Job", name)
    rows = session.scalars(
        select(NotificationDelivery)
        .where(NotificationDelivery.job_id == job.id)
        .order_by(NotificationDelivery.id)
    )
    return [view(row) for row in rows]


def view(row: NotificationDelivery) -> dict[str, Any]:
    return {
        "kind": row.kind,
        "target": row.target,
        "event": row.event,
        "state": row.state,
        "attempts": row.attempts,
        "lastStatus": row.last_status,
        "lastError": row.last_error,
        "createdAt": row.created_at,
        "nextTryAt": row.next_try_at,
        "deliveredAt": row.delivered_at,
    }
