"""The job list's studio filters as REST query parameters (``GET {ws}/jobs``), turned into a
``services.jobs.job_search.JobQuery``. Validation of values (statuses, types, the sort) is the
service's, so every front door gets the same errors naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Query

from cloudlet.services.jobs.job_search import JobQuery

ORDER_PATTERN = r"^(submitted|name|status|duration|compute)( (asc|desc))?$"


@dataclass(frozen=True)
class JobSearchParams:
    """The job list's parameters beyond status, compute and parent."""

    types: tuple[str, ...] = ()
    created_by: tuple[str, ...] = ()
    experiment: str | None = None
    tags: tuple[str, ...] = ()
    search: str | None = None
    submitted_after: datetime | float | None = None
    submitted_before: datetime | float | None = None
    include_children: bool = False
    orderby: str | None = None
    count: bool = False

    def asked(self) -> bool:
        """Whether any of these was given: without them the list is the plain paged list."""
        return self != NO_SEARCH

    def query(
        self, status: str | None, compute: str | None, parent: str | None, top: int, after: str | None
    ) -> JobQuery:
        sort, _, direction = (self.orderby or "submitted desc").partition(" ")
        return JobQuery(
            statuses=(status,) if status else (),
            kinds=self.types,
            computes=(compute,) if compute else (),
            created_by=self.created_by,
            experiment=self.experiment,
            tags=self.tags,
            submitted_from=_seconds(self.submitted_after),
            submitted_to=_seconds(self.submitted_before),
            text=self.search or None,
            include_children=self.include_children,
            parent=parent,
            sort=sort,
            # Names read A to Z by default; every other sort newest / largest first.
            descending=(direction or ("asc" if sort == "name" else "desc")) == "desc",
            top=top,
            after=after,
            count=self.count,
        )


NO_SEARCH = JobSearchParams()


# The parameters, as the list route declares them (plain query parameters: the route stays on the
# direct handler's plan, ``api/direct.py``).
TypeFilter = Annotated[
    list[str] | None, Query(description="only jobs of these types (command, pipeline, sweep)")
]
CreatorFilter = Annotated[list[str] | None, Query(description="only jobs submitted by these callers")]
ExperimentFilter = Annotated[str | None, Query(max_length=256, description="only this experiment's jobs")]
TagFilter = Annotated[list[str] | None, Query(description="only jobs with this tag: key or key=value")]
NameSearch = Annotated[
    str | None,
    Query(alias="search", max_length=128, description="name or display name contains this, in any case"),
]
# A time as ISO 8601 or as seconds since the epoch: what pydantic reads for a datetime, said as such.
SubmittedAfter = Annotated[
    datetime | float | None, Query(description="submitted at or after this time (ISO 8601, or epoch seconds)")
]
SubmittedBefore = Annotated[
    datetime | float | None, Query(description="submitted before this time (ISO 8601, or epoch seconds)")
]


def _seconds(moment: datetime | float | None) -> float | None:
    if moment is None:
        return None
    return moment.timestamp() if isinstance(moment, datetime) else float(moment)


WithChildren = Annotated[bool, Query(description="also pipeline steps and sweep trials")]
OrderBy = Annotated[str | None, Query(alias="$orderby", pattern=ORDER_PATTERN, description="e.g. 'name asc'")]
CountToo = Annotated[bool, Query(alias="$count", description="also count the matches, up to 10,000")]
