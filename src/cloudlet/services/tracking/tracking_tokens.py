"""A job's MLflow tracking token (``MLFLOW_TRACKING_TOKEN``): what it opens, and for how long.

The token is ``clm_`` and a reference signed with the installation's secret (``signed_urls``)
naming the workspace and the job. It is never stored: a run spec in the store carries only which
job's token its processes get (``TOKEN_FIELD``), and the token is signed into the spec's
environment as the spec leaves for its agent (``seal``), so the store holds no token, plain or
hashed, that could be read back out of it.

On every use the job is looked up (``scope``, cached per token for ``CALLER_CACHE_TTL_S``, as
callers are): a job that has ended — completed, failed or canceled — ends its token within that
time, and the token reads and writes only the job's own run and its descendants' (a pipeline's
steps, a sweep's trials) — never another run of the workspace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_status import FINAL
from cloudlet.services.access import signed_urls
from cloudlet.services.access.identity import CALLER_CACHE_TTL_S
from cloudlet.store.schema import Job

JOB_TOKEN_PREFIX = "clm_"
JOB_TOKEN_PURPOSE = "mlflow-job-run"
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
# In a stored run spec: the claims of the token its processes get, signed only on delivery.
TOKEN_FIELD = "tracking_token"
NO_TIMEOUT_TOKEN_S = 7 * 24 * 3600  # a job's token when the job has no time limit
TOKEN_GRACE_S = 3600
MAX_DESCENDANTS = 10_000  # a runaway tree of children is cut off, not walked for ever


def unauthenticated(message: str) -> CloudletError:
    return CloudletError("AuthenticationFailed", message, status=401)


def token_claims(workspace_id: int, job: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What a run spec carries of its job's token: whose it is and how long it may live (the
    job's time limit and a grace; ``scope`` ends it sooner, with the job)."""
    timeout = (spec.get("limits") or {}).get("timeout")
    lifetime = (int(timeout) if timeout else NO_TIMEOUT_TOKEN_S) + TOKEN_GRACE_S
    return {"w": workspace_id, "j": job, "s": lifetime}


def job_token(secret: str, workspace_id: int, job: str, lifetime_s: int) -> str:
    claims = {"w": workspace_id, "j": job}
    return JOB_TOKEN_PREFIX + signed_urls.sign(secret, JOB_TOKEN_PURPOSE, claims, lifetime_s)


def seal(specs: list[dict[str, Any]], secret: str) -> list[dict[str, Any]]:
    """SPECS as their agent gets them: each one naming a job's token has it signed into its
    environment (copies: the stored and queued specs stay token-free)."""
    sealed = []
    for spec in specs:
        claims = spec.get(TOKEN_FIELD)
        if isinstance(claims, dict):
            token = job_token(secret, int(claims["w"]), str(claims["j"]), int(claims["s"]))
            spec = {k: v for k, v in spec.items() if k != TOKEN_FIELD}
            spec["env"] = {**(spec.get("env") or {}), TOKEN_ENV: token}
        sealed.append(spec)
    return sealed


@dataclass(frozen=True)
class JobScope:
    """What a job's token opens: the runs of the job and of its descendants, in one workspace."""

    workspace_id: int
    job: str
    runs: frozenset[str]


def claims_of(secret: str, token: str) -> tuple[int, str]:
    """The workspace and job of a validly signed, unexpired token; 401 otherwise."""
    try:
        claims = signed_urls.verify(secret, JOB_TOKEN_PURPOSE, token[len(JOB_TOKEN_PREFIX) :])
        return int(claims["w"]), str(claims["j"])
    except (CloudletError, KeyError, TypeError, ValueError):
        raise unauthenticated("this job's tracking token is not valid or has expired") from None


_scopes: dict[str, tuple[float, JobScope]] = {}


def cached_scope(token: str) -> JobScope | None:
    hit = _scopes.get(token)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def scope(session: Session, secret: str, token: str) -> JobScope:
    """The scope of a job's token as its job stands now; 401 once the job has ended."""
    hit = cached_scope(token)
    if hit is not None:
        return hit
    workspace_id, name = claims_of(secret, token)
    job = session.execute(
        select(Job.id, Job.status).where(Job.workspace_id == workspace_id, Job.name == name)
    ).first()
    if job is None:
        raise unauthenticated(f"job '{name}' no longer exists; its tracking token ended with it")
    if job.status in FINAL:
        raise unauthenticated(
            f"job '{name}' has ended ({job.status}); its tracking token ended with it. "
            "Log to its run with an API key instead"
        )
    found = JobScope(workspace_id, name, frozenset({name, *_descendants(session, job.id)}))
    if len(_scopes) > 10_000:
        _scopes.clear()
    _scopes[token] = (time.monotonic() + CALLER_CACHE_TTL_S, found)
    return found


def _descendants(session: Session, job_id: int) -> list[str]:
    """The names of the jobs made by JOB_ID (pipeline steps, sweep trials), and theirs."""
    names: list[str] = []
    frontier = [job_id]
    while frontier and len(names) < MAX_DESCENDANTS:
        rows = session.execute(select(Job.id, Job.name).where(Job.parent_job_id.in_(frontier))).all()
        names += [row.name for row in rows]
        frontier = [row.id for row in rows]
    return names[:MAX_DESCENDANTS]
