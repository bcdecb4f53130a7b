"""Acceptance: compute clusters running jobs on real node agents (C7–C12, C6, quota).

One server per module; each test uses its own cluster and deletes it at the end so that the next
one starts from an empty location (quota and capacity are shared by every cluster). Node agents
are real processes started by the local provider; module teardown kills the server and then any
process that still carries its installation id.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import (
    Recorder,
    agent_nodes,
    compute,
    create_compute,
    delete_compute,
    job,
    log_text,
    nodes,
    quota_url,
    rg_lock_url,
    served,
    submit,
    wait_job,
    wait_passes,
    wait_until,
)

DS3 = "Standard_DS3_v2"  # 4 vCPUs, family standardDSv2Family


def cluster(max_instances: int = 2, idle: int = 3, **extra: Any) -> dict[str, Any]:
    return {
        "type": "amlcompute",
        "size": DS3,
        "min_instances": 0,
        "max_instances": max_instances,
        "idle_time_before_scale_down": idle,
        **extra,
    }


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "clusters")


def drop_cluster(api: httpx.Client, srv: RunningServer, name: str, installation: str) -> None:
    """Delete the cluster and wait until none of its node agents is left."""
    before = {n["nodeId"] for n in nodes(api, srv, name)}
    delete_compute(api, srv, name)
    wait_until(lambda: not (before & agent_nodes(installation)), 20, f"{name}'s agents to exit")


# -- C7–C10: scale from zero, queue, scale back to zero after the idle time --------------------
def test_cluster_scales_from_zero_runs_jobs_and_returns_to_zero(
    api: httpx.Client, srv: RunningServer, installation: str
) -> None:
    name, idle = "autoscale", 5
    created = create_compute(api, srv, name, cluster(idle=idle))
    assert (created["current_node_count"], created["allocation_state"]) == (0, "Steady")
    jobs = ["scale-a", "scale-b", "scale-c"]
    with Recorder(srv, name) as rec:
        for job_name in jobs:
            submitted = submit(
                api, srv, job_name, {"command": "echo hi; sleep 1", "compute": f"azureml:{name}"}
            )
            assert submitted["status"] == "Queued"
            rec.job_names.append(job_name)
        done = [wait_job(api, srv, j, timeout=60) for j in jobs]
        last_end = time.time()
        wait_until(
            lambda: compute(api, srv, name)["current_node_count"] == 0 and not nodes(api, srv, name),
            idle + 15,
            "the cluster to scale back to 0 nodes",
        )
        gone_at = time.time()
    assert not rec.errors, rec.errors
    assert [j["status"] for j in done] == ["Completed"] * 3, done
    for job_name in jobs:
        assert log_text(api, srv, job_name) == "hi\n"

    snaps = rec.snapshots
    # 0 → 2: Resizing while nodes come up, then Steady at 2.
    resizing = rec.first(lambda s: s.compute["allocation_state"] == "Resizing")
    steady2 = rec.first(
        lambda s: s.compute["allocation_state"] == "Steady" and s.compute["current_node_count"] == 2
    )
    assert resizing is not None and steady2 is not None and resizing.at < steady2.at
    assert max(s.compute["current_node_count"] for s in snaps) == 2
    assert max(len(s.nodes) for s in snaps) == 2, "max_instances 2 must cap the node count"
    # Two ran while the third waited (Queued), and the third started only after one ended.
    two_running = rec.first(lambda s: sum(j["status"] == "Running" for j in s.jobs.values()) == 2)
    assert two_running is not None
    waiting = [j for j in two_running.jobs.values() if j["status"] == "Queued"]
    assert len(waiting) == 1, two_running.jobs
    third = next(j for j in done if j["name"] == waiting[0]["name"])
    first_two = [j for j in done if j["name"] != third["name"]]
    assert third["start_time"] >= min(j["end_time"] for j in first_two)
    assert all(len(j["attempts"]) == 1 for j in done)

    # Node states on the way: preparing → running/idle → leaving/gone, never backwards.
    order = {"preparing": 0, "idle": 1, "running": 1, "leaving": 2, "gone": 3}
    states = rec.node_states()
    assert len(states) == 2, states
    assert any(seq[0] == "preparing" for seq in states.values()), states
    for node_id, seq in states.items():
        assert "running" in seq and "idle" in seq and seq[-1] == "gone", (node_id, seq)
        ranks = [order[s] for s in seq]
        assert ranks == sorted(ranks), (node_id, seq)

    # The idle countdown is explained, and nodes leave after the idle time, not before.
    messages = [s.compute["status_message"] or "" for s in snaps]
    assert any(re.search(rf"idle \d+ s of {idle} s", m) for m in messages), messages
    for node_id in states:
        idle_since = max(
            (n["idle_since"] for s in snaps for n in s.nodes if n["nodeId"] == node_id and n["idle_since"]),
            default=None,
        )
        assert idle_since is not None, node_id
        left = next(
            (s for s in snaps if s.at > idle_since and all(n["nodeId"] != node_id for n in s.nodes)), None
        )
        assert left is not None, node_id
        assert left.at >= idle_since + idle - 0.2, f"{node_id} left {left.at - idle_since:.1f} s after idle"
        assert left.at <= idle_since + idle + 6, f"{node_id} left {left.at - idle_since:.1f} s after idle"
    still_there = rec.last_time(lambda s: len(s.nodes) > 0)
    assert still_there is not None and still_there >= last_end + 3 - 1.5, (
        "nodes must outlive the last job by about the idle time"
    )
    assert gone_at - last_end < idle + 15
    final = compute(api, srv, name)
    assert (final["current_node_count"], final["allocation_state"]) == (0, "Steady")
    assert not (set(states) & agent_nodes(installation)), "scaled-down nodes left agent processes"
    drop_cluster(api, srv, name, installation)


# -- quota (C11) ------------------------------------------------------------------------------
def test_quota_keeps_job_queued_until_raised(
    api: httpx.Client, srv: RunningServer, installation: str
) -> None:
    name, family = "quota-bound", "standardDSv2Family"
    quotas = api.get(f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas").json()["value"]
    original = next(q["limit"] for q in quotas if q["name"] == family)
    create_compute(api, srv, name, cluster(max_instances=2, idle=2))
    try:
        response = api.put(quota_url(srv, family), json={"limit": 4})  # one DS3_v2 node's worth
        assert response.status_code == 200, response.text
        submit(
            api,
            srv,
            "quota-pair",
            {"command": "echo pair", "compute": f"azureml:{name}", "resources": {"instance_count": 2}},
        )
        queued = wait_until(
            lambda: (
                (j := job(api, srv, "quota-pair"))["status"] == "Queued"
                and family in (j["status_message"] or "")
                and j
            ),
            20,
            "the job to say the quota holds it",
        )
        assert "quota" in queued["status_message"], queued["status_message"]
        # It stays queued: the cluster cannot get its second node.
        wait_passes(api, "cluster-reconciler")
        held = job(api, srv, "quota-pair")
        assert held["status"] == "Queued" and held["attempts"] == [], held
        assert len(nodes(api, srv, name)) <= 1
        response = api.put(quota_url(srv, family), json={"limit": 100})
        assert response.status_code == 200, response.text
        done = wait_job(api, srv, "quota-pair", timeout=40)
        assert done["status"] == "Completed", done
        assert len(done["attempts"]) == 1 and len(done["attempts"][0]["nodes"]) == 2, done["attempts"]
    finally:
        api.put(quota_url(srv, family), json={"limit": original})
        drop_cluster(api, srv, name, installation)


# -- a resource-group lock freezes scaling (C6) -----------------------------------------------
def test_resource_group_lock_blocks_scaling_until_removed(
    api: httpx.Client, srv: RunningServer, installation: str
) -> None:
    name = "lock-bound"
    create_compute(api, srv, name, cluster(max_instances=1, idle=2))
    try:
        response = api.put(rg_lock_url(srv, "keep"), json={"level": "CanNotDelete"})
        assert response.status_code == 201, response.text
        submit(api, srv, "lock-job", {"command": "echo unlocked", "compute": f"azureml:{name}"})
        queued = wait_until(
            lambda: (
                (j := job(api, srv, "lock-job"))["status"] == "Queued"
                and "keep" in (j["status_message"] or "")
                and j
            ),
            20,
            "the job to name the lock",
        )
        assert "lock" in queued["status_message"], queued["status_message"]
        shown = compute(api, srv, name)
        assert shown["scaling_blocked"] is not None and shown["scaling_blocked"]["lock"] == "keep", shown
        assert "keep" in shown["status_message"], shown["status_message"]
        wait_passes(api, "cluster-reconciler")
        assert job(api, srv, "lock-job")["status"] == "Queued"
        assert nodes(api, srv, name) == [], "a locked resource group must not get new nodes"
    finally:
        assert api.delete(rg_lock_url(srv, "keep")).status_code in (200, 204)
    done = wait_job(api, srv, "lock-job", timeout=40)
    assert done["status"] == "Completed", done
    assert log_text(api, srv, "lock-job") == "unlocked\n"
    assert compute(api, srv, name)["scaling_blocked"] is None
    drop_cluster(api, srv, name, installation)


# -- low priority: eviction, requeue, resume from checkpoint (C12) ----------------------------
CHECKPOINTING = (
    'echo "attempt $CLOUDLET_ATTEMPT"; '
    'last=$(cat "$CLOUDLET_CHECKPOINT_DIR/step" 2>/dev/null || echo 0); '
    'echo "resumed from $last"; '
    "i=$last; "
    "while [ $i -lt 12 ]; do "
    'i=$((i+1)); echo $i > "$CLOUDLET_CHECKPOINT_DIR/step.tmp"; '
    'mv "$CLOUDLET_CHECKPOINT_DIR/step.tmp" "$CLOUDLET_CHECKPOINT_DIR/step"; '
    'echo "step $i"; sleep 0.5; done; echo finished'
)


def test_evicted_low_priority_job_requeues_and_resumes_from_checkpoint(
    api: httpx.Client, srv: RunningServer, installation: str
) -> None:
    name = "lowpri"
    create_compute(api, srv, name, cluster(max_instances=1, idle=2, tier="low_priority"))
    submit(api, srv, "ckpt", {"command": CHECKPOINTING, "compute": f"azureml:{name}"})
    wait_until(lambda: "step 3\n" in log_text(api, srv, "ckpt"), 40, "the job to checkpoint a few steps")
    running = job(api, srv, "ckpt")
    assert running["status"] == "Running" and running["attempt"] == 1
    [node_id] = running["attempts"][0]["nodes"]

    response = api.post(f"{srv.ws_path}/computes/{name}/evict", json={"node_id": node_id})
    assert response.status_code == 200, response.text
    evicted = response.json()
    assert evicted["nodeState"] == "preempted" and evicted["error"]["code"] == "Preempted", evicted
    again = api.post(f"{srv.ws_path}/computes/{name}/evict", json={"node_id": node_id})
    assert again.status_code == 409 and again.json()["error"]["code"] == "NodeNotLive", again.text
    assert again.json()["error"]["target"] == "node_id", again.text

    requeued = job(api, srv, "ckpt")
    assert requeued["status"] == "Queued", requeued
    assert "requeued as attempt 2" in (requeued["status_message"] or ""), requeued["status_message"]
    assert requeued["attempts"][0]["reasons"] == ["preempted"], requeued["attempts"]
    wait_until(lambda: not agent_nodes(installation) & {node_id}, 15, "the evicted node's agent to exit")

    done = wait_job(api, srv, "ckpt", timeout=60)
    assert done["status"] == "Completed", done
    assert done["attempt"] == 2 and [a["attempt"] for a in done["attempts"]] == [1, 2], done["attempts"]
    assert done["attempts"][1]["nodes"] != [node_id], "attempt 2 must run on a new node"
    first, second = log_text(api, srv, "ckpt", attempt=1), log_text(api, srv, "ckpt", attempt=2)
    assert first.startswith("attempt 1\nresumed from 0\n") and "finished" not in first, first
    match = re.search(r"attempt 2\nresumed from (\d+)\n", second)
    assert match is not None, second
    resumed = int(match.group(1))
    assert resumed >= 3, second
    assert f"step {resumed + 1}\n" in second and "step 1\n" not in second and second.endswith("finished\n")
    drop_cluster(api, srv, name, installation)


def test_dedicated_demand_preempts_low_priority_node_when_capacity_runs_out(
    api: httpx.Client, srv: RunningServer, installation: str
) -> None:
    location = "/api/v1/locations/local"
    original = next(
        loc["capacity"] for loc in api.get("/api/v1/locations").json()["value"] if loc["name"] == "local"
    )
    try:
        response = api.put(location, json={"capacity": {"vcpus": 8, "overcommit": 1}})
        assert response.status_code == 200, response.text
        create_compute(api, srv, "lp-busy", cluster(max_instances=2, idle=30, tier="low_priority"))
        create_compute(api, srv, "dedicated", cluster(max_instances=1, idle=2))
        for i in range(2):
            submit(api, srv, f"lp-sleep-{i}", {"command": "sleep 30", "compute": "azureml:lp-busy"})
        for i in range(2):
            wait_job(api, srv, f"lp-sleep-{i}", ("Running",), timeout=40)
        assert len(nodes(api, srv, "lp-busy")) == 2
        submit(api, srv, "urgent", {"command": "echo dedicated", "compute": "azureml:dedicated"})

        def preempted() -> list[dict[str, Any]]:
            return [
                j
                for j in (job(api, srv, f"lp-sleep-{i}") for i in range(2))
                if j["attempts"] and "preempted" in j["attempts"][0]["reasons"]
            ]

        victims = wait_until(preempted, 30, "a low-priority job to be preempted")
        assert len(victims) == 1, victims
        victim = victims[0]
        assert victim["status"] == "Queued" and "requeued" in (victim["status_message"] or ""), victim
        done = wait_job(api, srv, "urgent", timeout=40)
        assert done["status"] == "Completed" and log_text(api, srv, "urgent") == "dedicated\n", done
        survivor = job(api, srv, next(f"lp-sleep-{i}" for i in range(2) if f"lp-sleep-{i}" != victim["name"]))
        assert survivor["status"] == "Running" and len(survivor["attempts"]) == 1, (survivor, victim, done)
        [lost_node] = victim["attempts"][0]["nodes"]
        # The node is recorded preempted (and its job requeued) before its processes are killed, and
        # the urgent job can now complete within that window: give the kill a moment.
        wait_until(
            lambda: lost_node not in agent_nodes(installation), 10, "the preempted node's agent to be gone"
        )
    finally:
        for i in range(2):
            api.post(f"{srv.ws_path}/jobs/lp-sleep-{i}/cancel")
        api.put(location, json={"capacity": original})
        drop_cluster(api, srv, "lp-busy", installation)
        drop_cluster(api, srv, "dedicated", installation)
