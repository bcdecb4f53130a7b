"""services/tracking/tracking_tokens.py on an in-memory store: a job's tracking token is signed into a run
spec only on delivery, opens the runs of the job and of its descendants (a pipeline's steps, a
sweep's trials, theirs), and is refused once the job has ended or is gone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.services.tracking import tracking_tokens
from cloudlet.store.schema import Base, Job, ResourceGroup, Subscription, Workspace

SECRET = "s" * 64


@pytest.fixture
def session() -> Iterator[Session]:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add(Subscription(id="s", display_name="s"))
        s.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        s.add(Workspace(id=3, resource_group_id=1, name="ws", location="l", created_on=datetime.now(UTC)))
        s.commit()
        yield s
    engine.dispose()
    tracking_tokens._scopes.clear()


def _job(session: Session, job_id: int, name: str, parent: int | None = None, status: str = "Running") -> Job:
    job = Job(
        id=job_id,
        workspace_id=3,
        name=name,
        spec={},
        status=status,
        parent_job_id=parent,
        created_by="a",
        submitted_at=0.0,
    )
    session.add(job)
    session.flush()
    return job


def test_a_token_is_signed_in_on_delivery_only() -> None:
    claims = tracking_tokens.token_claims(3, "j", {"limits": {"timeout": 60}})
    stored = {"run": "r-1", "env": {"A": "1"}, tracking_tokens.TOKEN_FIELD: claims}
    [sent] = tracking_tokens.seal([stored], SECRET)
    token = sent["env"][tracking_tokens.TOKEN_ENV]
    assert tracking_tokens.TOKEN_FIELD not in sent and sent["env"]["A"] == "1"
    assert tracking_tokens.claims_of(SECRET, token) == (3, "j")
    assert stored["env"] == {"A": "1"}  # the stored spec is left token-free
    assert tracking_tokens.seal([{"run": "r-2"}], SECRET) == [{"run": "r-2"}]
    with pytest.raises(CloudletError) as forged:
        tracking_tokens.claims_of("t" * 64, token)
    assert forged.value.status == 401


def test_a_token_opens_its_job_and_descendants_until_the_job_ends(session: Session) -> None:
    parent = _job(session, 1, "pipe")
    step = _job(session, 2, "pipe-step", parent=1)
    _job(session, 3, "pipe-step-trial", parent=2)
    _job(session, 4, "elsewhere")
    token = tracking_tokens.job_token(SECRET, 3, "pipe", 3600)
    scope = tracking_tokens.scope(session, SECRET, token)
    assert scope.runs == {"pipe", "pipe-step", "pipe-step-trial"} and scope.workspace_id == 3
    child = tracking_tokens.scope(session, SECRET, tracking_tokens.job_token(SECRET, 3, "pipe-step", 3600))
    assert child.runs == {"pipe-step", "pipe-step-trial"}  # a child's token does not reach its parent

    step.status = parent.status = "Completed"
    session.flush()
    tracking_tokens._scopes.clear()  # what CALLER_CACHE_TTL_S passing does
    for name in ("pipe", "pipe-step"):
        with pytest.raises(CloudletError, match="has ended") as ended:
            tracking_tokens.scope(session, SECRET, tracking_tokens.job_token(SECRET, 3, name, 3600))
        assert ended.value.status == 401
    with pytest.raises(CloudletError, match="no longer exists"):
        tracking_tokens.scope(session, SECRET, tracking_tokens.job_token(SECRET, 3, "never", 3600))
