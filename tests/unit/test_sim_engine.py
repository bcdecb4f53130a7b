"""The scale simulator on small, hand-checkable scenarios (simulated clock: exact times)."""

from __future__ import annotations

import math

import pytest

from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.compute.quota import QuotaLimits, Tier
from cloudlet.domain.compute.sizes import load_catalogue
from cloudlet.providers.base import NodeProvider, NodeRequest
from cloudlet.sim import ClusterSpec, JobSpec, SimClock, SimulatedProvider, Simulator
from cloudlet.sim.records import SCHEDULE_WINDOW

SIZE = load_catalogue().get("Standard_DS3_v2")  # 4 vCPUs
assert SIZE is not None


def cluster(name: str = "c", **kw: object) -> ClusterSpec:
    return ClusterSpec(name, SIZE, **kw)  # type: ignore[arg-type]


def job(name: str, at: float, duration: float, nodes: int = 1, on: str = "c") -> JobSpec:
    return JobSpec(name, on, at, duration, nodes)


def held_over_time(sim: Simulator, name: str = "c") -> list[int]:
    assert sim.series is not None
    held: list[int] = []
    for point in sim.series[name]:
        if not held or held[-1] != point[1]:
            held.append(point[1])
    return held


def test_the_simulated_provider_speaks_the_provider_protocol() -> None:
    booted: list[tuple[str, float]] = []
    clock = SimClock(10.0)
    provider = SimulatedProvider(clock, 5.0, lambda h, when: booted.append((h.node_id, when)))
    assert isinstance(provider, NodeProvider)
    req = NodeRequest("n1", "t", "inst", "sim://", "Standard_DS3_v2", 4, 14.0)
    handle = provider.create(req)
    assert booted == [("n1", 15.0)]
    assert [h.node_id for h in provider.list_nodes("inst")] == ["n1"]
    assert provider.list_nodes("other") == []
    provider.terminate(handle)
    provider.terminate(handle)  # idempotent
    assert provider.list_nodes("inst") == []


def test_scale_from_zero_runs_the_job_after_the_boot_delay_and_releases_at_idle_time() -> None:
    sim = Simulator([cluster(max_nodes=2, idle_s=120)], boot_delay_s=60, record_series=True)
    sim.submit([job("j1", 0, 100)])
    sim.run()
    j1 = sim.jobs["j1"]
    assert (j1.first_started_at, j1.ended_at, j1.wait_s) == (60, 160, 60)
    totals = sim.clusters["c"].totals
    assert totals.launches == 1 and totals.releases == 1
    assert sim.clock.now == 280  # idle from 160, released at exactly 160 + 120
    assert totals.node_s == 280 and totals.busy_node_s == 100 and totals.boot_node_s == 60
    assert held_over_time(sim) == [1, 0]


def test_idle_release_happens_exactly_at_the_idle_time_even_with_float_rounding() -> None:
    sim = Simulator([cluster(max_nodes=1, idle_s=0.2)], boot_delay_s=0.1)
    sim.submit([job("j", 0.0, 0.0)])
    sim.run()
    idle_since = 0.1
    released = sim.clock.now
    assert released - idle_since >= 0.2
    assert released == pytest.approx(0.3, abs=1e-12)


def test_a_node_reused_before_its_idle_time_is_not_released() -> None:
    sim = Simulator([cluster(max_nodes=1, idle_s=100)], boot_delay_s=0)
    sim.submit([job("a", 0, 50), job("b", 120, 50)])  # idle 50..120: 70 s < 100 s
    sim.run()
    totals = sim.clusters["c"].totals
    assert totals.launches == 1
    assert sim.clock.now == 270  # b ends at 170, released at 270
    assert sim.jobs["b"].wait_s == 0


def test_max_caps_the_nodes_and_the_rest_wait_in_fifo_order() -> None:
    sim = Simulator([cluster(max_nodes=2, idle_s=0)], boot_delay_s=10, record_series=True)
    sim.submit([job(f"j{i}", 0, 100) for i in range(5)])
    sim.run()
    assert max(held_over_time(sim)) == 2
    assert sim.clusters["c"].totals.launches == 2
    starts = [sim.jobs[f"j{i}"].first_started_at for i in range(5)]
    assert starts == [10, 10, 110, 110, 210]


def test_min_floor_nodes_start_without_jobs_and_stay() -> None:
    sim = Simulator([cluster(min_nodes=2, max_nodes=4, idle_s=10)], boot_delay_s=30)
    sim.submit([job("late", 1000, 0)])
    sim.run()
    state = sim.clusters["c"]
    assert state.totals.launches == 2 and state.totals.releases == 0
    assert all(n.state is NodeState.IDLE for n in state.nodes.values())
    assert sim.clock.now == 1010  # the last event: the nodes' idle deadline, which keeps them
    assert sim.node_seconds("c") == 2 * 1010


def test_a_job_wider_than_the_free_nodes_waits_and_smaller_ones_backfill() -> None:
    sim = Simulator([cluster(min_nodes=2, max_nodes=2, idle_s=10)], boot_delay_s=0)
    sim.submit([job("a", 0, 100), job("wide", 1, 50, nodes=2), job("small", 2, 10)])
    sim.run(until=500)
    assert sim.jobs["small"].first_started_at == 2  # backfills the free node
    assert sim.jobs["wide"].first_started_at == 100  # all-or-nothing: once both are free


def test_quota_caps_scale_up_across_clusters() -> None:
    family = SIZE.family
    quota = QuotaLimits({family: 12}, total_dedicated=100, total_low_priority=0)  # 3 nodes of 4 cores
    sim = Simulator(
        [cluster("a", max_nodes=5, idle_s=0), cluster("b", max_nodes=5, idle_s=0)],
        boot_delay_s=0,
        quota=quota,
        record_series=True,
    )
    sim.submit([job(f"a{i}", 0, 100, on="a") for i in range(5)])
    sim.submit([job(f"b{i}", 1, 100, on="b") for i in range(5)])
    sim.run(until=50)
    held = {name: state.holding for name, state in sim.clusters.items()}
    assert held == {"a": 3, "b": 0}  # a took the whole family quota first
    sim.run()
    assert max(held_over_time(sim, "a")) <= 3 and max(held_over_time(sim, "b")) <= 3
    assert sim.jobs["b0"].first_started_at == 100  # a freed a node's quota at 100: b got it then
    assert all(j.ended_at is not None for j in sim.jobs.values())


class FixedEvictions:
    """Stands in for the simulator's RNG: evictions after these delays, then never."""

    def __init__(self, *after: float) -> None:
        self.after = list(after)

    def expovariate(self, _rate: float) -> float:
        return self.after.pop(0) if self.after else math.inf


def test_a_low_priority_eviction_requeues_the_job_and_counts_the_lost_work() -> None:
    spec = cluster(max_nodes=1, idle_s=0, tier=Tier.LOW_PRIORITY, preemptions_per_node_hour=1.0)
    sim = Simulator([spec], boot_delay_s=10)
    sim.rng = FixedEvictions(50.0)  # type: ignore[assignment]
    sim.submit([job("j", 0, 100)])
    sim.run()
    j = sim.jobs["j"]
    totals = sim.clusters["c"].totals
    # node 1: boots 0..10, runs j 10..50, evicted at 50; node 2: 50..60 boot, j 60..160
    assert totals.preemptions == 1 and j.attempt == 1
    assert totals.lost_node_s == 40
    assert (j.started_at, j.ended_at, j.wait_s) == (60, 160, 20)
    assert totals.launches == 2 and totals.node_s == 50 + 110
    assert totals.jobs_completed == 1


def test_a_job_evicted_too_often_is_given_up() -> None:
    spec = cluster(max_nodes=1, idle_s=0, tier=Tier.LOW_PRIORITY, preemptions_per_node_hour=1.0)
    sim = Simulator([ClusterSpec(**{**spec.__dict__, "give_up_after_evictions": 2})], boot_delay_s=0)
    sim.rng = FixedEvictions(5.0, 5.0, 5.0)  # type: ignore[assignment]
    sim.submit([job("j", 0, 100)])
    sim.run()
    totals = sim.clusters["c"].totals
    assert totals.jobs_given_up == 1 and totals.jobs_completed == 0 and totals.lost_node_s == 10


def test_evictions_are_seeded() -> None:
    def run(seed: int) -> tuple[int, float]:
        spec = cluster(max_nodes=3, idle_s=60, tier=Tier.LOW_PRIORITY, preemptions_per_node_hour=2.0)
        sim = Simulator([spec], boot_delay_s=30, seed=seed)
        sim.submit([job(f"j{i}", i * 100.0, 1800) for i in range(20)])
        sim.run()
        totals = sim.clusters["c"].totals
        assert totals.jobs_completed == 20
        return totals.preemptions, totals.lost_node_s

    assert run(1) == run(1)
    assert run(1)[0] > 0


def test_the_pass_looks_at_the_same_window_as_the_real_scheduler() -> None:
    from cloudlet.services.jobs.dispatch import SCHEDULE_WINDOW as REAL

    assert SCHEDULE_WINDOW == REAL


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="min"):
        cluster(min_nodes=3, max_nodes=2)
    sim = Simulator([cluster()])
    with pytest.raises(ValueError, match="unknown cluster"):
        sim.submit([job("x", 0, 1, on="nope")])
