"""Who uses an asset version: the jobs (and online or batch deployments) that name it.

One function, ``used_by``, for every kind, bounded so a page never reads the whole workspace:

- data, models and environments: the jobs whose use was recorded at submission (``asset_uses``, by
  its ``asset_id`` index), newest first, at most ``JOB_LIMIT``;
- components, which leave no such record: the newest ``SCAN_LIMIT`` jobs of the workspace, read
  for a reference to the version (``azureml:name:version``, the ARM id, or ``name:version``);
- deployments: those of the workspace's online and batch endpoints (a workspace has tens, not
  thousands) whose ``model``, ``environment`` or ``component`` names the version; a deployment
  that names ``@latest`` (or the name's ARM id) uses it while it is the latest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from cloudlet.domain.assets import assets as rules
from cloudlet.domain.assets.assets import AssetKind
from cloudlet.domain.errors import CloudletError
from cloudlet.services.assets import assets as asset_service
from cloudlet.store.schema import (
    Asset,
    AssetUse,
    BatchDeployment,
    BatchEndpoint,
    Job,
    OnlineDeployment,
    OnlineEndpoint,
)

JOB_LIMIT = 50  # the newest jobs shown as using a version (by the asset_uses index)
SCAN_LIMIT = 200  # the newest jobs read for a component reference (components leave no record)
DEPLOYMENT_LIMIT = 500  # the deployments read for a reference (a workspace's whole set, in practice)


@dataclass(frozen=True)
class JobUse:
    name: str
    display_name: str | None
    status: str
    role: str  # input | environment | output | component
    field: str  # inputs.x, environment, outputs.y, jobs.step.component


@dataclass(frozen=True)
class DeploymentUse:
    endpoint: str
    name: str
    kind: str  # online | batch
    field: str  # model, environment, component
    value: str = ""  # how the deployment names it (azureml:clf:1, azureml:clf@latest, …)


@dataclass
class UsedBy:
    jobs: list[JobUse] = field(default_factory=list)
    deployments: list[DeploymentUse] = field(default_factory=list)
    how: str = ""  # how the jobs were found, said on the page (the bound included)
    more: bool = False  # the bound was reached: older users may exist


def used_by(session: Session, asset: Asset) -> UsedBy:
    """The jobs and deployments that use ASSET (one version): see the module's docstring."""
    found = _component_jobs(session, asset) if asset.kind == "component" else _recorded_jobs(session, asset)
    found.deployments = _deployments(session, asset)
    return found


def recorded_statement(asset_id: int) -> Select[str, str | None, str, str, str]:
    """The jobs recorded as using ASSET_ID, newest first (one more than shown: is there more?)."""
    return (
        select(Job.name, Job.display_name, Job.status, AssetUse.role, AssetUse.field)
        .join(AssetUse, AssetUse.job_id == Job.id)
        .where(AssetUse.asset_id == asset_id)
        # Uses are recorded at submission: their id order is the jobs', and SQLite reads it from
        # the asset_id index without sorting every use (a version used by 50,000 jobs: 0.7 ms).
        .order_by(AssetUse.id.desc())
        .limit(JOB_LIMIT + 1)
    )


def _recorded_jobs(session: Session, asset: Asset) -> UsedBy:
    found = session.execute(recorded_statement(asset.id))
    rows = [JobUse(name, shown, status, role, where) for name, shown, status, role, where in found]
    how = f"the newest {JOB_LIMIT} jobs recorded as using this version when they were submitted"
    return UsedBy(jobs=rows[:JOB_LIMIT], how=how, more=len(rows) > JOB_LIMIT)


def _component_jobs(session: Session, asset: Asset) -> UsedBy:
    query = (
        select(Job.name, Job.display_name, Job.status, Job.spec)
        .where(Job.workspace_id == asset.workspace_id, Job.parent_job_id.is_(None))
        .order_by(Job.id.desc())
        .limit(SCAN_LIMIT)
    )
    rows = list(session.execute(query))
    jobs = []
    for name, display_name, status, spec in rows:
        where = _component_field(spec or {}, asset)
        if where is not None:
            jobs.append(JobUse(name, display_name, status, "component", where))
    how = f"the newest {SCAN_LIMIT} jobs of the workspace, read for a reference to this version"
    return UsedBy(jobs=jobs[:JOB_LIMIT], how=how, more=len(rows) == SCAN_LIMIT or len(jobs) > JOB_LIMIT)


def _component_field(spec: dict[str, Any], asset: Asset) -> str | None:
    """Where SPEC (a job, or a pipeline with its steps) names ASSET as its component."""
    if names(spec.get("component"), asset):
        return "component"
    for step, value in (spec.get("jobs") or {}).items():
        if isinstance(value, dict) and names(value.get("component"), asset):
            return f"jobs.{step}.component"
    return None


def names(value: Any, asset: Asset, latest: bool = False) -> bool:
    """Whether VALUE (a reference as a job or deployment writes it, or an inline definition that
    kept its name and version) names ASSET's version. ``@latest`` (or the name's ARM id) counts
    only when LATEST says ASSET is its name's latest version now: a job's, which version it meant
    is known only where the use was recorded; a deployment's names the latest still."""
    if isinstance(value, dict):
        return value.get("name") == asset.name and str(value.get("version")) == asset.version
    if not isinstance(value, str):
        return False
    text = value.strip()
    bare = text.removeprefix("azureml:")
    if bare == f"{asset.name}:{asset.version}":
        return True
    try:
        reference = rules.parse_reference(text)
    except CloudletError:
        return False
    return (
        reference is not None
        and reference.kind in (None, asset.kind)
        and reference.name == asset.name
        and (reference.version == asset.version or (latest and reference.version is None))
    )


_FIELDS = ("model", "environment", "component")


def _deployments(session: Session, asset: Asset) -> list[DeploymentUse]:
    asset_kind = cast(AssetKind, asset.kind)  # the column is a plain str
    newest = asset_service.latest_version(session, asset.workspace_id, asset_kind, asset.name)
    latest = newest is not None and newest.id == asset.id
    found: list[DeploymentUse] = []
    kinds = (("online", OnlineEndpoint, OnlineDeployment), ("batch", BatchEndpoint, BatchDeployment))
    for kind, endpoint_table, deployment_table in kinds:
        query = (
            select(endpoint_table.name, deployment_table.name, deployment_table.spec)
            .join(endpoint_table, endpoint_table.id == deployment_table.endpoint_id)
            .where(endpoint_table.workspace_id == asset.workspace_id)
            .order_by(deployment_table.id.desc())
            .limit(DEPLOYMENT_LIMIT)
        )
        for endpoint, name, spec in session.execute(query):
            for key in _FIELDS:
                value = (spec or {}).get(key)
                if names(value, asset, latest):
                    shown = value if isinstance(value, str) else "inline"
                    found.append(DeploymentUse(endpoint, name, kind, key, shown))
    return found
