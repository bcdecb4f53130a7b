"""What-if: replay a job trace through the simulator for several cluster settings, and price it.

Cost = node-hours × the size's hourly price (the low-priority price for a low-priority cluster).
Idle waste is machine time not running a job that completed: booting, idle before scale-down, and
(for low priority) runs lost to evictions are shown apart as preemption losses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import VmSize
from cloudlet.sim.engine import ClusterSpec, JobSpec, SeriesPoint, Simulator
from cloudlet.sim.trace import Trace

CLUSTER = "what-if"


@dataclass(frozen=True)
class Setting:
    size: VmSize
    min_nodes: int
    max_nodes: int
    idle_s: float
    tier: Tier = Tier.DEDICATED
    boot_s: float = 120.0
    preemptions_per_node_hour: float = 0.05  # used for low priority only
    give_up_after_evictions: int = 5  # low priority: a job evicted this often is counted as given up

    @property
    def label(self) -> str:
        tier = " low-pri" if self.tier is Tier.LOW_PRIORITY else ""
        return f"{self.size.name} {self.min_nodes}-{self.max_nodes} idle {self.idle_s:g}s{tier}"

    @property
    def price_per_node_hour(self) -> float:
        if self.tier is Tier.LOW_PRIORITY and self.size.price_low_priority is not None:
            return self.size.price_low_priority
        return self.size.price_dedicated


@dataclass
class Outcome:
    setting: Setting
    jobs: int
    jobs_completed: int
    jobs_too_big: int  # needed more nodes than max: never submitted (they would queue forever)
    node_hours: float
    busy_node_hours: float
    boot_node_hours: float
    lost_node_hours: float
    cost: float
    wait_p50_s: float
    wait_p95_s: float
    wait_mean_s: float
    preemptions: int
    jobs_given_up: int
    nodes_launched: int
    span_h: float  # first submission to the last node released
    series: list[SeriesPoint] = field(default_factory=list)

    @property
    def idle_node_hours(self) -> float:
        return max(0.0, self.node_hours - self.busy_node_hours - self.lost_node_hours)

    @property
    def idle_share(self) -> float:
        return self.idle_node_hours / self.node_hours if self.node_hours else 0.0

    def to_dict(self) -> dict[str, Any]:
        s = self.setting
        return {
            "setting": s.label,
            "size": s.size.name,
            "min_nodes": s.min_nodes,
            "max_nodes": s.max_nodes,
            "idle_s": s.idle_s,
            "tier": s.tier.value,
            "boot_s": s.boot_s,
            "preemptions_per_node_hour": s.preemptions_per_node_hour if s.tier is Tier.LOW_PRIORITY else 0,
            "price_per_node_hour": s.price_per_node_hour,
            "cost": round(self.cost, 2),
            "node_hours": round(self.node_hours, 3),
            "busy_node_hours": round(self.busy_node_hours, 3),
            "idle_node_hours": round(self.idle_node_hours, 3),
            "idle_share": round(self.idle_share, 4),
            "boot_node_hours": round(self.boot_node_hours, 3),
            "wait_p50_s": round(self.wait_p50_s, 3),
            "wait_p95_s": round(self.wait_p95_s, 3),
            "wait_mean_s": round(self.wait_mean_s, 3),
            "preemptions": self.preemptions,
            "lost_node_hours": round(self.lost_node_hours, 3),
            "jobs_given_up": self.jobs_given_up,
            "jobs": self.jobs,
            "jobs_completed": self.jobs_completed,
            "jobs_too_big": self.jobs_too_big,
            "nodes_launched": self.nodes_launched,
            "span_h": round(self.span_h, 3),
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def workload(trace: Trace, setting: Setting, time_scale: float = 1.0) -> tuple[list[JobSpec], int]:
    """The trace's jobs for this setting (times × ``time_scale``), and how many exceed max nodes."""
    jobs, too_big = [], 0
    for job, nodes in zip(trace.jobs, trace.nodes_per_job(setting.size.gpus), strict=True):
        if nodes > setting.max_nodes:
            too_big += 1
            continue
        jobs.append(
            JobSpec(f"j{job.row:09d}", CLUSTER, job.submit_s * time_scale, job.duration_s * time_scale, nodes)
        )
    return jobs, too_big


def replay(
    trace: Trace,
    setting: Setting,
    *,
    time_scale: float = 1.0,
    seed: int = 0,
    record_series: bool = False,
) -> Outcome:
    jobs, too_big = workload(trace, setting, time_scale)
    spec = ClusterSpec(
        CLUSTER,
        setting.size,
        setting.min_nodes,
        setting.max_nodes,
        setting.idle_s,
        setting.tier,
        setting.preemptions_per_node_hour if setting.tier is Tier.LOW_PRIORITY else 0.0,
        setting.give_up_after_evictions,
    )
    sim = Simulator([spec], boot_delay_s=setting.boot_s, seed=seed, record_series=record_series)
    sim.submit(jobs)
    sim.run()
    return _outcome(sim, setting, len(trace.jobs), too_big)


def _outcome(sim: Simulator, setting: Setting, jobs: int, too_big: int) -> Outcome:
    totals = sim.clusters[CLUSTER].totals
    node_hours = sim.node_seconds(CLUSTER) / 3600
    return Outcome(
        setting=setting,
        jobs=jobs,
        jobs_completed=totals.jobs_completed,
        jobs_too_big=too_big,
        node_hours=node_hours,
        busy_node_hours=totals.busy_node_s / 3600,
        boot_node_hours=totals.boot_node_s / 3600,
        lost_node_hours=totals.lost_node_s / 3600,
        cost=node_hours * setting.price_per_node_hour,
        wait_p50_s=percentile(totals.waits, 50),
        wait_p95_s=percentile(totals.waits, 95),
        wait_mean_s=sum(totals.waits) / len(totals.waits) if totals.waits else math.nan,
        preemptions=totals.preemptions,
        jobs_given_up=totals.jobs_given_up,
        nodes_launched=totals.launches,
        span_h=sim.clock.now / 3600,
        series=(sim.series or {}).get(CLUSTER, []),
    )
