"""The waiting reason's choice (``domain.jobs.job_wait``): the first thing that holds a queued job."""

from __future__ import annotations

from cloudlet.domain.jobs.job_wait import (
    ClusterFacts,
    InstanceFacts,
    QueuePlace,
    WaitCode,
    cluster_reason,
    instance_reason,
)

FIRST = QueuePlace(position=1, ahead=0, ahead_cores=0, ahead_higher_priority=0)


def _cluster(**changes: object) -> ClusterFacts:
    facts = {
        "max_instances": 2,
        "serving_nodes": 0,
        "starting_nodes": 0,
        "idle_nodes": 0,
        "job_nodes": 1,
        "lock_reason": None,
        "quota_nodes": 10,
        "quota_reason": "",
    }
    return ClusterFacts(**{**facts, **changes})  # type: ignore[arg-type]


def test_a_lock_binds_before_anything_else() -> None:
    reason = cluster_reason(FIRST, _cluster(lock_reason="scaling blocked by lock 'x'", quota_nodes=0))
    assert reason.code is WaitCode.LOCKED and "lock 'x'" in reason.message


def test_quota_that_stops_the_growth_is_named() -> None:
    reason = cluster_reason(FIRST, _cluster(quota_nodes=0, quota_reason="quota fam 4/4 cores"))
    assert reason.code is WaitCode.QUOTA and "fam 4/4" in reason.message


def test_a_full_cluster_at_its_maximum() -> None:
    behind = QueuePlace(position=2, ahead=1, ahead_cores=4, ahead_higher_priority=0, ahead_nodes=1)
    reason = cluster_reason(behind, _cluster(max_instances=1, serving_nodes=1))
    assert reason.code is WaitCode.CLUSTER_AT_MAX
    assert "maximum of 1 node" in reason.message and "1 job ahead of it needs 4 cores" in reason.message


def test_nodes_on_their_way() -> None:
    assert (
        cluster_reason(FIRST, _cluster(serving_nodes=1, starting_nodes=1)).code is WaitCode.WAITING_FOR_NODES
    )
    scaling = cluster_reason(FIRST, _cluster())
    assert scaling.code is WaitCode.WAITING_FOR_NODES and "scaling up: 1 node more wanted" in scaling.message


def test_an_idle_node_for_it_leaves_only_the_queue() -> None:
    place = QueuePlace(position=3, ahead=2, ahead_cores=8, ahead_higher_priority=1, ahead_nodes=2)
    reason = cluster_reason(place, _cluster(max_instances=3, serving_nodes=3, idle_nodes=3))
    assert reason.code is WaitCode.BEHIND_HIGHER_PRIORITY and "1 job of higher priority" in reason.message
    assert cluster_reason(FIRST, _cluster(serving_nodes=1, idle_nodes=1)).code is WaitCode.NEXT


def test_an_instance_stopped_starting_or_full() -> None:
    assert instance_reason(FIRST, InstanceFacts("Stopped", 0, 0, 1)).code is WaitCode.INSTANCE_STOPPED
    assert instance_reason(FIRST, InstanceFacts("Starting", 0, 0, 1)).code is WaitCode.WAITING_FOR_NODES
    full = instance_reason(FIRST, InstanceFacts("Running", 2, 0, 1))
    assert full.code is WaitCode.NO_FREE_VCPU and "0 of 2 are free" in full.message
    assert instance_reason(FIRST, InstanceFacts("Running", 2, 2, 1)).code is WaitCode.NEXT


def test_no_capacity_is_neither_the_clusters_max_nor_nodes_on_their_way() -> None:
    full = cluster_reason(FIRST, _cluster(capacity_reason="location lab capacity 8/8 vCPUs in use"))
    assert full.code is WaitCode.NO_CAPACITY and "location cannot give nodes" in full.message
    assert "8/8 vCPUs" in full.message
    # The cluster's own max binds first: the location's capacity does not matter then.
    at_max = _cluster(max_instances=1, serving_nodes=1, capacity_reason="location lab capacity 8/8")
    assert cluster_reason(FIRST, at_max).code is WaitCode.CLUSTER_AT_MAX
    # Quota that binds is named as quota.
    quota = _cluster(quota_nodes=0, quota_reason="quota fam 4/4 cores", capacity_reason="capacity 8/8")
    assert cluster_reason(FIRST, quota).code is WaitCode.QUOTA
    # Room for the nodes it needs (the autoscaler is short for jobs behind it): scaling up.
    room = _cluster(capacity_reason="capacity 4/8", capacity_nodes=1)
    assert cluster_reason(FIRST, room).code is WaitCode.WAITING_FOR_NODES
    behind = QueuePlace(position=2, ahead=1, ahead_cores=4, ahead_higher_priority=0, ahead_nodes=1)
    assert cluster_reason(behind, room).code is WaitCode.NO_CAPACITY
    # Nodes on their way that cover it: waiting for them, not no capacity.
    coming = _cluster(serving_nodes=1, starting_nodes=1, capacity_reason="capacity 8/8")
    assert cluster_reason(FIRST, coming).code is WaitCode.WAITING_FOR_NODES


def test_launches_that_keep_failing_say_what_the_provider_said() -> None:
    # A retry is a node requested again (counted as starting): the failures still explain the wait.
    failing = _cluster(
        serving_nodes=1, starting_nodes=1, failed_launches=3, failed_over_s=150, launch_error="no room"
    )
    reason = cluster_reason(FIRST, failing)
    assert reason.code is WaitCode.NO_CAPACITY
    assert (
        reason.message == "the provider cannot give nodes: 3 node launches failed in the last 2 min (no room)"
    )
    # An idle node for it: failures elsewhere do not hold it.
    idle = _cluster(serving_nodes=1, idle_nodes=1, failed_launches=3, launch_error="no room")
    assert cluster_reason(FIRST, idle).code is WaitCode.NEXT
