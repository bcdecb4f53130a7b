"""The dispatch benchmark's view of cloudlet: its REST API (``Api``), its SQLite store read
directly for server-side timestamps (``Db``), and CPU/RSS readings of the server and agents."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench._server import ServerProcess, node_processes, read_vm_rss_kib

SIZE = "Standard_DS3_v2"


def _ns(seconds: list[float]) -> list[int]:
    return [int(s * 1e9) for s in seconds]


def _first_float(text: str) -> float | None:
    for line in text.splitlines():
        try:
            return float(line.strip())
        except ValueError:
            continue
    return None


def _agent_rss(home: Path) -> dict[str, Any]:
    agents = {pid: info["node"] for pid, info in node_processes(home).items() if info["kind"] == "agent"}
    per = {node: read_vm_rss_kib(pid) for pid, node in agents.items()}
    values = [v for v in per.values() if v]
    return {"per_node_kib": per, "max_kib": max(values) if values else None, "count": len(values)}


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_cpu_seconds(server: ServerProcess) -> float | None:
    """CPU seconds of the server's processes (its workers' included)."""
    times = [_cpu_seconds(pid) for pid in server.pids()]
    return None if times[0] is None else sum(t or 0.0 for t in times)


def _server_cpu_share(server: ServerProcess, window_s: float) -> float | None:
    """Share of one CPU the server's processes used over WINDOW_S (idle clients: its own loops)."""
    before = _server_cpu_seconds(server)
    time.sleep(window_s)
    after = _server_cpu_seconds(server)
    if before is None or after is None:
        return None
    return round((after - before) / window_s, 4)


def _cpu_snapshot(server: ServerProcess, home: Path) -> dict[str, float]:
    """CPU seconds used so far by the server, this home's agents (their own time, not their runs')
    and this benchmark process (the client)."""
    agents = [pid for pid, info in node_processes(home).items() if info["kind"] == "agent"]
    times = os.times()
    return {
        "server": _server_cpu_seconds(server) or 0.0,
        "agents": sum(_cpu_seconds(pid) or 0.0 for pid in agents),
        "client": times.user + times.system,
    }


def _cpu_per_job(before: dict[str, float], after: dict[str, float], jobs: int) -> dict[str, float]:
    """CPU milliseconds per job spent by each party between two snapshots."""
    return {key: round((after[key] - before[key]) * 1000 / max(jobs, 1), 2) for key in before}


class Db:
    """Read-only view of the server's SQLite file (the server's own timestamps, no API load)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10, check_same_thread=False)

    def close(self) -> None:
        self.conn.close()

    def count(self, prefix: str, statuses: tuple[str, ...]) -> int:
        marks = ",".join("?" * len(statuses))
        row = self.conn.execute(
            f"SELECT count(*) FROM jobs WHERE name LIKE ? AND status IN ({marks})",
            (prefix + "%", *statuses),
        ).fetchone()
        return int(row[0])

    def job_times(self, prefix: str) -> dict[str, dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT j.name, j.submitted_at, j.ended_at, j.status, r.assigned_at, r.node_id, r.id "
            "FROM jobs j LEFT JOIN job_runs r ON r.job_id = j.id AND r.attempt = j.attempt "
            "WHERE j.name LIKE ?",
            (prefix + "%",),
        ).fetchall()
        return {
            name: {
                "submitted_at": sub,
                "ended_at": end,
                "status": st,
                "assigned_at": asg,
                "node": node,
                "run": run,
            }
            for name, sub, end, st, asg, node, run in rows
        }

    def wait_ended(self, name: str, timeout: float, interval: float = 0.01) -> str | None:
        """Poll the job's status in the file (no request to the server) until it has ended."""
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            row = self.conn.execute("SELECT status FROM jobs WHERE name = ?", (name,)).fetchone()
            status = row[0] if row else None
            if status in ("Completed", "Failed", "Canceled"):
                return str(status)
            time.sleep(interval)
        return status

    def node(self, node_id: str) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT created_at, registered_at, idle_since, ended_at FROM nodes WHERE id = ?", (node_id,)
        ).fetchone()
        keys = ("created_at", "registered_at", "idle_since", "ended_at")
        return dict(zip(keys, row, strict=True)) if row else {}


class Api:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.ws = server.ws_path
        self.client = httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=30)

    def new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.endpoint, headers=self.server.headers(), timeout=30)

    def close(self) -> None:
        self.client.close()

    def create_cluster(self, name: str, min_n: int, max_n: int, idle_s: int) -> dict[str, Any]:
        body = {
            "name": name,
            "type": "amlcompute",
            "size": SIZE,
            "min_instances": min_n,
            "max_instances": max_n,
            "idle_time_before_scale_down": idle_s,
        }
        resp = self.client.put(f"{self.ws}/computes/{name}", json=body)
        if resp.status_code not in (200, 201):
            raise RuntimeError(f"PUT compute {name} -> {resp.status_code}: {resp.text}")
        return self._wait_operation(resp.headers.get("Operation-Location"))

    def delete_cluster(self, name: str) -> dict[str, Any]:
        resp = self.client.delete(f"{self.ws}/computes/{name}")
        if resp.status_code not in (200, 202, 204):
            return {"status": f"HTTP {resp.status_code}"}
        return self._wait_operation(resp.headers.get("Operation-Location"))

    def _wait_operation(self, url: str | None, timeout: float = 60) -> dict[str, Any]:
        if not url:
            return {}
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            body = self.client.get(url).json()
            if body.get("status") != "InProgress":
                return {"status": body.get("status"), "error": body.get("error")}
            time.sleep(0.1)
        return {"status": "InProgress", "note": f"still in progress after {timeout}s"}

    def nodes(self, cluster: str) -> list[dict[str, Any]]:
        resp = self.client.get(f"{self.ws}/computes/{cluster}/nodes")
        resp.raise_for_status()
        nodes: list[dict[str, Any]] = resp.json()["nodes"]
        return nodes

    def wait_idle_nodes(self, cluster: str, count: int, timeout: float = 90) -> float:
        t0 = time.monotonic()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if sum(n["state"] == "idle" for n in self.nodes(cluster)) >= count:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError(f"{cluster}: {count} idle nodes not reached in {timeout}s: {self.nodes(cluster)}")

    def submit(self, name: str, command: str, cluster: str, client: httpx.Client | None = None) -> float:
        """PUT the job; returns the PUT's duration in seconds."""
        t0 = time.perf_counter()
        resp = (client or self.client).put(
            f"{self.ws}/jobs/{name}", json={"command": command, "compute": f"azureml:{cluster}"}
        )
        took = time.perf_counter() - t0
        if resp.status_code not in (200, 201):
            raise RuntimeError(f"PUT job {name} -> {resp.status_code}: {resp.text}")
        return took

    def wait_log(self, name: str, timeout: float, interval: float = 0.02) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = str(self.client.get(f"{self.ws}/jobs/{name}/logs").json().get("data") or "")
            if data.strip():
                return data
            time.sleep(interval)
        return ""

    def log(self, name: str) -> str:
        return str(self.client.get(f"{self.ws}/jobs/{name}/logs").json().get("data") or "")

    def cancel(self, name: str, client: httpx.Client | None = None) -> int:
        return (client or self.client).post(f"{self.ws}/jobs/{name}/cancel").status_code


def _parallel(names: list[str], threads: int, make: Callable[[], httpx.Client], fn: Any) -> list[Any]:
    """Call fn(client, name) for every name with THREADS workers, one keep-alive client each."""
    local = threading.local()
    clients: list[httpx.Client] = []
    lock = threading.Lock()

    def work(name: str) -> Any:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = make()
            with lock:
                clients.append(client)
        return fn(client, name)

    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(work, names))
    finally:
        for client in clients:
            client.close()
