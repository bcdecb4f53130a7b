"""``services.compute.scaling_limits``: the one reading of a cluster's scale-up limits (its lock,
its catalogue size, its quota headroom) that the autoscaler acts on and a queued job's wait reason
says, so the two cannot disagree."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.control.scaling import ClusterScaler
from cloudlet.domain.compute.compute_spec import cluster_scaling
from cloudlet.domain.compute.locks import LockLevel
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs.job_wait import ClusterFacts
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.compute import quotas
from cloudlet.services.compute.scaling_limits import UNBOUNDED, scaling_limits
from cloudlet.services.jobs import queue_snapshots
from cloudlet.store.schema import Compute, Job
from tests.unit.control_fakes import SIZE, add_cluster, new_store


def _cluster_facts(session: Session, compute: Compute) -> ClusterFacts:
    """What a waiting job's reason reads of its cluster (``services/jobs/queue_snapshots``)."""
    facts = queue_snapshots.build(session, compute).cluster
    assert facts is not None
    return facts


def test_both_readers_get_the_same_lock_size_and_quota(tmp_path: Path) -> None:
    sessions, installation_id = new_store(tmp_path / "home")
    add_cluster(sessions, "gpu", queued_jobs=1)
    scaler = ClusterScaler(installation_id, lambda: "http://127.0.0.1:1")
    with sessions() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "gpu")).one()
        job = session.scalars(select(Job)).first()
        assert job is not None
        size = catalogue_service.current(session).get(SIZE)
        assert size is not None
        ref = workspaces.ref_of_id(session, compute.workspace_id)

        roomy = scaling_limits(session, compute, Tier.DEDICATED, live_nodes=0)
        assert roomy.size == size and roomy.blocked_reason is None and "0/1000 cores" in roomy.quota_reason
        assert roomy.quota_nodes == 1000 // size.vcpus  # the family quota new_store set, in nodes

        # A tight family quota: the same number and sentence as quotas.headroom_nodes with the
        # arguments both callers passed it before, and as each caller now reads.
        catalogue = catalogue_service.current(session)
        quotas.set_limit(
            session, ref.subscription_id, "local", size.family, size.vcpus * 2, catalogue, "test"
        )
        session.commit()
        tight = scaling_limits(session, compute, Tier.DEDICATED, live_nodes=1)
        direct = quotas.headroom_nodes(
            session,
            ref.subscription_id,
            "local",
            catalogue,
            compute,
            size.vcpus,
            size.family,
            Tier.DEDICATED,
            1,
        )
        assert (tight.quota_nodes, tight.quota_reason) == direct
        assert tight.quota_nodes == 1 and f"quota {size.family}" in tight.quota_reason
        scaled = scaler._limits(session, compute, cluster_scaling(compute.spec), [], 0.0)
        facts = _cluster_facts(session, compute)
        zero_live = scaling_limits(session, compute, Tier.DEDICATED, live_nodes=0)
        assert (scaled.quota_nodes, scaled.quota_reason) == (zero_live.quota_nodes, zero_live.quota_reason)
        assert (facts.quota_nodes, facts.quota_reason) == (zero_live.quota_nodes, zero_live.quota_reason)

        # A lock on the resource group blocks scaling; a pass that does not grow skips the quota.
        lock_store.put(
            session, ref.rg_scope, "freeze", lock_store.LockUpdate(level=LockLevel.CAN_NOT_DELETE), "t"
        )
        locked = scaling_limits(session, compute, Tier.DEDICATED, live_nodes=0, need_headroom=False)
        assert locked.blocked_reason is not None and "lock 'freeze'" in locked.blocked_reason
        assert locked.quota_nodes == UNBOUNDED
        assert _cluster_facts(session, compute).lock_reason == locked.blocked_reason
        assert scaler._limits(session, compute, cluster_scaling(compute.spec), [], 0.0).blocked_reason == (
            locked.blocked_reason
        )

        # An unknown size: nothing to scale with, and no quota read.
        compute.size = "Standard_Nope"
        unknown = scaling_limits(session, compute, Tier.DEDICATED, live_nodes=0)
        assert unknown.size is None and unknown.quota_nodes == UNBOUNDED
