"""api_latency: latency and throughput of ``GET {ws}/computes/{name}`` (compute show) and
``GET {ws}/jobs/{name}`` (job show) against their peer.

Setup: a real cloudlet server (embedded SQLite, temp home), one compute cluster and one compute
instance created through the API (PUT, then the operation is polled to completion), and one job
run to completion on the cluster (so job show renders a finished attempt). The peer is a
minimal uvicorn + FastAPI app in its own process (``bench/_peer_app.py``) serving the very same
document bytes behind a bearer check; cloudlet's ``/healthz`` is a second reference.

Series (each measured for every target, interleaved in rounds so that background noise on the
machine lands on all of them alike):
  * sequential: one keep-alive connection, one request at a time;
  * concurrent: 50 keep-alive connections, a fixed total count -> throughput and latency.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._loadgen import RunResult, run_load
from bench._server import (
    REPO_ROOT,
    ServerProcess,
    kill_node_processes,
    read_vm_rss_kib,
    start_cloudlet,
    start_peer,
)
from bench._stats import ratio, summarize_ns

NAME = "api_latency"
BAR_P50_MS = 5.0
CLUSTER = "bench-cluster"
INSTANCE = "bench-ci"
JOB = "bench-job"
CLUSTER_SPEC: dict[str, Any] = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 0,
    "max_instances": 2,
    "idle_time_before_scale_down": 120,
    "tier": "dedicated",
}
INSTANCE_SPEC: dict[str, Any] = {"type": "computeinstance", "size": "Standard_DS3_v2"}


@dataclass(frozen=True)
class Plan:
    warmup: int
    seq_rounds: int
    seq_per_round: int
    concurrency: int
    conc_rounds: int
    conc_per_round: int
    run_time_limit_s: float

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if quick:
            return cls(100, 2, 250, 50, 2, 500, 30.0)
        return cls(300, 4, 600, 50, 4, 1250, 90.0)


@dataclass(frozen=True)
class Target:
    key: str  # e.g. "cloudlet.show_cluster"
    url: str
    headers: dict[str, str]


def _wait_operation(client: httpx.Client, url: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = client.get(url).json()
        if body.get("status") != "InProgress":
            return body
        time.sleep(0.1)
    return {**body, "bench_note": f"still InProgress after {timeout}s"}


def _create_compute(client: httpx.Client, ws: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    resp = client.put(f"{ws}/computes/{name}", json={"name": name, **spec})
    if resp.status_code not in (200, 201):
        raise RuntimeError(f"PUT compute {name} -> {resp.status_code}: {resp.text}")
    op_url = resp.headers.get("Operation-Location")
    op = _wait_operation(client, op_url) if op_url else {}
    return {"http_status": resp.status_code, "operation_status": op.get("status"), "error": op.get("error")}


def _setup(cloudlet: ServerProcess) -> tuple[dict[str, Any], dict[str, str]]:
    """Create the cluster and the instance; return setup facts and the served document per name."""
    facts: dict[str, Any] = {}
    docs: dict[str, str] = {}
    with httpx.Client(base_url=cloudlet.endpoint, headers=cloudlet.headers(), timeout=30) as client:
        for name, spec in ((CLUSTER, CLUSTER_SPEC), (INSTANCE, INSTANCE_SPEC)):
            facts[name] = _create_compute(client, cloudlet.ws_path, name, spec)
        for name in (CLUSTER, INSTANCE):
            resp = client.get(f"{cloudlet.ws_path}/computes/{name}")
            resp.raise_for_status()
            docs[name] = resp.content.decode()
            doc = resp.json()
            facts[name].update(
                {
                    "document_bytes": len(resp.content),
                    "provisioning_state": doc.get("provisioning_state"),
                    "state": doc.get("state") or doc.get("allocation_state"),
                }
            )
        facts[JOB] = _run_job(client, cloudlet.ws_path)
        resp = client.get(f"{cloudlet.ws_path}/jobs/{JOB}")
        resp.raise_for_status()
        docs[f"job:{JOB}"] = resp.content.decode()
        facts[JOB]["document_bytes"] = len(resp.content)
    return facts, docs


def _run_job(client: httpx.Client, ws: str, timeout: float = 120) -> dict[str, Any]:
    resp = client.put(f"{ws}/jobs/{JOB}", json={"command": "echo ready", "compute": f"azureml:{CLUSTER}"})
    resp.raise_for_status()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"{ws}/jobs/{JOB}").json().get("status")
        if status in ("Completed", "Failed", "Canceled"):
            return {"status": status}
        time.sleep(0.2)
    raise RuntimeError(f"job {JOB} did not finish in {timeout} s")


def _check_alive(servers: list[ServerProcess]) -> None:
    for server in servers:
        code = server.process.poll()
        if code is not None:
            raise RuntimeError(
                f"server {server.endpoint} (pid {server.pid}) exited with {code} mid-benchmark; "
                f"log tail:\n{_log_tail(server)}"
            )


def _log_tail(server: ServerProcess, lines: int = 40) -> str:
    try:
        return "\n".join(server.log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def _measure(
    targets: list[Target],
    rounds: int,
    per_round: int,
    concurrency: int,
    limit_s: float,
    servers: list[ServerProcess],
) -> dict[str, RunResult]:
    """Run every target ROUNDS times, PER_ROUND requests each, rotating the order every round.

    A server that exits mid-way makes the whole benchmark fail: numbers from a dead server are not
    numbers."""
    merged = {t.key: RunResult() for t in targets}
    for round_no in range(rounds):
        shift = round_no % len(targets)
        for target in targets[shift:] + targets[:shift]:
            res = run_load(
                target.url, target.headers, total=per_round, concurrency=concurrency, time_limit_s=limit_s
            )
            _check_alive(servers)
            acc = merged[target.key]
            acc.latencies_ns.extend(res.latencies_ns)
            acc.wall_s += res.wall_s
            acc.bytes_received += res.bytes_received
            acc.timed_out = acc.timed_out or res.timed_out
            for sample in res.error_samples:
                acc.note_error(sample)
            acc.errors += max(0, res.errors - len(res.error_samples))
    return merged


def _summaries(results: dict[str, RunResult], with_throughput: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, res in results.items():
        summary = summarize_ns(res.latencies_ns, res.wall_s if with_throughput else None)
        summary.update({"errors": res.errors, "timed_out": res.timed_out})
        if res.error_samples:
            summary["error_samples"] = res.error_samples
        out[key] = summary
    return out


RATIO_PAIRS = (
    ("show_cluster", "cloudlet.show_cluster", "peer.show_cluster"),
    ("show_instance", "cloudlet.show_instance", "peer.show_instance"),
    ("show_job", "cloudlet.show_job", "peer.show_job"),
    ("healthz", "cloudlet.healthz", "peer.healthz"),
    ("show_cluster_vs_own_healthz", "cloudlet.show_cluster", "cloudlet.healthz"),
)


def _ratios(seq: dict[str, Any], conc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, num, den in RATIO_PAIRS:
        out[label] = {
            "numerator": num,
            "denominator": den,
            "sequential_p50": ratio(seq[num]["p50_ms"], seq[den]["p50_ms"]),
            "sequential_p99": ratio(seq[num]["p99_ms"], seq[den]["p99_ms"]),
            "concurrent_p50": ratio(conc[num]["p50_ms"], conc[den]["p50_ms"]),
            "concurrent_p99": ratio(conc[num]["p99_ms"], conc[den]["p99_ms"]),
            # throughput: how much of the peer's rate cloudlet reaches (1.0 = parity, lower = slower)
            "concurrent_throughput": ratio(conc[num]["throughput_rps"], conc[den]["throughput_rps"]),
        }
    return out


def _rss(server: ServerProcess) -> dict[str, int | None]:
    out: dict[str, int | None] = {"vm_rss_kib": read_vm_rss_kib(server.pid), "vm_hwm_kib": None}
    try:
        for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["vm_hwm_kib"] = int(line.split()[1])
    except OSError:
        pass
    return out


def run(quick: bool = False) -> dict[str, Any]:
    plan = Plan.make(quick)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = plan.__dict__ | {"quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-"))
    servers: list[ServerProcess] = []
    try:
        cloudlet = start_cloudlet(tmp / "home")
        servers.append(cloudlet)
        facts, docs = _setup(cloudlet)
        data["setup"] = facts
        bodies = tmp / "peer-bodies.json"
        bodies.write_text(json.dumps(docs))
        peer = start_peer(bodies, cloudlet.api_key, tmp)
        servers.append(peer)
        data["rss_after_setup"] = {"cloudlet": _rss(cloudlet), "peer": _rss(peer)}

        auth = cloudlet.headers()
        ws = cloudlet.ws_path
        targets = [
            Target("cloudlet.show_cluster", f"{cloudlet.endpoint}{ws}/computes/{CLUSTER}", auth),
            Target("cloudlet.show_instance", f"{cloudlet.endpoint}{ws}/computes/{INSTANCE}", auth),
            Target("cloudlet.show_job", f"{cloudlet.endpoint}{ws}/jobs/{JOB}", auth),
            Target("cloudlet.healthz", f"{cloudlet.endpoint}/healthz", {}),
            Target("peer.show_cluster", f"{peer.endpoint}{ws}/computes/{CLUSTER}", auth),
            Target("peer.show_instance", f"{peer.endpoint}{ws}/computes/{INSTANCE}", auth),
            Target("peer.show_job", f"{peer.endpoint}{ws}/jobs/{JOB}", auth),
            Target("peer.healthz", f"{peer.endpoint}/healthz", {}),
        ]
        # Same-size check: the peer must answer the same number of body bytes as cloudlet.
        for name in (CLUSTER, INSTANCE):
            peer_len = len(httpx.get(f"{peer.endpoint}{ws}/computes/{name}", headers=auth).content)
            facts[name]["peer_document_bytes"] = peer_len
        facts[JOB]["peer_document_bytes"] = len(
            httpx.get(f"{peer.endpoint}{ws}/jobs/{JOB}", headers=auth).content
        )

        _measure(targets, 1, plan.warmup, 1, plan.run_time_limit_s, servers)  # warm-up, discarded
        seq = _summaries(
            _measure(targets, plan.seq_rounds, plan.seq_per_round, 1, plan.run_time_limit_s, servers), False
        )
        _measure(
            targets, 1, plan.warmup, plan.concurrency, plan.run_time_limit_s, servers
        )  # warm-up, discarded
        conc = _summaries(
            _measure(
                targets,
                plan.conc_rounds,
                plan.conc_per_round,
                plan.concurrency,
                plan.run_time_limit_s,
                servers,
            ),
            True,
        )
        data["sequential"] = seq
        data["concurrent"] = conc | {"concurrency": plan.concurrency}
        data["ratios"] = _ratios(seq, conc)
        data["rss_after_run"] = {"cloudlet": _rss(cloudlet), "peer": _rss(peer)}
        p50 = seq["cloudlet.show_cluster"]["p50_ms"]
        data["bar"] = {
            "metric": "sequential compute show (cluster) p50",
            "limit_ms": BAR_P50_MS,
            "value_ms": p50,
            "holds": bool(p50 <= BAR_P50_MS),
            "instance_value_ms": seq["cloudlet.show_instance"]["p50_ms"],
            "instance_holds": bool(seq["cloudlet.show_instance"]["p50_ms"] <= BAR_P50_MS),
        }
        data["loadavg_end"] = _results.loadavg()
        return data
    finally:
        for server in reversed(servers):
            server.stop()
        data["leftover_node_processes_killed"] = kill_node_processes(tmp / "home")
        shutil.rmtree(tmp, ignore_errors=True)


SERIES_ORDER = (
    "cloudlet.show_cluster",
    "cloudlet.show_instance",
    "cloudlet.show_job",
    "cloudlet.healthz",
    "peer.show_cluster",
    "peer.show_instance",
    "peer.show_job",
    "peer.healthz",
)


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    seq, conc, ratios, bar = data["sequential"], data["concurrent"], data["ratios"], data["bar"]
    machine = data["machine"]
    rss = data["rss_after_run"]
    lines = [
        f"## api_latency — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}, {machine['platform']}; "
        f"load average {data.get('loadavg_start')} at start, {data.get('loadavg_end')} at end; "
        f"git {data.get('git', {}).get('commit', '?')}"
        f"{' (src dirty)' if data.get('git', {}).get('src_dirty') else ''}"
        f"{'; --quick' if data['plan']['quick'] else ''}.",
        "",
        f"Sequential: 1 keep-alive connection, {seq['cloudlet.show_cluster']['count']} requests per series. "
        f"Concurrent: {conc['concurrency']} keep-alive connections, "
        f"{conc['cloudlet.show_cluster']['count']} requests per series.",
        "",
        "| series | seq p50 ms | seq p99 ms | conc p50 ms | conc p99 ms | conc req/s | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in SERIES_ORDER:
        s, c = seq[key], conc[key]
        lines.append(
            f"| {key} | {f(s['p50_ms'], 3)} | {f(s['p99_ms'], 3)} | {f(c['p50_ms'], 3)} | "
            f"{f(c['p99_ms'], 3)} | {f(c['throughput_rps'], 0)} | {s['errors'] + c['errors']} |"
        )
    lines += [
        "",
        "Ratios (numerator / denominator; latency: lower is better, 1.0 = parity; "
        "throughput: cloudlet's share of the peer's rate, higher is better):",
        "",
        "| ratio | seq p50 | seq p99 | conc p50 | conc p99 | conc throughput |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in ratios.values():
        lines.append(
            f"| {r['numerator']} / {r['denominator']} | {f(r['sequential_p50'])} | "
            f"{f(r['sequential_p99'])} | {f(r['concurrent_p50'])} | {f(r['concurrent_p99'])} | "
            f"{f(r['concurrent_throughput'])} |"
        )
    verdict = "holds" if bar["holds"] else "does NOT hold"
    lines += [
        "",
        f"Bar (compute show p50 ≤ {bar['limit_ms']} ms, sequential, cluster): {f(bar['value_ms'], 3)} ms — "
        f"{verdict} (instance: {f(bar['instance_value_ms'], 3)} ms).",
        "",
        f"Server RSS after the run: cloudlet {f(rss['cloudlet']['vm_rss_kib'])} KiB "
        f"(peak {f(rss['cloudlet']['vm_hwm_kib'])} KiB), peer {f(rss['peer']['vm_rss_kib'])} KiB.",
        "",
        f"Document sizes: cluster {data['setup'][CLUSTER]['document_bytes']} B, "
        f"instance {data['setup'][INSTANCE]['document_bytes']} B, "
        f"job {data['setup'][JOB]['document_bytes']} B (peer serves the same bytes).",
    ]
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    """Short console summary."""
    f = _results.fmt
    seq, conc, bar = data["sequential"], data["concurrent"], data["bar"]
    rows = [f"{'series':<24} {'seq p50':>9} {'seq p99':>9} {'conc p50':>9} {'conc p99':>9} {'req/s':>8}"]
    for key in SERIES_ORDER:
        s, c = seq[key], conc[key]
        rows.append(
            f"{key:<24} {f(s['p50_ms'], 3):>9} {f(s['p99_ms'], 3):>9} {f(c['p50_ms'], 3):>9} "
            f"{f(c['p99_ms'], 3):>9} {f(c['throughput_rps'], 0):>8}"
        )
    for label, r in data["ratios"].items():
        rows.append(
            f"ratio {label}: seq p50 {f(r['sequential_p50'])}x p99 {f(r['sequential_p99'])}x; "
            f"conc p50 {f(r['concurrent_p50'])}x p99 {f(r['concurrent_p99'])}x "
            f"throughput {f(r['concurrent_throughput'])}x"
        )
    rows.append(
        f"bar compute show p50 <= {bar['limit_ms']} ms: {f(bar['value_ms'], 3)} ms -> "
        f"{'holds' if bar['holds'] else 'does NOT hold'}"
    )
    rss = data["rss_after_run"]["cloudlet"]
    rows.append(f"cloudlet RSS after run: {rss['vm_rss_kib']} KiB (peak {rss['vm_hwm_kib']} KiB)")
    return "\n".join(rows)
