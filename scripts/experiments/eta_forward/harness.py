# Run from the repo root: STEP=300 [PRE=1] PYTHONPATH=src python scripts/experiments/eta_forward/harness.py fair-borrow 35 5 6,12,24
# writes /tmp/etasim/rec_*.json (mkdir /tmp/etasim first); score.py FILE... prints the median errors per variant:
# (forward alone, blended as paced_start, pool pace at the head and the forward replay deeper, jobs never started).
"""Throwaway: one simulation, the estimate's variants recorded at each submission."""
import json, math, os, statistics, sys, time
from cloudlet.sim import policies as P
from cloudlet.sim.policy_compare import WorkloadShape, pool_jobs
from cloudlet.sim.trace import load_trace
from cloudlet.domain.jobs.forward_replay import forward_starts, Holding, Work
from cloudlet.domain.jobs.wait_estimate import paced_start, recent_pace
from cloudlet.domain.jobs.preemption import Guard

policy, start_day, sample = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
WINDOWS = [float(x) * 3600 for x in (sys.argv[4] if len(sys.argv) > 4 else "3,6,12,24").split(",")]
STEP = float(os.environ.get("STEP", "60"))
PRE = os.environ.get("PRE") == "1"


class H(P._PoolSim):
    def __init__(self, *a):
        super().__init__(*a)
        self.rec, self.jobs, self.subs, self.fwd_s = {}, {}, [], {w: 0.0 for w in WINDOWS}
        self.fwd_n = 0

    def _record(self, kind, payload, now):
        super()._record(kind, payload, now)
        if kind == "arrive":
            job = self.state.queue[payload.name]
            self.jobs[payload.name] = job
            if not payload.spot:
                self.subs.append(job)

    def _estimate(self, ordered, now, starting):
        fresh = set(self.state.fresh) - starting
        super()._estimate(ordered, now, starting)
        if not fresh:
            return
        info = {}
        n = cores_ahead = 0
        team_ahead = {}
        for view in ordered:
            if view.name in fresh:
                short = cores_ahead + view.cores - self.free
                pool = recent_pace(self.state.starts, now, n + 1)
                cls = self._class_pace(view.team, team_ahead.get(view.team, 0), n, now)
                info[view.name] = (short, pool, cls)
                if len(info) == len(fresh):
                    break
            n += 1
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
        longest = max(WINDOWS)
        self.subs = [j for j in self.subs if j.spec.submit_at > now - longest]
        self.fwd_n += 1
        out = {name: {"base": self.state.queue[name].eta_s, "off": now - self.jobs[name].spec.submit_at,
                      "short": info[name][0], "pool": info[name][1], "cls": info[name][2]} for name in fresh}
        for w in WINDOWS:
            recent = [Work(j.fifo_view if fifo else j.view, self._expected(j, 0.0)) for j in self.subs if j.spec.submit_at > now - w]
            t0 = time.perf_counter()
            starts = forward_starts(config, self.s.capacity, self.free, running, queue, self.usage, now, recent,
                                    policy=nopre, targets=fresh, window_s=w, step_s=STEP)
            self.fwd_s[w] += time.perf_counter() - t0
            for name in fresh:
                out[name][f"f{w/3600:g}"] = starts.get(name)
            if PRE and self.pass_policy.preempt:
                t0 = time.perf_counter()
                starts = forward_starts(config, self.s.capacity, self.free, running, queue, self.usage, now, recent,
                                        policy=self.pass_policy, preempted=self.state.recent, targets=fresh, window_s=w, step_s=STEP)
                self.fwd_s[-w] = self.fwd_s.get(-w, 0.0) + time.perf_counter() - t0
                for name in fresh:
                    out[name][f"p{w/3600:g}"] = starts.get(name)
        # the static replay with no arrivals as control (window 0)
        starts = forward_starts(config, self.s.capacity, self.free, running, queue, self.usage, now, (),
                                policy=nopre, targets=fresh, window_s=0.0, step_s=STEP)
        for name in fresh:
            out[name]["f0"] = starts.get(name)
        self.rec.update(out)


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
    wait = job.first_started_at - job.spec.submit_at
    r = sim.rec.get(name)
    rows.append({"name": name, "team": job.spec.team, "wait": wait, "eta": job.eta_s, "rec": r})
tag = os.environ.get("TAG", "")
path = f"/tmp/etasim/rec_{policy}_{start_day:g}_{sample}_{STEP:g}{tag}.json"
json.dump({"rows": rows, "outcome_eta": outcome.eta_median_error, "wall": wall, "fwd_s": sim.fwd_s, "fwd_n": sim.fwd_n}, open(path, "w"))
print(path, "outcome eta", outcome.eta_median_error, "wall", round(wall, 1), "fwd_s", {k/3600: round(v, 1) for k, v in sim.fwd_s.items()}, "passes", sim.fwd_n)
