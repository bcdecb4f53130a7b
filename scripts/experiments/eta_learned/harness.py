# Run from the repo root: PYTHONPATH=src python scripts/experiments/eta_learned/harness.py START_DAY [SAMPLE]
# writes /tmp/etalearn/rec_fair-borrow_START_SAMPLE.json; fit.py scores learned combinations offline.
"""Throwaway (etalearn): one fair-borrow simulation of a 7-day window with the bench's settings; at
each sampled submission (its first pass) the parts of today's estimate and the queue state known
then, beside the actual wait. Today's estimate is the simulator's own (``eta``), reproduced offline
from the parts by fit.py."""

import csv
import json
import os
import sys
import time

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.preemption import Guard
from cloudlet.domain.jobs.wait_estimate import (
    ARRIVAL_WINDOW_S,
    Ahead,
    arrival_load,
    estimate_start,
    load_ahead,
    recent_pace,
)
from cloudlet.sim import policies as P
from cloudlet.sim.policy_compare import WorkloadShape, pool_jobs
from cloudlet.sim.trace import load_trace

TRACE = "/work/shared/traces/philly.csv"
start_day = float(sys.argv[1])
sample = int(sys.argv[2]) if len(sys.argv) > 2 else 5
policy = "fair-borrow"


def load_of(view, loads, factors):
    if not loads:
        return 0.0
    return (
        sum(loads.values()) if view.spot else load_ahead(view.team or "", view.priority, loads, factors or {})
    )


class H(P._PoolSim):
    def __init__(self, *a):
        super().__init__(*a)
        self.rec, self.jobs = {}, {}

    def _record(self, kind, payload, now):
        super()._record(kind, payload, now)
        if kind == "arrive":
            self.jobs[payload.name] = self.state.queue[payload.name]

    def _estimate(self, ordered, now, starting):
        fresh = set(self.state.fresh) - starting
        super()._estimate(ordered, now, starting)  # today's estimate (eta_s), as the sim has it
        if not fresh:
            return
        # the same loads and factors as the simulator's stretch (super() pruned the arrivals)
        loads = arrival_load(self.state.arrivals, now, ARRIVAL_WINDOW_S, self.s.capacity)
        fair = self.policy.order == "fair" and self.config.half_life_s > 0
        team_f = fs.factors(self.config, self.usage).team if fair else {}
        ranked = sorted(team_f, key=lambda t: -team_f[t])
        own_load = {}
        for (team, _), load in loads.items():
            own_load[team] = own_load.get(team, 0.0) + load
        queued_work = {}
        for job in self.state.queue.values():
            queued_work[job.spec.team] = queued_work.get(
                job.spec.team, 0.0
            ) + job.spec.cores * self._expected(job, job.done_s)
        all_work = sum(queued_work.values())
        queuing = sum(1 for c in self.state.queued.values() if c > 0)
        running_ends = [self._running_end(j, now) for j in self.state.running.values()]
        info, ahead, cores_ahead, team_ahead = {}, [], 0, {}
        for view in ordered:
            job = self.state.queue[view.name]
            if view.name in fresh:
                team = view.team
                info[view.name] = {
                    "r": estimate_start(view.cores, self.s.capacity, self.free, running_ends, ahead),
                    "ln": load_of(view, loads, team_f),
                    "short": cores_ahead + view.cores - self.free,
                    "pool": recent_pace(self.state.starts, now, len(ahead) + 1),
                    "cls": self._class_pace(team, team_ahead.get(team, 0), len(ahead), now),
                    "off": now - job.spec.submit_at,
                    "base": job.eta_s,
                    "ahead": len(ahead),
                    "team_ahead": team_ahead.get(team, 0),
                    "cores_ahead": cores_ahead,
                    "held": self.state.held.get(team, 0),
                    "entitled": self.entitled.get(team, 0.0),
                    "factor": team_f.get(team),
                    "rank": ranked.index(team) if team in ranked else None,
                    "team_work": queued_work.get(team, 0.0),
                    "other_work": all_work - queued_work.get(team, 0.0),
                    "own_load": own_load.get(team, 0.0),
                    "all_load": sum(loads.values()),
                    "free": self.free,
                    "queuing": queuing,
                    "queued_jobs": len(self.state.queue),
                    "running": len(self.state.running),
                    "cores": view.cores,
                    "run": self._expected(job, job.done_s),
                    "now": now,
                }
                if len(info) == len(fresh):
                    break
            ahead.append(Ahead(view.cores, self._expected(job, job.done_s)))
            cores_ahead += view.cores
            team_ahead[view.team] = team_ahead.get(view.team, 0) + 1
        self.rec.update(info)


with open(TRACE) as f:
    first = min(row["timestamp"] for row in csv.DictReader(f))
origin_s = int(first[11:13]) * 3600 + int(first[14:16]) * 60 + int(first[17:19])  # time of day of t = 0
trace = load_trace(TRACE)
jobs, teams = pool_jobs(trace, WorkloadShape(teams=5, eta_sample=sample), start_day * 86400.0, 7.0)
settings = P.PoolSettings(
    capacity=400,
    teams=teams,
    half_life_s=24 * 3600.0,
    guard=Guard(min_run_s=600.0),
    checkpoint_s=900.0,
    measure_until=7 * 86400.0,
)
sim = H(settings, P.POLICIES[policy])
t0 = time.perf_counter()
outcome = sim.run(jobs)
wall = time.perf_counter() - t0
rows = []
for name, job in sim.jobs.items():
    if not job.spec.eta or job.first_started_at is None:
        continue
    rows.append(
        {
            "name": name,
            "team": job.spec.team,
            "submit": job.spec.submit_at,
            "started": job.first_started_at,
            "wait": job.first_started_at - job.spec.submit_at,
            "eta": job.eta_s,
            "rec": sim.rec.get(name),
        }
    )
os.makedirs("/tmp/etalearn", exist_ok=True)
path = f"/tmp/etalearn/rec_{policy}_{start_day:g}_{sample}.json"
with open(path, "w") as out:
    json.dump(
        {
            "start_day": start_day,
            "origin_s": origin_s,
            "teams": [t.name for t in teams],
            "rows": rows,
            "outcome_eta": outcome.eta_median_error,
            "wall": wall,
        },
        out,
    )
print(
    path,
    "jobs",
    len(jobs),
    "rows",
    len(rows),
    "outcome eta",
    outcome.eta_median_error,
    "wall",
    round(wall, 1),
    "load",
    os.getloadavg(),
)
