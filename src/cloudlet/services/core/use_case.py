"""A write use case owns its transaction, failure included: when it raises, what it wrote is rolled
back before the error leaves it. A front door that answers a refusal by drawing its form again (the
studio) then reads from a clean session, and never rolls back itself (``test_routers_leave_commits_
to_services``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy.orm import Session

P = ParamSpec("P")
R = TypeVar("R")


def use_case(fn: Callable[Concatenate[Session, P], R]) -> Callable[Concatenate[Session, P], R]:
    """FN (whose first argument is its session), rolled back on any exception it raises."""

    @functools.wraps(fn)
    def run(session: Session, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(session, *args, **kwargs)
        except BaseException:
            session.rollback()
            raise

    return run
