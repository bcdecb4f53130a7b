# Run from the repo root: PYTHONPATH=src python scripts/experiments/eta_forward/harness2.py fair-borrow 35 5
# writes /tmp/etasim2/rec_*.json; score2.py FILE... scores the combinations offline.
"""Throwaway (etasim2): one simulation; at each submission the parts of every variant recorded:
the static replay before its stretch (r), the no-forecast forward replay (f0), the stretch's load
with the factors of now (ln) and at the forward replay's start (le), the head shortfall and paces."""
import json, math, os, sys, time
from cloudlet.sim import policies as P
from cloudlet.sim.policy_compare import WorkloadShape, pool_jobs
from cloudlet.sim.trace import load_trace
from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.forward_replay import forward_starts, Holding, Work
from cloudlet.domain.jobs.wait_estimate import (
    ARRIVAL_WINDOW_S, Ahead, arrival_load, estimate_start, load_ahead, recent_pace)
from cloudlet.domain.jobs.preemption import Guard

policy, start_day, sample = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
STEP = float(os.environ.get("STEP", "300"))


def load_of(view, loads, factors):
    if not loads:
        return 0.0
    return sum(loads.values()) if view.spot else load_ahead(view.team or "", view.priority, loads, factors or {})


class H(P._PoolSim):
    def __init__(self, *a):
        super().__init__(*a)
        self.rec, self.jobs, self.fwd_s, self.fwd_n = {}, {}, 0.0, 0

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
        if self.policy.order == "fifo":
            loads = {}
        fair = self.policy.order == "fair" and self.config.half_life_s > 0
        team_f = fs.factors(self.config, self.usage).team if fair else {}
        running_ends = [self._running_end(j, now) for j in self.state.running.values()]
        info, ahead, cores_ahead, team_ahead = {}, [], 0, {}
        for view in ordered:
            job = self.state.queue[view.name]
            if view.name in fresh:
                info[view.name] = {
                    "r": estimate_start(view.cores, self.s.capacity, self.free, running_ends, ahead),
                    "ln": load_of(view, loads, team_f),
                    "short": cores_ahead + view.cores - self.free,
                    "pool": recent_pace(self.state.starts, now, len(ahead) + 1),
                    "cls": self._class_pace(view.team, team_ahead.get(view.team, 0), len(ahead), now),
                    "view": view,
                }
                if len(info) == len(fresh):
                    break
            ahead.append(Ahead(view.cores, self._expected(job, job.done_s)))
            cores_ahead += view.cores
            team_ahead[view.team] = team_ahead.get(view.team, 0) + 1
        fifo = self.policy.order == "fifo"
        config = self.config if self.policy.order == "fair" else None
        running = [
            Holding(j.fifo_view if fifo else j.view, self._running_end(j, now).ends_in_s, j.started_at, j.preemptions)
            for j in self.state.running.values()
        ]
        nopre = P.PassPolicy(self.pass_policy.fair, self.pass_policy.borrow, False, self.pass_policy.guard)
        queue = [Work(j.fifo_view if fifo else j.view, self._expected(j, j.done_s)) for j in self.state.queue.values()]
        at_start = {}
        t0 = time.perf_counter()
        starts = forward_starts(config, self.s.capacity, self.free, running, queue, self.usage, now, (),
                                policy=nopre, targets=fresh, window_s=0.0, step_s=STEP, factors_at_start=at_start)
        self.fwd_s += time.perf_counter() - t0
        self.fwd_n += 1
        for name, d in info.items():
            view = d.pop("view")
            d["f0"] = starts.get(name)
            # the load ahead with the factors on the forward replay's start pass (None: started at
            # once or no fair share -> the factors of now)
            d["le"] = load_of(view, loads, at_start[name] if fair and name in at_start else team_f)
            d["off"] = now - self.jobs[name].spec.submit_at
            d["base"] = self.state.queue[name].eta_s
        self.rec.update(info)


trace = load_trace("/work/shared/traces/philly.csv")
jobs, teams = pool_jobs(trace, WorkloadShape(teams=5, eta_sample=sample), start_day * 86400.0, 7.0)
settings = P.PoolSettings(capacity=400, teams=teams, half_life_s=24 * 3600.0, guard=Guard(min_run_s=600.0),
                          checkpoint_s=900.0, measure_until=7 * 86400.0)
sim = H(settings, P.POLICIES[policy])
t0 = time.perf_counter()
outcome = sim.run(jobs)
wall = time.perf_counter() - t0
rows = []
for name, job in sim.jobs.items():
    if not job.spec.eta or job.first_started_at is None:
        continue
    rows.append({"name": name, "team": job.spec.team, "wait": job.first_started_at - job.spec.submit_at,
                 "eta": job.eta_s, "rec": sim.rec.get(name)})
os.makedirs("/tmp/etasim2", exist_ok=True)
path = f"/tmp/etasim2/rec_{policy}_{start_day:g}_{sample}_{STEP:g}.json"
json.dump({"rows": rows, "outcome_eta": outcome.eta_median_error, "wall": wall, "fwd_s": sim.fwd_s, "fwd_n": sim.fwd_n}, open(path, "w"))
print(path, "outcome eta", outcome.eta_median_error, "wall", round(wall, 1), "fwd_s", round(sim.fwd_s, 1),
      "passes", sim.fwd_n, "load", os.getloadavg())
