"""One request's share of a batched transaction (``control/dispatch_batcher.py`` runs them).

A service that wants its writes group-committed with others (job submissions, run reports)
returns a ``Work``: applied to the batch's ``Round`` inside the shared transaction, it returns an
``Answer`` that builds the request's reply once the batch has committed (with the runs the
closing scheduling round placed, per node).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.store.schema import Compute

Deliveries = dict[str, list[dict[str, Any]]]  # node id -> run specs placed for it this round
Answer = Callable[[Deliveries], Any]  # after commit: build the request's answer


@dataclass
class Round:
    """What one batch's requests ask of the scheduling round that closes it."""

    session: Session
    # False on a batch's first try: checks the store's constraints make anyway (a taken name) are
    # left to them; True when a failed batch replays each request alone, to explain the failure.
    alone: bool = True
    freed: list[str] = field(default_factory=list)  # nodes whose runs ended
    freed_on: set[int] = field(default_factory=set)  # computes of nodes known to be idle now
    fed: dict[int, Compute] = field(default_factory=dict)  # computes that got new jobs
    # Asked after scheduling: does demand now need the autoscaler (e.g. a job still queued)?
    rescale_if: list[Callable[[], bool]] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict)  # lookups shared by the batch's requests


Work = Callable[[Round], Answer]  # applies one request's writes; raises to refuse it
