"""Quota limits (defaults from the catalogue, overrides from administrators) and who holds cores."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.lifecycle import ProvisioningState, cluster_target_nodes
from cloudlet.domain.quota import (
    TOTAL_DEDICATED,
    TOTAL_LOW_PRIORITY,
    CoreHolder,
    CoreRequest,
    QuotaLimits,
    Tier,
    UsageLine,
    check_request,
    usage_report,
)
from cloudlet.domain.sizes import Catalogue
from cloudlet.store.schema import Compute, QuotaLimit, ResourceGroup, Workspace


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


def set_limit(
    session: Session, subscription_id: str, location: str, name: str, limit: int, catalogue: Catalogue
) -> None:
    known = {TOTAL_DEDICATED, TOTAL_LOW_PRIORITY, *catalogue.families(), *catalogue.default_quota}
    if name not in known:
        raise CloudletError(
            "UnknownQuota",
            f"'{name}' is not a quota here; use {TOTAL_DEDICATED}, "
            f"{TOTAL_LOW_PRIORITY} or a VM family such as standardDSv2Family",
            "name",
        )
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise CloudletError("ValidationError", "limit must be a whole number ≥ 0", "limit")
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
    session.flush()


def cluster_nodes_held(compute: Compute) -> int:
    """A cluster holds the nodes it has and the ones it is about to make (target)."""
    spec = compute.spec
    target = cluster_target_nodes(spec.get("min_instances", 0), spec.get("max_instances", 0), 0)
    return max(compute.current_node_count, target)


def holders(session: Session, subscription_id: str, location: str, catalogue: Catalogue) -> list[CoreHolder]:
    rows = session.execute(
        select(Compute, Workspace.name)
        .join(Workspace, Workspace.id == Compute.workspace_id)
        .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
        .where(
            ResourceGroup.subscription_id == subscription_id,
            Compute.location == location,
            Compute.type.in_(("amlcompute", "computeinstance")),
            Compute.provisioning_state != ProvisioningState.FAILED.value,
        )
    ).all()
    out = []
    for compute, workspace in rows:
        size = catalogue.get(compute.size or "")
        if size is None:
            continue
        if compute.type == "computeinstance":
            nodes, state, tier = 1, compute.state or "", Tier.DEDICATED
        else:
            nodes = cluster_nodes_held(compute)
            state, tier = f"{nodes} nodes", Tier(compute.spec.get("tier", "dedicated"))
        out.append(CoreHolder(compute.name, workspace, size.family, tier, nodes * size.vcpus, state))
    return out


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
