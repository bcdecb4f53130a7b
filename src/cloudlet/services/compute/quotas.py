"""Quota limits (defaults from the catalogue, overrides from administrators) and who holds cores."""

from __future__ import annotations

from sqlalchemy import and_, func, select, text
from sqlalchemy.orm import Session

from cloudlet.domain.bounds import MAX_QUOTA_CORES
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.compute.compute_types import WITH_SIZES, ComputeType
from cloudlet.domain.compute.lifecycle import InstanceState, ProvisioningState, cluster_target_nodes
from cloudlet.domain.compute.nodes import HOLDING
from cloudlet.domain.compute.quota import (
    TOTAL_DEDICATED,
    TOTAL_LOW_PRIORITY,
    CoreHolder,
    CoreRequest,
    QuotaLimits,
    Tier,
    UsageLine,
    check_request,
    node_headroom,
    usage_report,
)
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.domain.endpoints import online_autoscale
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.resources import COMPUTES, JOBS
from cloudlet.services.access import audit
from cloudlet.services.core import effects
from cloudlet.store.schema import (
    Compute,
    Job,
    Node,
    OnlineDeployment,
    OnlineEndpoint,
    QuotaLimit,
    ResourceGroup,
    Workspace,
)


def limits(session: Session, subscription_id: str, location: str, catalogue: Catalogue) -> QuotaLimits:
    overrides = dict(
        session.execute(
            select(QuotaLimit.name, QuotaLimit.limit).where(
                QuotaLimit.subscription_id == subscription_id, QuotaLimit.location == location
            )
        ).all()
    )
    families = {
        **catalogue.default_quota,
        **{k: v for k, v in overrides.items() if not k.startswith("total")},
    }
    return QuotaLimits(
        families=families,
        total_dedicated=overrides.get(TOTAL_DEDICATED, catalogue.total_dedicated_cores),
        total_low_priority=overrides.get(TOTAL_LOW_PRIORITY, catalogue.total_low_priority_cores),
    )


def quota_target(subscription_id: str, location: str, name: str) -> str:
    return (
        f"/subscriptions/{subscription_id}/providers/Microsoft.MachineLearningServices"
        f"/locations/{location}/quotas/{name}"
    )


def _limit_of(current: QuotaLimits, name: str) -> int | None:
    if name == TOTAL_DEDICATED:
        return current.total_dedicated
    if name == TOTAL_LOW_PRIORITY:
        return current.total_low_priority
    return current.families.get(name)


def set_quota(
    session: Session,
    subscription_id: str,
    location: str,
    name: str,
    limit: int,
    catalogue: Catalogue,
    actor: str,
) -> None:
    """The administrator's quota change, committed (``set_limit`` within a larger unit of work)."""
    set_limit(session, subscription_id, location, name, limit, catalogue, actor)
    session.commit()


def set_limit(
    session: Session,
    subscription_id: str,
    location: str,
    name: str,
    limit: int,
    catalogue: Catalogue,
    actor: str,
) -> None:
    known = {TOTAL_DEDICATED, TOTAL_LOW_PRIORITY, *catalogue.families(), *catalogue.default_quota}
    if name not in known:
        raise CloudletError(
            "UnknownQuota",
            f"'{name}' is not a quota here; use {TOTAL_DEDICATED}, "
            f"{TOTAL_LOW_PRIORITY} or a VM family such as standardDSv2Family",
            "name",
        )
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_QUOTA_CORES:
        raise CloudletError(
            "ValidationError", f"limit must be a whole number from 0 to {MAX_QUOTA_CORES}", "limit"
        )
    old = _limit_of(limits(session, subscription_id, location, catalogue), name)
    row = session.scalar(
        select(QuotaLimit).where(
            QuotaLimit.subscription_id == subscription_id,
            QuotaLimit.location == location,
            QuotaLimit.name == name,
        )
    )
    if row is None:
        session.add(QuotaLimit(subscription_id=subscription_id, location=location, name=name, limit=limit))
    else:
        row.limit = limit
    if old != limit:
        details = {"name": name, "location": location, "old_limit": old, "new_limit": limit}
        audit.record(session, actor, "quota.write", quota_target(subscription_id, location, name), details)
    effects.demand_changed(session)
    session.flush()


def cluster_nodes_held(compute: Compute, machines: int | None = None) -> int:
    """A cluster holds the machines it has (made, starting or leaving) and at least min_instances."""
    spec = cluster_scaling(compute.spec)
    floor = cluster_target_nodes(spec.min_instances, spec.max_instances, 0)
    return max(compute.current_node_count if machines is None else machines, floor)


def _machines_by_compute(session: Session, compute_ids: list[int]) -> dict[int, int]:
    rows = session.execute(
        select(Node.owner_id, func.count())
        .where(
            Node.owner_type == COMPUTES,
            Node.owner_id.in_(compute_ids),
            Node.state.in_([s.value for s in HOLDING]),
        )
        .group_by(Node.owner_id)
    ).all()
    return {cid: count for cid, count in rows if cid is not None}


def holders(session: Session, subscription_id: str, location: str, catalogue: Catalogue) -> list[CoreHolder]:
    rows = session.execute(
        select(Compute, Workspace.name)
        .join(Workspace, Workspace.id == Compute.workspace_id)
        .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
        .where(
            ResourceGroup.subscription_id == subscription_id,
            Compute.location == location,
            Compute.type.in_(WITH_SIZES),
            Compute.provisioning_state != ProvisioningState.FAILED.value,
        )
    ).all()
    machines = _machines_by_compute(session, [c.id for c, _ in rows if c.type == ComputeType.AMLCOMPUTE])
    out = []
    for compute, workspace in rows:
        size = catalogue.get(compute.size or "")
        if size is None:
            continue
        if compute.type == ComputeType.COMPUTE_INSTANCE:
            nodes, state, tier = 1, compute.state or "", Tier.DEDICATED
        else:
            nodes = cluster_nodes_held(compute, machines.get(compute.id, 0))
            state, tier = f"{nodes} nodes", Tier(compute.spec.get("tier", Tier.DEDICATED))
        owner = compute.owner or compute.created_by
        cores = nodes * size.vcpus
        out.append(CoreHolder(compute.name, workspace, size.family, tier, cores, state, compute.type, owner))
    return (
        out
        + _serverless_holders(session, subscription_id, location)
        + _online_holders(session, subscription_id, location, catalogue)
    )


def _online_holders(
    session: Session, subscription_id: str, location: str, catalogue: Catalogue
) -> list[CoreHolder]:
    """Online deployments hold instance_count × their size's cores (local ones hold none); an
    autoscaled one holds max_instances × them."""
    rows = session.execute(
        select(OnlineDeployment, OnlineEndpoint.name, Workspace.name)
        .join(OnlineEndpoint, OnlineEndpoint.id == OnlineDeployment.endpoint_id)
        .join(Workspace, Workspace.id == OnlineEndpoint.workspace_id)
        .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
        .where(
            ResourceGroup.subscription_id == subscription_id,
            Workspace.location == location,
            OnlineDeployment.local.is_(False),
        )
    ).all()
    out = []
    for row, endpoint, ws in rows:
        size = catalogue.get(str(row.spec.get("instance_type") or ""))
        if size is not None:
            count = online_autoscale.reserved(row.spec)
            name = f"online deployment {endpoint}/{row.name}"
            out.append(
                CoreHolder(
                    name,
                    ws,
                    size.family,
                    Tier.DEDICATED,
                    count * size.vcpus,
                    row.provisioning_state,
                    "online deployment",
                )
            )
    return out


def _serverless_holders(session: Session, subscription_id: str, location: str) -> list[CoreHolder]:
    """Nodes made for serverless jobs hold cores like cluster nodes do (local jobs hold none)."""
    rows = session.execute(
        select(Job.name, Node.family, Node.tier, func.sum(Node.vcpus), Workspace.name, Job.created_by)
        .join(Job, and_(Node.owner_type == JOBS, Job.id == Node.owner_id))
        .join(Workspace, Workspace.id == Node.workspace_id)
        .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
        .where(
            ResourceGroup.subscription_id == subscription_id,
            Node.location == location,
            Job.compute_name != "local",  # jobs.LOCAL_COMPUTE: local jobs hold no cores
            Node.state.in_([s.value for s in HOLDING]),
        )
        .group_by(Job.id, Job.name, Node.family, Node.tier, Workspace.name, Job.created_by)
    ).all()
    return [
        CoreHolder(
            f"serverless job {name}", ws, family, Tier(tier), int(cores), "running", "serverless job", by
        )
        for name, family, tier, cores, ws, by in rows
    ]


def check(
    session: Session, subscription_id: str, location: str, catalogue: Catalogue, request: CoreRequest
) -> None:
    if session.bind is not None and session.bind.dialect.name == "postgresql":
        # Serialise quota decisions per pool across replicas (SQLite's BEGIN IMMEDIATE already does).
        session.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
            {"key": f"quota:{subscription_id}:{location}"},
        )
    check_request(
        limits(session, subscription_id, location, catalogue),
        holders(session, subscription_id, location, catalogue),
        request,
    )


def usage(session: Session, subscription_id: str, location: str, catalogue: Catalogue) -> list[UsageLine]:
    return usage_report(
        limits(session, subscription_id, location, catalogue),
        holders(session, subscription_id, location, catalogue),
    )


def quota_page(
    session: Session, subscription_id: str, locations: list[str], catalogue: Catalogue
) -> list[dict[str, object]]:
    """The studio's Quota page: per location, the dedicated and low-priority totals and each VM
    family's limit and used cores (bars), with who holds them: the holder's name, ``kind`` (compute
    type, online deployment, serverless job), workspace, ``owner`` (an instance's owner, else its
    creator), cores and state, biggest first. Families with neither a limit nor a holder are left
    out (the catalogue lists many)."""
    page: list[dict[str, object]] = []
    for location in locations:
        for line in usage(session, subscription_id, location, catalogue):
            if line.kind == "family" and not line.limit and not line.holders:
                continue
            holders = sorted(line.holders, key=lambda h: (-h.cores, h.compute))
            page.append(
                {
                    "location": location,
                    "name": line.name,
                    "kind": line.kind,
                    "limit": line.limit,
                    "used": line.current_value,
                    "holders": [
                        {
                            "name": h.compute,
                            "kind": h.kind,
                            "workspace": h.workspace,
                            "owner": h.owner,
                            "cores": h.cores,
                            "tier": h.tier.value,
                            "state": h.state,
                        }
                        for h in holders
                    ],
                }
            )
    return page


def headroom_nodes(
    session: Session,
    subscription_id: str,
    location: str,
    catalogue: Catalogue,
    compute: Compute,
    size_vcpus: int,
    family: str,
    tier: Tier,
    live_nodes: int,
) -> tuple[int, str]:
    """How many more nodes of this cluster fit its quota now, and the quota that binds, in words."""
    return headroom_for_nodes(
        session,
        subscription_id,
        location,
        catalogue,
        size_vcpus,
        family,
        tier,
        holder=compute.name,
        live_nodes=live_nodes,
    )


def headroom_for_nodes(
    session: Session,
    subscription_id: str,
    location: str,
    catalogue: Catalogue,
    size_vcpus: int,
    family: str,
    tier: Tier,
    holder: str | None = None,
    live_nodes: int = 0,
) -> tuple[int, str]:
    room = node_headroom(
        limits(session, subscription_id, location, catalogue),
        holders(session, subscription_id, location, catalogue),
        holder,
        family,
        tier,
        size_vcpus,
        live_nodes,
    )
    if not room.pool:
        return room.nodes, ""
    held = ", ".join(
        f"{h.compute}{' (stopped)' if h.state == InstanceState.STOPPED else ''} {h.cores}"
        for h in room.holders
    )
    reason = (
        f"quota {room.pool} {room.used}/{room.limit} cores"
        + (f": {holder} {room.mine}" if room.mine else "")
        + (f", {held}" if held else "")
        + f"; raise it with `cloudlet quota set --name {room.pool} --limit N`"
    )
    return room.nodes, reason
