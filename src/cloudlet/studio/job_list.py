"""The job list's filters as they live in the page's URL (shareable; the back button returns to a
view): query parameters ↔ ``job_search.JobQuery``, and the links a page needs (a sort, the next
page, a filter removed).

Parameters: ``q`` (name search), ``status``, ``type`` (repeatable), ``compute``, ``by`` (submitted
by), ``experiment``, ``tag`` (``key`` or ``key=value``, comma-separated), ``since`` (a preset
range) or ``from``/``to`` (dates, UTC), ``sort`` + ``order``, ``size`` (rows a page) and ``after``
(the next page's token).
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.parse
from dataclasses import dataclass

from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.jobs.job_search import JobQuery, JobSort

PAGE_SIZE = 50
PAGE_SIZES = (25, 50, 100)
SINCE = {"1h": 3600, "24h": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400}
SINCE_LABELS = {
    "": "Any time",
    "1h": "Last hour",
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
}
STATUSES = tuple(s.value for s in JobStatus)
KINDS = tuple(k.value for k in JobKind)
SORTS = tuple(s.value for s in JobSort)
MAX_PARAM = 256


@dataclass(frozen=True)
class ListView:
    """The list's parameters as the page shows them (strings as typed) and links them."""

    q: str = ""
    statuses: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    compute: str = ""
    by: str = ""
    experiment: str = ""
    tags: str = ""
    since: str = ""
    date_from: str = ""
    date_to: str = ""
    sort: str = JobSort.SUBMITTED.value
    order: str = "desc"
    after: str = ""
    size: int = PAGE_SIZE

    @property
    def filtered(self) -> bool:
        return any(
            (self.q, self.statuses, self.kinds, self.compute, self.by, self.experiment, self.tags)
        ) or any((self.since, self.date_from, self.date_to))

    def params(self, **changes: str | tuple[str, ...]) -> list[tuple[str, str]]:
        """This view's query parameters, with CHANGES (a key set to "" or () is dropped)."""
        values: dict[str, str | tuple[str, ...]] = {
            "q": self.q,
            "status": self.statuses,
            "type": self.kinds,
            "compute": self.compute,
            "by": self.by,
            "experiment": self.experiment,
            "tag": self.tags,
            "since": self.since,
            "from": self.date_from,
            "to": self.date_to,
            "sort": "" if self.sort == JobSort.SUBMITTED.value else self.sort,
            "order": "" if self.order == "desc" else self.order,
            "after": self.after,
            "size": "" if self.size == PAGE_SIZE else str(self.size),
        }
        values.update(changes)
        if values["sort"] == JobSort.SUBMITTED.value:  # the defaults stay out of the URL
            values["sort"] = ""
        if values["order"] == "desc":
            values["order"] = ""
        pairs: list[tuple[str, str]] = []
        for key, value in values.items():
            for one in (value,) if isinstance(value, str) else value:
                if one:
                    pairs.append((key, one))
        return pairs

    def url(self, base: str, **changes: str | tuple[str, ...]) -> str:
        query = urllib.parse.urlencode(self.params(**changes))
        return f"{base}?{query}" if query else base

    def sort_url(self, base: str, sort: str) -> str:
        """The link of a column header: by SORT, the other way round when already by it."""
        order = ("asc" if self.order == "desc" else "desc") if self.sort == sort else _first_order(sort)
        return self.url(base, sort=sort, order="" if order == "desc" else order, after="")

    def aria_sort(self, sort: str) -> str:
        if self.sort != sort:
            return "none"
        return "descending" if self.order == "desc" else "ascending"


def _first_order(sort: str) -> str:
    return "asc" if sort in (JobSort.NAME.value, JobSort.COMPUTE.value, JobSort.STATUS.value) else "desc"


def _text(value: str | None, name: str) -> str:
    value = (value or "").strip()
    if len(value) > MAX_PARAM:
        raise validation_error(name, f"{name} is at most {MAX_PARAM} characters")
    return value


def _date(value: str, name: str) -> float | None:
    if not value:
        return None
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise validation_error(name, f"{name} must be a date such as 2026-12-31") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def view_of(params: list[tuple[str, str]]) -> ListView:
    """The view a URL's query parameters ask for (unknown ones ignored; values bounded)."""
    many: dict[str, list[str]] = {}
    for key, value in params:
        many.setdefault(key, []).append(value)

    def one(key: str) -> str:
        return _text((many.get(key) or [""])[0], key)

    order = one("order") or "desc"
    if order not in ("asc", "desc"):
        raise validation_error("order", "order is asc or desc")
    size = one("size") or str(PAGE_SIZE)
    if size not in {str(n) for n in PAGE_SIZES}:
        raise validation_error("size", f"size is one of {', '.join(str(n) for n in PAGE_SIZES)}")
    since = one("since")
    if since and since not in SINCE:
        raise validation_error("since", f"since is one of {', '.join(SINCE)}")
    return ListView(
        q=one("q"),
        statuses=tuple(dict.fromkeys(_text(v, "status") for v in many.get("status", []) if v)),
        kinds=tuple(dict.fromkeys(_text(v, "type") for v in many.get("type", []) if v)),
        compute=one("compute"),
        by=one("by"),
        experiment=one("experiment"),
        tags=one("tag"),
        since=since,
        date_from=one("from"),
        date_to=one("to"),
        sort=one("sort") or JobSort.SUBMITTED.value,
        order=order,
        after=(many.get("after") or [""])[0][:512],
        size=int(size),
    )


def counted(view: ListView) -> bool:
    """Whether the list asks for its count: a count reads every match (up to ``COUNT_CAP``), cheap
    through an index (all jobs, a status, a name search) but a scan of 100,000 jobs' documents for
    a tag or an experiment (0.6 s measured): those pages say "50+ jobs" instead."""
    return not (view.compute or view.by or view.experiment or view.tags)


def query_of(view: ListView, now: float | None = None) -> JobQuery:
    """The service's query for VIEW (``job_search`` validates statuses, types, the sort and tags)."""
    submitted_from = _date(view.date_from, "from")
    submitted_to = _date(view.date_to, "to")
    if submitted_to is not None:
        submitted_to += 86_400  # "to" names a day: the whole of it
    if view.since:
        start = (now if now is not None else time.time()) - SINCE[view.since]
        submitted_from = max(submitted_from or start, start)
    tags = tuple(t.strip() for t in view.tags.split(",") if t.strip())
    return JobQuery(
        statuses=view.statuses,
        kinds=view.kinds,
        computes=(view.compute,) if view.compute else (),
        created_by=(view.by,) if view.by else (),
        experiment=view.experiment or None,
        tags=tags,
        submitted_from=submitted_from,
        submitted_to=submitted_to,
        text=view.q or None,
        sort=view.sort,
        descending=view.order == "desc",
        top=view.size,
        after=view.after or None,
        count=counted(view),
    )
