"""The loop that applies autoscale to online deployments (issue 14; the decision is
``domain/endpoints/online_autoscale.desired``).

Every ``polling_interval`` it samples each autoscaled deployment: the requests the gateway has in
flight for it plus those it holds (scale from zero), its replicas, and — for a CPU target — their
mean CPU % (their process session's ``utime + stime`` from ``/proc``). Then:

- out: new replicas of the serving generation are started on its code and model and join the
  deployment not ready; the liveness watcher probes them and they take traffic once ready;
- in: the replicas with the fewest requests in flight leave the gateway's choice first, then are
  drained (their requests answered, bounded) and stopped, off this thread.

Quota is held for ``max_instances`` when the deployment is written (services/endpoints/online_endpoints),
so growing within it needs no check here. A request held for a deployment with no replica wakes
the loop at once rather than at the next poll; one held by another server reaches the holder
through the deployment's row (``control/online_serving.py``). Only the online lease holder autoscales
(``control/online_serving.py``); each change of count is stored on the deployment's row, so a
restart or a new holder starts from it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cloudlet.domain.endpoints import online_autoscale as policy

if TYPE_CHECKING:
    from cloudlet.control.online_ports import ReplicaRuntime
    from cloudlet.control.online_state import DeploymentState, Replica

log = logging.getLogger("cloudlet.online.autoscale")
TICK_S = 0.25  # how often the loop looks whether a deployment's poll is due
GRACE_S = 0.05  # a replica just taken out of the choice may still get a request the gateway picked
CLOCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def session_cpu_seconds(sessions: set[int]) -> dict[int, float]:
    """CPU seconds (user + system) used so far by the processes of each session in SESSIONS."""
    out = dict.fromkeys(sessions, 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        sid = int(fields[3])
        if sid in out:
            out[sid] += (int(fields[11]) + int(fields[12])) / CLOCK
    return out


class Autoscaler:
    def __init__(self, runtime: ReplicaRuntime) -> None:
        self.runtime = runtime
        self.wake = threading.Event()
        self.cpu: dict[int, tuple[float, float]] = {}  # replica pid → (wall, cpu seconds) last seen

    def run(self) -> None:
        while not self.runtime.stopping.is_set():
            self.wake.wait(TICK_S)
            self.wake.clear()
            if not self.runtime.loop.leading:  # another server runs the replicas
                self.tell_the_holder(time.monotonic())
                continue
            with self.runtime.lock:
                deployments = [
                    d
                    for e in self.runtime.endpoints.values()
                    for d in e.deployments.values()
                    if d.spec.scale_settings is not None
                ]
            for deployment in deployments:
                try:
                    self.tick(deployment, time.monotonic())
                except Exception:  # one deployment's failure must not stop the others' autoscale
                    log.exception("autoscale of %s failed", deployment.name)

    def tell_the_holder(self, now: float) -> None:
        """On a server that does not run the replicas: the autoscaled deployments it holds a
        request for with no replica serving, written to their rows for the holder (once per half
        of the hold's bound: a hold outlasting it is told again)."""
        with self.runtime.lock:
            held = [
                d
                for e in self.runtime.endpoints.values()
                for d in e.deployments.values()
                if d.spec.scale_settings is not None
                and d.waiting > 0
                and not [r for r in d.replicas if not r.retired]
                and d.demand_told_until <= now
            ]
        for deployment in held:
            for_s = deployment.spec.request_settings["request_timeout_ms"] / 1000
            try:
                self.runtime.loop.signal_demand(deployment.id, for_s)
            except Exception:  # the next tick tries again
                log.exception("telling the holder of a request for %s failed", deployment.name)
                continue
            deployment.demand_told_until = now + for_s / 2

    def _cpu_percent(self, replicas: list[Replica], now: float) -> float | None:
        pids = {r.proc.pid for r in replicas if r.proc.poll() is None}
        if not pids:
            return None
        used = session_cpu_seconds(pids)
        shares = []
        for pid, seconds in used.items():
            before = self.cpu.get(pid)
            self.cpu[pid] = (now, seconds)
            if before is not None and now > before[0]:
                shares.append(100.0 * (seconds - before[1]) / (now - before[0]))
        return sum(shares) / len(shares) if shares else None

    def tick(self, deployment: DeploymentState, now: float) -> None:
        settings = deployment.spec.scale_settings
        assert settings is not None
        serving = [r for r in deployment.replicas if not r.retired]
        # requests held here, and one for another server's held requests (online_serving)
        held = deployment.waiting + (1 if deployment.demand_until > now else 0)
        urgent = held > 0 and not serving
        if now < deployment.next_sample and not urgent:
            return
        deployment.next_sample = now + settings.polling_interval
        cpu = self._cpu_percent(serving, now) if settings.target_utilization_percentage is not None else None
        in_flight = self.runtime.in_flight(deployment)  # every worker's, under --workers
        sample = policy.Sample(now, in_flight + held, len(serving), cpu)
        deployment.samples = [s for s in deployment.samples if s.at > now - policy.horizon(settings)] + [
            sample
        ]
        if deployment.code_dir is None or deployment.model_dir is None:
            return  # no generation has served yet: the roll-out decides the first replicas
        want = policy.desired(settings, len(serving), deployment.samples, now)
        if want > len(serving):
            self._out(deployment, want - len(serving))
        elif want < len(serving):
            self._in(deployment, serving, len(serving) - want)

    def _out(self, deployment: DeploymentState, count: int) -> None:
        assert deployment.code_dir is not None and deployment.model_dir is not None
        generation = deployment.generation
        logs = deployment.code_dir.parent / "logs"
        fresh = []
        for _ in range(count):
            path = logs / f"replica-{deployment.started}.log"
            deployment.started += 1
            fresh.append(
                self.runtime.start_replica(
                    deployment.spec, deployment.code_dir, deployment.model_dir, path, deployment.placement
                )
            )
        with self.runtime.lock:
            stale = deployment.generation != generation or self.runtime.stopping.is_set()
            if not stale:
                deployment.replicas = [*deployment.replicas, *fresh]
        log.info("autoscale: %s from %d to %d replicas", deployment.name, len(deployment.replicas) - count,
                 len(deployment.replicas))  # fmt: skip
        if stale:
            self._drain(fresh)
        else:
            self._store(deployment)

    def _in(self, deployment: DeploymentState, serving: list[Replica], count: int) -> None:
        # not-ready ones first, then those with the fewest requests in flight
        victims = sorted(serving, key=lambda r: (r.ready, r.in_flight))[:count]
        for replica in victims:  # retired first: the liveness watcher then leaves them alone
            replica.ready, replica.retired = False, True
            self.cpu.pop(replica.proc.pid, None)
        with self.runtime.lock:
            deployment.replicas = [r for r in deployment.replicas if r not in victims]
        log.info("autoscale: %s from %d to %d replicas", deployment.name, len(serving),
                 len(serving) - count)  # fmt: skip
        self._drain(victims)
        self._store(deployment)

    def _store(self, deployment: DeploymentState) -> None:
        """The count now, on the deployment's row (a failure is logged: the next change stores)."""
        count = len([r for r in deployment.replicas if not r.retired])
        try:
            self.runtime.loop.store_autoscaled(deployment.id, count)
        except Exception:
            log.exception("storing the autoscaled count of %s failed", deployment.name)

    def _drain(self, replicas: list[Replica]) -> None:
        def drain() -> None:
            self.runtime.stopping.wait(GRACE_S)
            self.runtime.retire(replicas)

        thread = threading.Thread(target=drain, name="online-autoscale-drain", daemon=True)
        thread.start()
