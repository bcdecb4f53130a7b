"""What-if pieces: trace parsing, quota headroom, cost arithmetic, and the decide() rewrite."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cloudlet.domain.compute import autoscale
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.compute.quota import CoreHolder, CoreRequest, QuotaLimits, Tier, check_request
from cloudlet.domain.compute.sizes import load_catalogue
from cloudlet.domain.errors import CloudletError
from cloudlet.sim.quota import headroom_nodes
from cloudlet.sim.trace import TraceError, load_trace
from cloudlet.sim.whatif import Setting, percentile, replay

CATALOGUE = load_catalogue()
DS3 = CATALOGUE.get("Standard_DS3_v2")
T4 = CATALOGUE.get("Standard_NC4as_T4_v3")
assert DS3 is not None and T4 is not None


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_trace_columns_dates_gpus_and_skipped_rows(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "timestamp,duration,num_gpus\n"
        "2017-10-09 07:01:55,60,1\n"
        "2017-10-09 07:00:55,30,8\n"
        "2017-10-09 07:02:55,,1\n"
        "not a date,10,1\n"
        "2017-10-09 07:03:55,-5,1\n",
    )
    trace = load_trace(path)
    assert [(j.submit_s, j.duration_s, j.gpus) for j in trace.jobs] == [(0, 30, 8), (60, 60, 1)]
    assert sum(trace.skipped.values()) == 3
    assert trace.nodes_per_job(1) == [8, 1]
    assert trace.nodes_per_job(4) == [2, 1]
    with pytest.raises(TraceError):
        trace.nodes_per_job(0)


def test_trace_errors_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"--trace .*cannot read"):
        load_trace(tmp_path / "missing.csv")
    with pytest.raises(TraceError, match="no duration column"):
        load_trace(write(tmp_path, "submit_time,length\n0,5\n"))
    with pytest.raises(TraceError, match="no usable rows"):
        load_trace(write(tmp_path, "submit_time,duration\nx,y\n"))


def test_headroom_agrees_with_check_request() -> None:
    limits = QuotaLimits({DS3.family: 40, "other": 100}, total_dedicated=60, total_low_priority=20)
    rng = random.Random(3)
    for _ in range(200):
        tier = rng.choice(list(Tier))
        holders = [
            CoreHolder(
                f"c{i}",
                "ws",
                rng.choice([DS3.family, "other"]),
                rng.choice(list(Tier)),
                4 * rng.randint(0, 4),
                "",
            )
            for i in range(3)
        ]
        live = rng.randint(0, 3)
        room, _ = headroom_nodes(limits, holders, "me", DS3.family, tier, 4, live)

        def fits(nodes: int, tier: Tier = tier, holders: list[CoreHolder] = holders) -> bool:
            try:
                check_request(limits, holders, CoreRequest("me", DS3.family, tier, 4, nodes, "scale-up"))
            except CloudletError:
                return False
            return True

        if fits(live):
            assert fits(live + room) and not fits(live + room + 1)
        else:
            assert room == 0


def _reference_decide(
    cluster: autoscale.ClusterView,
    nodes: list[autoscale.NodeView],
    demand: autoscale.Demand,
    limits: autoscale.Limits,
    now: float,
) -> autoscale.Decision:
    """decide() as it was before it counted states in C (the behaviour it must keep)."""
    from cloudlet.domain.compute.nodes import FAILED, SERVING

    target = autoscale.cluster_target(cluster, demand)
    live = [n for n in nodes if n.state in SERVING]
    broken = tuple(n.id for n in nodes if n.state in FAILED)
    if limits.blocked_reason:
        return autoscale.Decision(target, terminate=broken, reasons=(limits.blocked_reason,))
    if len(live) < target:
        return autoscale._scale_up(target, len(live), limits, broken)
    if len(live) > target:
        return autoscale._scale_down(cluster, target, live, now, broken)
    starting = len([n for n in live if n.state not in (NodeState.IDLE, NodeState.BUSY)])
    words = f"{len(live)} nodes, {starting} starting" if starting else f"steady at {len(live)} nodes"
    return autoscale.Decision(target, terminate=broken, reasons=(words,))


def test_decide_keeps_its_decisions() -> None:
    rng = random.Random(7)
    states = list(NodeState)
    for _ in range(3000):
        nodes = []
        for i in range(rng.randint(0, 12)):
            state = rng.choice(states)
            idle = rng.uniform(0, 100) if state is NodeState.IDLE and rng.random() < 0.9 else None
            nodes.append(autoscale.NodeView(f"n{i}", state, idle))
        lo = rng.randint(0, 4)
        cluster = autoscale.ClusterView("c", lo, lo + rng.randint(0, 8), rng.choice([0.0, 30.0, 120.0]))
        demand = autoscale.Demand(
            rng.randint(0, 6), tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 3)))
        )
        limits = autoscale.Limits(
            rng.randint(0, 5), "q", rng.randint(0, 5), "cap", rng.choice([None, "locked"])
        )
        now = rng.uniform(0, 200)
        args = (cluster, nodes, demand, limits, now)
        assert autoscale.decide(*args) == _reference_decide(*args)


def test_cost_is_node_hours_times_the_tier_price(tmp_path: Path) -> None:
    # two 1-node jobs of 1 h at 0, one 2-node job of 30 min at 30 min, max 2 (see the e2e fixture)
    trace = load_trace(write(tmp_path, "submit_time,duration,nodes\n0,3600,1\n0,3600,1\n1800,1800,2\n"))
    dedicated = replay(trace, Setting(DS3, 0, 2, 600, boot_s=120))
    # both nodes: created at 0, jobs 120..3720, wide job 3720..5520, released at 5520 + 600
    assert dedicated.node_hours == pytest.approx(2 * 6120 / 3600)
    assert dedicated.cost == pytest.approx(dedicated.node_hours * DS3.price_dedicated)
    assert dedicated.busy_node_hours == pytest.approx(3.0)
    assert dedicated.idle_node_hours == pytest.approx(0.4)
    assert (dedicated.wait_p50_s, dedicated.wait_p95_s) == (120, pytest.approx(1740))
    low = replay(trace, Setting(DS3, 0, 2, 600, Tier.LOW_PRIORITY, boot_s=120, preemptions_per_node_hour=0))
    assert DS3.price_low_priority is not None
    assert low.cost == pytest.approx(low.node_hours * DS3.price_low_priority)
    assert low.preemptions == 0 and low.node_hours == dedicated.node_hours


def test_jobs_wider_than_max_are_left_out_and_counted(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "submit_time,duration,num_gpus\n0,60,1\n0,60,8\n"))
    outcome = replay(trace, Setting(T4, 0, 4, 60, boot_s=0))
    assert (outcome.jobs, outcome.jobs_too_big, outcome.jobs_completed) == (2, 1, 1)


def test_percentile_interpolates() -> None:
    assert percentile([120, 120, 1920], 95) == pytest.approx(1740)
    assert percentile([5], 50) == 5
