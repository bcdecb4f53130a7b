"""What limits a cluster's scale-up, read once for the two that ask: the autoscaler
(``control.scaling``), which acts on it, and a queued job's wait reason (``services.jobs.job_wait``),
which says it. Both must read the same lock, the same catalogue size and the same quota headroom,
or the list would explain a wait the autoscaler does not have."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from cloudlet.domain.compute.locks import scaling_block
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import VmSize
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.compute import quotas
from cloudlet.store.schema import Compute

UNBOUNDED = 1 << 30  # no quota bound (the size is unknown, or headroom was not asked for)


@dataclass(frozen=True)
class ScalingLimits:
    """``blocked_reason``: a lock above the workspace stops scaling; ``size``: the cluster's VM size
    in the catalogue (None: unknown, it cannot scale); ``quota_nodes``: how many more nodes fit the
    quota, and ``quota_reason`` the quota that binds, in words ("" when none does)."""

    blocked_reason: str | None
    size: VmSize | None
    quota_nodes: int = UNBOUNDED
    quota_reason: str = ""


def scaling_limits(
    session: Session, compute: Compute, tier: Tier, live_nodes: int, need_headroom: bool = True
) -> ScalingLimits:
    """COMPUTE's scaling limits with LIVE_NODES of its nodes holding quota (NEED_HEADROOM False:
    skip the quota read, for a pass that does not grow the cluster)."""
    ref = workspaces.ref_of_id(session, compute.workspace_id)
    block = scaling_block(lock_store.effective(session, ref), ref.arm_id)
    blocked = block.reason if block else None
    catalogue = catalogue_service.current(session)
    size = catalogue.get(compute.size or "")
    if size is None or not need_headroom:
        return ScalingLimits(blocked, size)
    quota_nodes, quota_reason = quotas.headroom_nodes(
        session,
        ref.subscription_id,
        compute.location,
        catalogue,
        compute,
        size.vcpus,
        size.family,
        tier,
        live_nodes,
    )
    return ScalingLimits(blocked, size, quota_nodes, quota_reason)
