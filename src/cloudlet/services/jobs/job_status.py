"""Changing a job's status: the only code that writes ``jobs.status``.

Two forms, one table (``domain.jobs.job_status``):

- ``set_status`` changes a ``Job`` object the session holds. It checks the move against the table
  and stamps the times the move implies; the object's flush writes it.
- ``update_status`` changes a row in one plain ``UPDATE … WHERE id = :id AND status IN (<the
  statuses that may become the target>)``. Placing jobs and recording exits write that way
  because loading the job as an object cost more than the rest of their work; a ``Job`` object
  the session holds for the row stays coherent with it (``store/rows.py``). The guard in the WHERE
  makes an illegal move there as impossible as in the object form: the row is not matched, and
  ``update_status`` raises rather than report a change that did not happen. ``update_statuses``
  is the same for a scheduling round's placements, in executemany statements (its guard counts
  the matched rows, and names an unmatched one).

Both take their columns from ``domain.jobs.job_status.changes``, so they cannot stamp differently.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any, Final, cast

from sqlalchemy import Table, Update, bindparam, or_, select, update
from sqlalchemy.orm import Session, object_session

from cloudlet.domain.errors import CloudletError, failure_text
from cloudlet.domain.jobs import job_status
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.core import effects, events
from cloudlet.services.jobs import notifications
from cloudlet.store import rows
from cloudlet.store.schema import Job

log = logging.getLogger(__name__)


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()  # leave the column as it is (None would clear it)

# The status sets as plain strings, for SQL (a driver may bind an enum member by its name).
ACTIVE_VALUES: tuple[str, ...] = tuple(s.value for s in job_status.IN_ORDER if s in job_status.ACTIVE)
FINAL_VALUES: tuple[str, ...] = tuple(s.value for s in job_status.IN_ORDER if s in job_status.FINAL)
WORKING_VALUES: tuple[str, ...] = tuple(s.value for s in job_status.IN_ORDER if s in job_status.WORKING)
QUEUED: Final = JobStatus.QUEUED.value


def set_status(
    job: Job,
    to: JobStatus,
    now: float,
    message: str | _Unchanged | None = UNCHANGED,
    exit_code: int | _Unchanged | None = UNCHANGED,
    error: dict[str, Any] | _Unchanged | None = UNCHANGED,
) -> None:
    """Move JOB to TO at NOW, or raise ``IllegalJobTransition`` (nothing changed then). Becoming
    Running stamps ``started_at`` (kept when set: the first run's start stands); ending stamps
    ``ended_at``; requeuing clears it. MESSAGE, EXIT_CODE and ERROR are written when given."""
    for column, value in job_status.changes(job.status, to, now, job.name).items():
        setattr(job, column, value)
    if to is JobStatus.RUNNING and job.started_at is None:
        job.started_at = now
    if not isinstance(message, _Unchanged):
        job.status_message = message
    if not isinstance(exit_code, _Unchanged):
        job.exit_code = exit_code
    if not isinstance(error, _Unchanged):
        job.error = error
    if job.parent_job_id is not None:
        effects.parent_work(object_session(job))
    setting = (job.spec or {}).get("notification_setting")
    if setting and to in job_status.FINAL and (session := object_session(job)) is not None:
        session.flush()  # the outbox rows name the job, and their message reads its row
        notifications.enqueue(session, job.id, to, now, setting)


@functools.cache
def _guarded_update(to: JobStatus, columns: frozenset[str]) -> Update:
    """``UPDATE jobs SET … WHERE id = :row_id AND status IN (sources of TO)``, built once per
    (target, column set) like ``store.rows.update_row``'s statements."""
    table = cast(Table, Job.__table__)
    allowed = sorted(s.value for s in job_status.sources(to))
    assert allowed, f"nothing may become {to.value}"
    values = {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in sorted(columns)}
    # Plain binds, not ``IN (…)``: that renders its list per execution, which executemany refuses.
    guard = or_(*(table.c.status == bindparam(f"from_{i}", value) for i, value in enumerate(allowed)))
    return update(table).where(table.c.id == bindparam("row_id"), guard).values(values)


@functools.cache
def _returning_setting(statement: Update) -> Update:
    """STATEMENT answering the row's ``notification_setting`` (``services/jobs/notifications.py``)."""
    table = cast(Table, Job.__table__)
    return statement.returning(table.c.spec["notification_setting"].label("setting"))


def status_update(to: JobStatus, now: float, columns: dict[str, Any]) -> tuple[Update, dict[str, Any]]:
    """The guarded statement and its parameters for moving a job row to TO with COLUMNS beside it
    (its id is bound as ``row_id`` by the caller). The status and times come from the table."""
    stamped = {**columns, **job_status.stamps(to, now)}
    params = {f"v_{name}": value for name, value in stamped.items()}
    return _guarded_update(to, frozenset(stamped)), params


def update_status(
    session: Session,
    job_id: int,
    to: JobStatus,
    now: float,
    columns: dict[str, Any] | None = None,
    child: bool = False,
    was: events.JobWas | None = None,
) -> None:
    """Move the job row JOB_ID to TO in plain SQL, with COLUMNS beside it; raises
    ``IllegalJobTransition`` when its status may not become TO. CHILD: the job has a parent (told
    of the move once it commits). WAS: the row as this transaction read it (its event's source,
    not read again). A ``Job`` object SESSION holds for the row takes the values."""
    statement, params = status_update(to, now, columns or {})
    connection = session.connection()
    final = to in job_status.FINAL
    returning = final and connection.dialect.update_returning
    if returning:  # the job's notification setting comes back with the write: no read of its own
        statement = _returning_setting(statement)
    held_object = rows.before_write(session, Job, job_id)
    events.jobs_moving(session, to.value, [(job_id, now, columns or {})], {job_id: was} if was else None)
    result = connection.execute(statement, {"row_id": job_id, **params})
    matched = result.all() if returning else None  # RETURNING's rows are the reliable count there
    if (len(matched) if matched is not None else result.rowcount) != 1:
        current = session.connection().execute(select(Job.status).where(Job.id == job_id)).scalar()
        job_status.transition(str(current), to, f"#{job_id}")  # raises: the row did not match
        raise AssertionError(f"job #{job_id} moved to {to.value} but no row changed")
    if held_object is not None:
        rows.after_write(held_object, {name.removeprefix("v_"): value for name, value in params.items()})
    if child:
        effects.parent_work(session)
    if matched:
        notifications.enqueue(session, job_id, to, now, matched[0].setting)
    elif final:  # a store without UPDATE … RETURNING (SQLite before 3.35): read it
        notifications.enqueue(session, job_id, to, now)


def update_statuses(
    session: Session,
    to: JobStatus,
    moves: list[tuple[int, float, dict[str, Any]]],
    known: Mapping[int, events.JobWas] | None = None,
) -> None:
    """``update_status`` for many job rows (id, now, columns) in one executemany statement per
    column set: a scheduling round writes its placements together. The guard holds as there: when
    fewer rows matched than were moved, ``IllegalJobTransition`` names an offending row (the
    caller's transaction then rolls back what did match). Parents are told by the caller. KNOWN:
    rows as this transaction read them (``update_status``'s WAS)."""
    connection = session.connection()
    known = known or {}
    if len(moves) == 1 or not connection.dialect.supports_sane_multi_rowcount:
        for job_id, now, columns in moves:  # rowcount per row is the only reliable guard check
            update_status(session, job_id, to, now, columns, was=known.get(job_id))
        return
    by_columns: dict[frozenset[str], tuple[Update, list[dict[str, Any]]]] = {}
    held_objects = []
    events.jobs_moving(session, to.value, moves, known)
    for job_id, now, columns in moves:
        statement, params = status_update(to, now, columns)
        by_columns.setdefault(frozenset(params), (statement, []))[1].append({"row_id": job_id, **params})
        held_objects.append((rows.before_write(session, Job, job_id), params))
    for statement, params_list in by_columns.values():
        if connection.execute(statement, params_list).rowcount != len(params_list):
            _raise_unmatched(session, to, [params["row_id"] for params in params_list])
    for held_object, params in held_objects:
        if held_object is not None:
            rows.after_write(held_object, {name.removeprefix("v_"): value for name, value in params.items()})


def _raise_unmatched(session: Session, to: JobStatus, job_ids: list[int]) -> None:
    """Raise ``IllegalJobTransition`` for a row among JOB_IDS the guarded UPDATE did not match:
    one gone, or one whose status may not become TO (one already TO, when no other shows)."""
    query = select(Job.id, Job.status).where(Job.id.in_(job_ids))
    found = {row.id: row.status for row in session.connection().execute(query)}
    for job_id in job_ids:
        current = found.get(job_id)
        if current != to.value:
            job_status.transition(str(current), to, f"#{job_id}")  # raises: the row did not match
    job_status.transition(to, to, f"one of #{', #'.join(map(str, job_ids[:5]))}")
    raise AssertionError(f"{len(job_ids)} jobs moved to {to.value} but fewer rows changed")


def cannot_start(name: str, exc: Exception) -> tuple[str, dict[str, Any]]:
    """(status message, error) of a job whose run specs could not be made as it was placed (e.g.
    one stored before a limit it breaks existed): it fails alone, and the pass places the others."""
    log.exception("job %s cannot start: its runs could not be made", name)
    if isinstance(exc, CloudletError):
        code, reason, target = exc.code, exc.message, exc.target
    else:
        code, reason, target = "JobCannotStart", failure_text(exc), None
    error = {"code": code, "message": reason[:500], **({"target": target} if target else {})}
    return f"the job cannot start: {reason}"[:500], error
