"""The job list the studio (and the native REST list, when asked for more than status and compute)
reads: filters, sorts, keyset paging with an opaque token for every sort, and a capped count.

Every sort is a tuple of columns ending in the job's id, so ties are stable and a page's token is the
last row's tuple: the next page starts strictly after it (a job added meanwhile is neither skipped
nor repeated). The sorts the list answers most (submitted, and any of them under a status, compute
or submitter filter) have an index in that order (migrations 0026, 0027), so a first page reads a
page of index entries, not the world. A count stops at ``COUNT_CAP`` for the same reason, and a
name search's count goes on from its first page's last row (one walk of the matches in all).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, Integer, Select, String, func, literal, literal_column, select, tuple_
from sqlalchemy.orm import Session

from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import JOB_DURATION, Job, Workspace

COUNT_CAP = 10_000  # a count beyond this is shown as "10,000+": it never scans further
MAX_TEXT = 128
MAX_TAGS = 10


class JobSort(StrEnum):
    SUBMITTED = "submitted"
    NAME = "name"
    STATUS = "status"
    DURATION = "duration"
    COMPUTE = "compute"


@dataclass(frozen=True)
class JobQuery:
    """What the job list asks for. Empty tuples and None mean "any". ``tags`` holds ``key`` (the
    job has the tag) or ``key=value``; ``text`` is a case-insensitive substring of the job's name or
    display name (its first 256 characters); times are epoch seconds (``submitted_from`` inclusive,
    ``submitted_to`` exclusive). ``parent`` lists that job's children; otherwise
    ``include_children`` adds pipeline steps and sweep trials to the top-level jobs."""

    statuses: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    computes: tuple[str, ...] = ()
    created_by: tuple[str, ...] = ()
    experiment: str | None = None
    tags: tuple[str, ...] = ()
    submitted_from: float | None = None
    submitted_to: float | None = None
    text: str | None = None
    include_children: bool = False
    parent: str | None = None
    sort: str = JobSort.SUBMITTED.value
    descending: bool = True
    top: int = job_service.DEFAULT_PAGE
    after: str | None = None  # the previous page's ``next_token``
    count: bool = False  # also count the matching jobs (up to COUNT_CAP)


@dataclass(frozen=True)
class JobSearchPage:
    """One page: ``jobs`` are rows with the listed columns (``jobs.JobFields`` plus ``kind`` and
    ``parent_job_id``); ``count`` is None unless asked, and ``count_capped`` says it stopped at
    ``COUNT_CAP`` (show "10,000+")."""

    jobs: Sequence[Any]
    next_token: str | None
    count: int | None = None
    count_capped: bool = False


_LISTED = (*job_service.LIST_COLUMNS, Job.display_name, Job.kind, Job.parent_job_id)
# A job that has not ended sorts as shortest (-1): its duration is still growing, and a key that
# changes with the clock would break paging. The expression of the index ix_jobs_list_duration.
_DURATION = JOB_DURATION
_SORT_KEYS: dict[JobSort, tuple[Any, ...]] = {
    JobSort.SUBMITTED: (Job.submitted_at,),
    JobSort.NAME: (Job.name,),
    JobSort.STATUS: (Job.status, Job.submitted_at),
    JobSort.DURATION: (_DURATION, Job.submitted_at),
    JobSort.COMPUTE: (func.coalesce(Job.compute_name, ""), Job.submitted_at),
}
_STATUSES = frozenset(s.value for s in JobStatus)
_KINDS = frozenset(k.value for k in JobKind)


def search_jobs(session: Session, ws: Workspace, query: JobQuery) -> JobSearchPage:
    """A page of the workspace's jobs matching QUERY in its order, the token of the next page, and
    (when ``query.count``) how many match, capped. Raises a ValidationError naming the field."""
    sort = _validate(query)
    filtered = _filtered(session, ws, query)
    keys = (*_SORT_KEYS[sort], Job.id)
    page = select(*_LISTED).where(*filtered)
    if query.after is not None:
        page = page.where(
            _beyond(keys, query.descending, _decode_token(query.after, sort, query.descending, len(keys)))
        )
    order = [k.desc() if query.descending else k.asc() for k in keys]
    # A name search's bound is written into the statement, as its pattern is (``_contains``).
    bound = _written(query.top + 1) if query.text else query.top + 1
    rows: list[Any] = list(session.execute(page.order_by(*order).limit(bound)).all())
    count, capped = None, False
    if query.count and query.after is None and len(rows) <= query.top:
        count = len(rows)  # a first page that holds every match is its own count
    elif query.count and query.after is None and query.text:
        # A name is tested row by row (no index finds it on SQLite, nor on PostgreSQL without
        # trigrams): a rare one's page walks most of the workspace, and a count from the start
        # would walk it again. The count goes on from the page's last row: one walk in all.
        beyond = _beyond(keys, query.descending, _key_values(sort, rows[-1]))
        more, capped = _count(session, [*filtered, beyond], COUNT_CAP - len(rows), True)
        count = len(rows) + more
    elif query.count:  # through the filter's index: cheaper from the start (measured)
        count, capped = _count(session, filtered, COUNT_CAP, bool(query.text))
    if len(rows) <= query.top:
        return JobSearchPage(rows, None, count, capped)
    last_row = rows[query.top - 1]
    token = _encode_token(sort, query.descending, _key_values(sort, last_row))
    return JobSearchPage(rows[: query.top], token, count, capped)


def _beyond(keys: tuple[Any, ...], descending: bool, last: list[Any]) -> ColumnElement[bool]:
    """The rows after LAST (a row's sort key) in the order: a keyset page's start."""
    return tuple_(*keys) < tuple_(*last) if descending else tuple_(*keys) > tuple_(*last)


def page_statement(session: Session, ws: Workspace, query: JobQuery) -> Select[Any]:
    """The first page's statement for QUERY (for EXPLAIN in tests and the benchmark)."""
    sort = _validate(query)
    keys = (*_SORT_KEYS[sort], Job.id)
    order = [k.desc() if query.descending else k.asc() for k in keys]
    return select(*_LISTED).where(*_filtered(session, ws, query)).order_by(*order).limit(query.top + 1)


def list_columns(row: Any) -> dict[str, Any]:
    """The columns a job list shows, from one row of a page (times as epoch seconds)."""
    spec = row.spec or {}
    ended = row.ended_at
    return {
        "name": row.name,
        "display_name": row.display_name,
        "kind": row.kind,
        "status": row.status,
        "compute": row.compute_name,
        "created_by": row.created_by,
        "experiment": spec.get("experiment_name"),
        "tags": spec.get("tags") or {},
        "submitted_at": row.submitted_at,
        "started_at": row.started_at,
        "ended_at": ended,
        "duration_s": ended - row.started_at if ended is not None and row.started_at is not None else None,
        "is_child": row.parent_job_id is not None,
    }


def _validate(query: JobQuery) -> JobSort:
    try:
        sort = JobSort(query.sort)
    except ValueError:
        raise validation_error("sort", f"sort must be one of {', '.join(s.value for s in JobSort)}") from None
    if not 1 <= query.top <= job_service.MAX_PAGE:
        raise validation_error("top", f"top must be from 1 to {job_service.MAX_PAGE}")
    for status in query.statuses:
        if status not in _STATUSES:
            raise validation_error("status", f"'{status}' is not a job status; use {', '.join(JobStatus)}")
    for kind in query.kinds:
        if kind not in _KINDS:
            raise validation_error("type", f"'{kind}' is not a job type; use {', '.join(JobKind)}")
    if len(query.tags) > MAX_TAGS:
        raise validation_error("tags", f"at most {MAX_TAGS} tag filters")
    for tag in query.tags:
        if not tag.split("=", 1)[0]:
            raise validation_error("tags", f"'{tag}' names no tag: use key or key=value")
    if query.text is not None and len(query.text) > MAX_TEXT:
        raise validation_error("text", f"the name search is at most {MAX_TEXT} characters")
    for field, when in (("submitted_from", query.submitted_from), ("submitted_to", query.submitted_to)):
        if when is not None and not math.isfinite(when):
            raise validation_error(field, f"{field} must be a time")
    return sort


def _filtered(session: Session, ws: Workspace, query: JobQuery) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = [Job.workspace_id == ws.id]
    if query.parent is not None:
        where.append(Job.parent_job_id == job_service.get(session, ws, query.parent).id)
    elif not query.include_children:
        where.append(Job.parent_job_id.is_(None))
    if query.statuses:
        where.append(_one_of(Job.status, query.statuses))
    if query.kinds:
        where.append(_one_of(Job.kind, query.kinds))
    if query.computes:
        where.append(_one_of(Job.compute_name, query.computes))
    if query.created_by:
        where.append(_one_of(Job.created_by, query.created_by))
    if query.experiment is not None:
        where.append(Job.spec["experiment_name"].as_string() == query.experiment)
    for tag in query.tags:
        key, has_value, value = tag.partition("=")
        found = Job.spec["tags"][key].as_string()
        where.append(found == value if has_value else found.is_not(None))
    if query.submitted_from is not None:
        where.append(Job.submitted_at >= query.submitted_from)
    if query.submitted_to is not None:
        where.append(Job.submitted_at < query.submitted_to)
    if query.text:
        where.append(
            _contains(session, Job.name, query.text) | _contains(session, Job.display_name, query.text)
        )
    return where


def _contains(session: Session, column: Any, text: str) -> ColumnElement[bool]:
    """COLUMN holds TEXT, case-insensitively. SQLite's LIKE already ignores case (ASCII, as its
    lower() does) and costs half of lower() on every row; PostgreSQL's needs ILIKE.

    On PostgreSQL the pattern is written into the statement (quoted by SQLAlchemy), not bound:
    psycopg prepares a statement it has run five times, and PostgreSQL then settles on a generic
    plan that cannot see the pattern, so it walks the workspace newest first (200 ms measured at
    100,000 jobs) where the pattern's trigrams would have named a handful of jobs (1 ms)."""
    pattern = "%" + text.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"
    if session.get_bind().dialect.name == "sqlite":
        return column.like(pattern, escape="/")
    return column.ilike(literal(pattern, String, literal_execute=True), escape="/")


def _one_of(column: Any, values: tuple[str, ...]) -> ColumnElement[bool]:
    # One value as equality: the planner matches an index prefix on it (and keeps its order).
    return column == values[0] if len(values) == 1 else column.in_(values)


def _written(bound: int) -> ColumnElement[int]:
    return literal_column(str(int(bound)), Integer)


def _count(session: Session, where: list[ColumnElement[bool]], cap: int, written: bool) -> tuple[int, bool]:
    """How many rows match WHERE, up to CAP, and whether there are more (WRITTEN: the bound in
    the statement, as a name search's is)."""
    bound = _written(cap + 1) if written else cap + 1
    capped = select(literal(1)).select_from(Job).where(*where).limit(bound).subquery()
    found = int(session.scalar(select(func.count()).select_from(capped)) or 0)
    return min(found, cap), found > cap


def _key_values(sort: JobSort, row: Any) -> list[Any]:
    if sort is JobSort.SUBMITTED:
        return [row.submitted_at, row.id]
    if sort is JobSort.NAME:
        return [row.name, row.id]
    if sort is JobSort.STATUS:
        return [row.status, row.submitted_at, row.id]
    if sort is JobSort.DURATION:
        ended, started = row.ended_at, row.started_at
        duration = ended - started if ended is not None and started is not None else -1.0
        return [duration, row.submitted_at, row.id]
    return [row.compute_name or "", row.submitted_at, row.id]


def _encode_token(sort: JobSort, descending: bool, values: list[Any]) -> str:
    raw = json.dumps([sort.value, descending, values]).encode()  # floats round-trip through repr
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str, sort: JobSort, descending: bool, width: int) -> list[Any]:
    """The last row's sort key from TOKEN, checked against this query's sort (a token of another
    sort or direction would start the page at a meaningless place)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        token_sort, token_desc, values = json.loads(raw)
        if token_sort != sort.value or token_desc is not descending or len(values) != width:
            raise ValueError(token_sort)
        if not isinstance(values[-1], int) or isinstance(values[-1], bool):
            raise ValueError(values)
        for value in values[:-1]:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError(value)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(value)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise validation_error(
            "after", "not a continuation token of this list and sort; use the next token of the previous page"
        ) from None
    return list(values)
