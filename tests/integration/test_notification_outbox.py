"""The notifications' outbox on a real store (SQLite and PostgreSQL): a job's move to a final
status writes its deliveries in the same transaction — through either form of the one status
writer — a rolled-back move leaves none, a job without a setting or a status it does not notify
of makes none, and the commit wakes the notification loop (``Effects.notifications_pending``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.core import effects
from cloudlet.services.core.clock import utcnow
from cloudlet.services.jobs import job_status, notifications
from cloudlet.store import db
from cloudlet.store.schema import Job, NotificationDelivery, ResourceGroup, Subscription, Workspace

NOW = 500.0
SETTING = {
    "emails": ["ops@example.com"],
    "email_on": ["job_failed"],
    "webhooks": {"chat": {"url": "https://hooks.example/chat"}},
}


def _store(engine: Engine, specs: dict[str, dict[str, Any]]) -> dict[str, int]:
    db.migrate(engine)
    with db.session_factory(engine)() as session, session.begin():
        for parent in (
            Subscription(id="sub 1", display_name="s"),
            ResourceGroup(id=1, subscription_id="sub 1", name="rg", location="l"),
            Workspace(id=1, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow()),
        ):
            session.add(parent)
            session.flush()
        ids = {}
        for name, extra in specs.items():
            job = Job(
                workspace_id=1,
                name=name,
                spec={"type": "command", "command": "true", **extra},
                status=JobStatus.RUNNING.value,
                created_by="alice",
                submitted_at=1.0,
            )
            session.add(job)
            session.flush()
            ids[name] = job.id
        return ids


def _outbox(engine: Engine) -> None:
    ids = _store(engine, {"loud": {"notification_setting": SETTING}, "quiet": {}, "mild": {}})
    sessions = db.session_factory(engine)
    woken: list[str] = []
    effects.Publisher(on_notifications=lambda: woken.append("notify")).install(sessions)

    with sessions() as session, session.begin():  # rolled back: no deliveries
        job_status.update_status(session, ids["loud"], JobStatus.FAILED, NOW, {"error": {"code": "E"}})
        assert len(session.scalars(select(NotificationDelivery)).all()) == 2
        session.rollback()
    assert woken == []
    with sessions() as session:
        assert session.scalars(select(NotificationDelivery)).all() == []

    with sessions() as session, session.begin():
        job_status.update_status(session, ids["loud"], JobStatus.FAILED, NOW, {"error": {"code": "E"}})
        job_status.update_status(session, ids["quiet"], JobStatus.FAILED, NOW, {})
    assert woken == ["notify"]
    with sessions() as session:
        rows = session.scalars(select(NotificationDelivery).order_by(NotificationDelivery.id)).all()
        assert [(r.job_id, r.kind, r.target, r.event, r.state) for r in rows] == [
            (ids["loud"], "email", "ops@example.com", "job_failed", "pending"),
            (ids["loud"], "webhook", "chat", "job_failed", "pending"),
        ]
        assert rows[0].payload["studio_path"] == "/studio/ws/sub%201/rg/ws/jobs/loud"
        assert rows[0].payload["error"] == {"code": "E"} and rows[0].payload["status"] == "Failed"
        due = notifications.due(session, NOW, 10)
        assert [(d.setting, d.signing) for d in due] == [(SETTING, None), (SETTING, None)]
        assert notifications.due(session, NOW - 1, 10) == []

    # The object form (a cancel, a parent's end) writes them too; Completed mails no one here.
    with sessions() as session, session.begin():
        mild = session.get(Job, ids["mild"])
        assert mild is not None
        mild.spec = {**mild.spec, "notification_setting": SETTING}
        session.flush()
        job_status.set_status(mild, JobStatus.COMPLETED, NOW)
    with sessions() as session:
        rows = session.scalars(select(NotificationDelivery).where(NotificationDelivery.job_id == ids["mild"]))
        assert [(r.kind, r.event) for r in rows] == [("webhook", "job_completed")]


def test_sqlite_the_outbox_is_written_with_the_jobs_end(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _outbox(engine)
    engine.dispose()


def test_sqlite_without_update_returning_the_setting_is_read(tmp_path: Path) -> None:
    """A store whose SQLite predates ``UPDATE … RETURNING`` (3.35) reads the setting instead."""
    engine = db.make_engine(db.sqlite_url(tmp_path))
    engine.dialect.update_returning = False
    _outbox(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_the_outbox_is_written_with_the_jobs_end(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _outbox(engine)
    engine.dispose()
