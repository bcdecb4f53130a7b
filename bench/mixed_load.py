"""mixed_load: 100 readers (compute show, job list, job show) and 10 submitters at once, against
cloudlet and against the minimal FastAPI peer, in the same run.

Setup: a real cloudlet server (embedded SQLite, temp home) with a warm 2-node cluster
(``bench-load``, the compute the readers show and the submitters' jobs run on) and a second
cluster (``bench-seed``) that ran ``SEED_JOBS`` jobs before the load began: job list is
``GET {ws}/jobs?compute=bench-seed`` (a page of fixed size however many jobs the load submits) and
job show is one of them. The peer (``bench/_peer_app.py``) answers the same paths with the very
bytes cloudlet served for them, behind the same bearer check, with no store.

Load, per window: ``READERS`` closed-loop keep-alive connections, each cycling compute show → job
list → job show (reader i starts at route i mod 3); ``SUBMITTERS`` connections each submitting a
``true`` job every ``SUBMIT_INTERVAL_S`` (``PUT {ws}/jobs/{name}``); one probe of ``/healthz``
every 100 ms. Windows alternate between cloudlet and the peer. After each cloudlet window the
benchmark waits (reading the SQLite file, not the API) until every accepted job has completed:
the reconcilers and the dispatch path kept placing jobs under the load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._dispatch_client import Api, Db
from bench._loadgen import RunResult
from bench._mixed_load import Client, MixedResult, Route, run_mixed
from bench._server import (
    REPO_ROOT,
    ServerProcess,
    kill_node_processes,
    server_pids,
    start_cloudlet,
    start_peer,
)
from bench._stats import ratio, summarize_ns

NAME = "mixed_load"
LOAD = "bench-load"
SEED = "bench-seed"
SEED_JOBS = 20
READERS = 100
SUBMITTERS = 10
SUBMIT_INTERVAL_S = 0.5
PROBE_INTERVAL_S = 0.1
GOAL_P99_MS = 100.0  # compute show at 100 clients (issue 30; 200 ms before it)
GOAL_THROUGHPUT_RATIO = 0.3  # each read route's req/s against the peer's (issue 30)
READ_ROUTES = ("compute_show", "job_list", "job_show")
ROUTES = ("compute_show", "job_list", "job_show", "job_submit", "healthz")


@dataclass(frozen=True)
class Plan:
    rounds: int
    window_s: float
    drain_timeout_s: float

    @classmethod
    def make(cls, quick: bool) -> Plan:
        return cls(1, 8.0, 60.0) if quick else cls(2, 20.0, 120.0)


def _routes(ws: str, auth: dict[str, str], prefix: str) -> dict[str, Route]:
    headers = tuple(auth.items())
    submit = json.dumps({"command": "true", "compute": f"azureml:{LOAD}"})
    return {
        "compute_show": Route("compute_show", "GET", f"{ws}/computes/{LOAD}", headers=headers),
        "job_list": Route("job_list", "GET", f"{ws}/jobs?compute={SEED}", headers=headers),
        "job_show": Route("job_show", "GET", f"{ws}/jobs/seed-0", headers=headers),
        "job_submit": Route(
            "job_submit", "PUT", f"{ws}/jobs/{prefix}-{{n}}", submit, ok=(201,), headers=headers
        ),
        "healthz": Route("healthz", "GET", "/healthz"),
    }


def _clients(routes: dict[str, Route]) -> list[Client]:
    reading = (routes["compute_show"], routes["job_list"], routes["job_show"])
    clients = [Client(reading, start=i % len(reading)) for i in range(READERS)]
    clients += [Client((routes["job_submit"],), interval_s=SUBMIT_INTERVAL_S) for _ in range(SUBMITTERS)]
    clients.append(Client((routes["healthz"],), interval_s=PROBE_INTERVAL_S))
    return clients


def _setup(api: Api, db: Db) -> dict[str, Any]:
    facts: dict[str, Any] = {
        LOAD: api.create_cluster(LOAD, 2, 2, 120),
        SEED: api.create_cluster(SEED, 0, 1, 2),
    }
    facts["load_nodes_idle_after_s"] = round(api.wait_idle_nodes(LOAD, 2), 2)
    for i in range(SEED_JOBS):
        api.submit(f"seed-{i}", "true", SEED)
    deadline = time.monotonic() + 120
    while db.count("seed-", ("Completed",)) < SEED_JOBS:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {SEED_JOBS} seed jobs did not complete in 120 s")
        time.sleep(0.1)
    while api.nodes(SEED):  # its node is released after 2 s idle: no scale-down inside a window
        if time.monotonic() > deadline:
            raise RuntimeError(f"{SEED} did not scale down in time")
        time.sleep(0.2)
    return facts


def _documents(server: ServerProcess, routes: dict[str, Route]) -> dict[str, str]:
    """What cloudlet answers on each route: the peer serves these very bytes."""
    docs: dict[str, str] = {}
    with httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=30) as client:
        docs[LOAD] = client.get(routes["compute_show"].path).raise_for_status().text
        docs["jobs:list"] = client.get(routes["job_list"].path).raise_for_status().text
        docs["job:seed-0"] = client.get(routes["job_show"].path).raise_for_status().text
        put = routes["job_submit"]
        answer = client.put(put.path.replace("{n}", "0"), json=json.loads(put.body or "{}"))
        docs["jobs:put"] = answer.raise_for_status().text
    return docs


def _drain(db: Db, prefix: str, accepted: int, timeout: float) -> dict[str, Any]:
    """Wait until the window's accepted jobs have all completed; how long that took."""
    began = time.monotonic()
    done = 0
    while time.monotonic() - began < timeout:
        done = db.count(prefix + "-", ("Completed",))
        if done >= accepted:
            break
        time.sleep(0.1)
    failed = db.count(prefix + "-", ("Failed", "Canceled"))
    return {"accepted": accepted, "completed": done, "failed": failed, "after_s": time.monotonic() - began}


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of the server's processes: PID and, under ``--workers N``, its
    workers (node agents, its children when it serves alone, are not counted)."""
    total = 0.0
    for each in server_pids(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            if each == pid:
                return None
            continue
        total += (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 10 ms
    return total


def _window(server: ServerProcess, routes: dict[str, Route], window_s: float) -> tuple[MixedResult, float]:
    cpu0 = _cpu_s(server.pid)
    result = run_mixed(server.endpoint, _clients(routes), duration_s=window_s, request_timeout_s=30.0)
    cpu1 = _cpu_s(server.pid)
    share = (cpu1 - cpu0) / result.wall_s if cpu0 is not None and cpu1 is not None else float("nan")
    return result, share


def _merge(into: dict[str, RunResult], result: MixedResult) -> None:
    for key, res in result.by_route.items():
        acc = into.setdefault(key, RunResult())
        acc.latencies_ns.extend(res.latencies_ns)
        acc.wall_s += res.wall_s
        acc.errors += res.errors
        acc.timed_out = acc.timed_out or result.timed_out
        acc.error_samples.extend(res.error_samples[: max(0, 5 - len(acc.error_samples))])


def _summary(results: dict[str, RunResult]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ROUTES:
        res = results.get(key, RunResult())
        summary = summarize_ns(res.latencies_ns, res.wall_s)
        summary.update({"errors": res.errors, "timed_out": res.timed_out, "error_samples": res.error_samples})
        out[key] = summary
    return out


DEFAULT_WORKERS = "default"  # the server started as a user would: no --workers, no CLOUDLET_WORKERS


def worker_counts() -> tuple[str, ...]:
    """``cloudlet server --workers`` for each side of the run (``CLOUDLET_BENCH_WORKERS``, e.g.
    ``1,2``; ``default`` starts it without the flag, as a user's plain ``cloudlet server``; default
    ``default,1``), each against the peer in the same run."""
    raw = os.environ.get("CLOUDLET_BENCH_WORKERS", f"{DEFAULT_WORKERS},1")
    parts = tuple(part.strip().lower() for part in raw.split(",") if part.strip())
    for part in parts:
        if part != DEFAULT_WORKERS and not part.isdigit():
            raise ValueError(f"CLOUDLET_BENCH_WORKERS: {part!r} is neither a number nor {DEFAULT_WORKERS!r}")
    return parts


def run(quick: bool = False) -> dict[str, Any]:
    plan = Plan.make(quick)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = plan.__dict__ | {
        "quick": quick,
        "readers": READERS,
        "submitters": SUBMITTERS,
        "submit_interval_s": SUBMIT_INTERVAL_S,
        "probe_interval_s": PROBE_INTERVAL_S,
        "seed_jobs": SEED_JOBS,
        "workers": list(worker_counts()),
    }
    data["runs"] = [_run_workers(plan, workers) for workers in worker_counts()]
    data["loadavg_end"] = _results.loadavg()
    return data


def _run_workers(plan: Plan, workers: str) -> dict[str, Any]:
    """One cloudlet server with WORKERS processes (``default``: the server's own choice), in a fresh
    home, against the peer."""
    data: dict[str, Any] = {"workers": workers, "loadavg_start": _results.loadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-"))
    servers: list[ServerProcess] = []
    saved = os.environ.get("CLOUDLET_WORKERS")
    try:
        # The server's environment is a copy of ours.
        if workers == DEFAULT_WORKERS:
            os.environ.pop("CLOUDLET_WORKERS", None)
        else:
            os.environ["CLOUDLET_WORKERS"] = workers
        try:
            cloudlet = start_cloudlet(tmp / "home")
        finally:
            if saved is None:
                os.environ.pop("CLOUDLET_WORKERS", None)
            else:
                os.environ["CLOUDLET_WORKERS"] = saved
        servers.append(cloudlet)
        data["workers_started"] = _workers_started(cloudlet.log_path)
        api, db = Api(cloudlet), Db(tmp / "home" / "cloudlet.db")
        data["setup"] = _setup(api, db)
        probe_routes = _routes(cloudlet.ws_path, cloudlet.headers(), "doc")
        docs = _documents(cloudlet, probe_routes)
        data["setup"]["document_bytes"] = {key: len(text.encode()) for key, text in docs.items()}
        bodies = tmp / "peer-bodies.json"
        bodies.write_text(json.dumps(docs))
        peer = start_peer(bodies, cloudlet.api_key, tmp)
        servers.append(peer)

        merged: dict[str, dict[str, RunResult]] = {"cloudlet": {}, "peer": {}}
        windows: list[dict[str, Any]] = []
        for round_no in range(plan.rounds):
            order = ("cloudlet", "peer") if round_no % 2 == 0 else ("peer", "cloudlet")
            for side in order:
                server = cloudlet if side == "cloudlet" else peer
                prefix = f"load{round_no}"
                routes = _routes(cloudlet.ws_path, cloudlet.headers(), prefix)
                result, cpu = _window(server, routes, plan.window_s)
                _merge(merged[side], result)
                window: dict[str, Any] = {
                    "side": side,
                    "round": round_no,
                    "wall_s": round(result.wall_s, 2),
                    "requests": sum(len(r.latencies_ns) + r.errors for r in result.by_route.values()),
                    "server_cpu_share": round(cpu, 3),
                    "loadavg": _results.loadavg(),
                }
                if side == "cloudlet":
                    accepted = len(result.accepted["job_submit"])
                    window["drain"] = _drain(db, prefix, accepted, plan.drain_timeout_s)
                windows.append(window)
                _check_alive(servers)
        data["windows"] = windows
        data["cloudlet"] = _summary(merged["cloudlet"])
        data["peer"] = _summary(merged["peer"])
        data["ratios"] = {
            key: {
                "p50": ratio(data["cloudlet"][key]["p50_ms"], data["peer"][key]["p50_ms"]),
                "p99": ratio(data["cloudlet"][key]["p99_ms"], data["peer"][key]["p99_ms"]),
                "throughput": ratio(
                    data["cloudlet"][key]["throughput_rps"], data["peer"][key]["throughput_rps"]
                ),
            }
            for key in ROUTES
        }
        p99 = data["cloudlet"]["compute_show"]["p99_ms"]
        errors = sum(data["cloudlet"][key]["errors"] for key in ROUTES)
        drained = all(w["drain"]["completed"] >= w["drain"]["accepted"] for w in windows if "drain" in w)
        read_ratios = [data["ratios"][key]["throughput"] for key in READ_ROUTES]
        slowest = min((r for r in read_ratios if r is not None), default=None)
        data["goal"] = {
            "compute_show_p99_ms": p99,
            "limit_ms": GOAL_P99_MS,
            "errors": errors,
            "every_job_completed": drained,
            "lowest_read_throughput_ratio": slowest,
            "throughput_ratio_floor": GOAL_THROUGHPUT_RATIO,
            "holds": bool(
                p99 <= GOAL_P99_MS
                and errors == 0
                and drained
                and slowest is not None
                and slowest >= GOAL_THROUGHPUT_RATIO
            ),
        }
        data["rss_kib_after"] = {"cloudlet": cloudlet.rss_kib(), "peer": peer.rss_kib()}
        data["loadavg_end"] = _results.loadavg()
        api.close()
        db.close()
        return data
    finally:
        for server in reversed(servers):
            server.stop()
        data["leftover_node_processes_killed"] = kill_node_processes(tmp / "home")
        shutil.rmtree(tmp, ignore_errors=True)


def _check_alive(servers: list[ServerProcess]) -> None:
    for server in servers:
        code = server.process.poll()
        if code is not None:
            tail = "\n".join(server.log_path.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"server {server.endpoint} exited with {code} mid-benchmark:\n{tail}")


LABELS = {
    "compute_show": "compute show",
    "job_list": "job list",
    "job_show": "job show",
    "job_submit": "job submit",
    "healthz": "healthz (probe)",
}


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    machine, plan, git = data["machine"], data["plan"], data.get("git", {})
    lines = [
        f"## mixed_load — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}; load average "
        f"{data.get('loadavg_start')} at start, {data.get('loadavg_end')} at end; git "
        f"{git.get('commit', '?')}{' (src dirty)' if git.get('src_dirty') else ''}"
        f"{'; --quick' if plan['quick'] else ''}.",
        "",
        f"{plan['readers']} closed-loop readers (compute show → job list of {plan['seed_jobs']} → job show), "
        f"{plan['submitters']} submitters (one `true` job each every {plan['submit_interval_s']} s), "
        f"a `/healthz` probe every {plan['probe_interval_s']} s; {plan['rounds']} × {plan['window_s']:g} s "
        "per side, cloudlet and peer alternating; one cloudlet server per worker count "
        f"({', '.join(str(w) for w in plan.get('workers', [1]))}), each in a fresh home.",
    ]
    for one in data["runs"]:
        lines += ["", *_markdown_run(one, plan, f)]
    return "\n".join(lines)


def _markdown_run(data: dict[str, Any], plan: dict[str, Any], f: Any) -> list[str]:
    goal = data["goal"]
    lines = [
        f"{workers_label(data)} (load average {data.get('loadavg_start')} → "
        f"{data.get('loadavg_end')}; "
        "server CPU share per cloudlet window: "
        + ", ".join(f(w["server_cpu_share"], 2) for w in data["windows"] if w["side"] == "cloudlet")
        + "):",
        "",
        "| route | cloudlet p50 ms | p99 ms | req/s | errors | peer p50 ms | p99 ms | req/s | errors "
        "| p50 ratio | p99 ratio | req/s ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in ROUTES:
        c, p, r = data["cloudlet"][key], data["peer"][key], data["ratios"][key]
        lines.append(
            f"| {LABELS[key]} | {f(c['p50_ms'], 1)} | {f(c['p99_ms'], 1)} | {f(c['throughput_rps'], 0)} | "
            f"{c['errors']} | {f(p['p50_ms'], 1)} | {f(p['p99_ms'], 1)} | {f(p['throughput_rps'], 0)} | "
            f"{p['errors']} | {f(r['p50'])} | {f(r['p99'])} | {f(r['throughput'])} |"
        )
    health = data["cloudlet"]["healthz"]
    drains = [w["drain"] for w in data["windows"] if "drain" in w]
    lines += [
        "",
        f"cloudlet `/healthz` worst latency under the load: {f(health['max_ms'], 1)} ms. Jobs: "
        + "; ".join(
            f"{d['completed']}/{d['accepted']} completed {f(d['after_s'], 1)} s after the window"
            for d in drains
        )
        + ".",
        "",
        f"Goal (compute show p99 ≤ {goal['limit_ms']:g} ms at {plan['readers']} clients, 0 errors, every "
        f"job completed, each read route ≥ {goal.get('throughput_ratio_floor', 0):g}× the peer's req/s): "
        f"{f(goal['compute_show_p99_ms'], 1)} ms, {goal['errors']} errors, lowest read ratio "
        f"{f(goal.get('lowest_read_throughput_ratio'))} — "
        f"{'holds' if goal['holds'] else 'does NOT hold'}.",
    ]
    return lines


def workers_label(run: dict[str, Any]) -> str:
    if run["workers"] != DEFAULT_WORKERS:
        return f"`--workers {run['workers']}`"
    return f"the default command (no `--workers`: {run.get('workers_started', '?')} workers started)"


def _workers_started(log_path: Path) -> int | None:
    """How many workers the server said it started ("cloudlet ...: N workers on ..."); 1 when it
    served in-process (no such line)."""
    match = re.search(r": (\d+) workers on ", log_path.read_text(errors="replace"))
    return int(match.group(1)) if match else 1


def report(data: dict[str, Any]) -> str:
    f = _results.fmt
    rows: list[str] = []
    for one in data["runs"]:
        rows.append(workers_label(one))
        head = f"{'route':<16} {'p50':>8} {'p99':>8} {'req/s':>7} {'err':>5} | "
        rows.append(head + f"{'peer p50':>8} {'p99':>8} {'req/s':>7}")
        for key in ROUTES:
            c, p = one["cloudlet"][key], one["peer"][key]
            rows.append(
                f"{key:<16} {f(c['p50_ms'], 1):>8} {f(c['p99_ms'], 1):>8} {f(c['throughput_rps'], 0):>7} "
                f"{c['errors']:>5} | {f(p['p50_ms'], 1):>8} {f(p['p99_ms'], 1):>8} "
                f"{f(p['throughput_rps'], 0):>7}"
            )
        for window in one["windows"]:
            rows.append(f"window {window}")
        goal = one["goal"]
        rows.append(
            f"goal compute show p99 <= {goal['limit_ms']:g} ms, 0 errors, jobs done: "
            f"{f(goal['compute_show_p99_ms'], 1)} ms, {goal['errors']} errors -> "
            f"{'holds' if goal['holds'] else 'does NOT hold'}"
        )
    return "\n".join(rows)
