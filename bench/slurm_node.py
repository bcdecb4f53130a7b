"""``slurm_node``: cloudlet nodes as Slurm placeholder allocations, beside Slurm itself.

One run, one real Slurm (``tests/slurm_hosts.py``: munged, slurmctld and two slurmd, each slurm
daemon a host in its own network namespace; the server listens on their bridge):

* **cold**: a cluster at 0 nodes on the Slurm location gets a ``date +%s.%N`` job: submit ->
  the job's own timestamp, through ``sbatch`` of the placeholder, the agent's start and
  registration, and the dispatch. Peer: ``sbatch --wrap 'date +%s.%N'`` of the job itself on
  the same Slurm (submit -> its timestamp, read from its output file).
* **warm**: a job on an already-running Slurm node vs the same job on an already-running local
  node (the local provider without cgroups: the test Slurm confines nothing either), one at a
  time: submit -> the job's timestamp. Goal: as fast (ratio ~1): once the allocation runs, Slurm
  is out of the job's path.

Slurm's own scheduling interval is part of both cold numbers (the placeholder's and the peer's):
``SchedulerParameters`` as the tests set them (``sched_interval=1``, ``batch_sched_delay=0``).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from tests import slurm_hosts

from bench import _results
from bench._server import REPO_ROOT, ServerProcess, kill_node_processes, start_cloudlet
from bench._stats import ratio, summarize_ns

NAME = "slurm_node"
SIZE = "Standard_DS1_v2"
LOCATION = "hpc"
PAYLOAD = "date +%s.%N"


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


class Api:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.http = httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=30)
        self.ws = server.ws_path

    def operation(self, response: httpx.Response) -> None:
        if response.status_code not in (200, 201, 202):
            raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")
        url = response.headers.get("Operation-Location")
        if url:
            _wait(lambda: self.http.get(url).json()["status"] != "InProgress", 60, "the operation")

    def cluster(self, name: str, location: str, min_nodes: int, idle_s: int = 600) -> None:
        body = {
            "type": "amlcompute",
            "size": SIZE,
            "location": location,
            "min_instances": min_nodes,
            "max_instances": 1,
            "idle_time_before_scale_down": idle_s,
        }
        self.operation(self.http.put(f"{self.ws}/computes/{name}", json=body))

    def delete(self, name: str) -> None:
        self.operation(self.http.delete(f"{self.ws}/computes/{name}"))

    def nodes(self, name: str) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self.http.get(f"{self.ws}/computes/{name}/nodes").json()["nodes"]
        return nodes

    def timed_job(self, name: str, compute: str, timeout: float = 120) -> float:
        """Seconds from submit to the job's own timestamp."""
        t0 = time.time()
        made = self.http.put(
            f"{self.ws}/jobs/{name}", json={"command": PAYLOAD, "compute": f"azureml:{compute}"}
        )
        if made.status_code != 201:
            raise RuntimeError(made.text)
        done = _wait(
            lambda: (
                (j := self.http.get(f"{self.ws}/jobs/{name}").json())["status"]
                in ("Completed", "Failed", "Canceled")
                and j
            ),
            timeout,
            f"job {name}",
        )
        if done["status"] != "Completed":
            raise RuntimeError(f"job {name} {done['status']}: {done}")
        text = self.http.get(f"{self.ws}/jobs/{name}/logs").json()["data"]
        return float(text.split()[0]) - t0


def _sbatch_job(hosts: slurm_hosts.SlurmHosts, out: Path) -> float:
    t0 = time.time()
    argv = ["sbatch", "--parsable", "-p", slurm_hosts.URGENT_PARTITION, "-N1", "-n1", "--export=NONE"]
    hosts.client([*argv, f"--output={out}", f"--wrap={PAYLOAD}"])

    def stamp() -> float | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return float(out.read_text().split()[0])
        return None

    return float(_wait(stamp, 60, "the sbatch job's timestamp")) - t0


def _ns(seconds: list[float]) -> list[int]:
    return [int(s * 1e9) for s in seconds]


@contextlib.contextmanager
def _cluster_and_server(tmp: Path) -> Iterator[tuple[slurm_hosts.SlurmHosts, ServerProcess]]:
    with slurm_hosts.slurm_hosts(tmp / "slurm") as hosts:
        server = start_cloudlet(tmp / "home", host=slurm_hosts.BRIDGE_ADDRESS)
        try:
            yield hosts, server
        finally:
            server.stop()
            kill_node_processes(tmp / "home")


def run(quick: bool) -> dict[str, Any]:
    data = _results.envelope(NAME, REPO_ROOT)
    lacking = slurm_hosts.missing()
    if lacking:
        data["skipped"] = f"needs {', '.join(lacking)} (scripts/setup.sh installs Slurm as root)"
        return data
    cold_n, warm_n = (3, 20) if quick else (6, 60)
    with (
        tempfile.TemporaryDirectory(prefix="bench-slurm-") as raw,
        _cluster_and_server(Path(raw)) as (hosts, server),
    ):
        api = Api(server)
        config = {
            "partition": slurm_hosts.URGENT_PARTITION,
            "slurm_conf": str(hosts.conf),
            "bin_dir": "/usr/bin",
        }
        made = api.http.put(f"/api/v1/locations/{LOCATION}", json={"provider": "slurm", "config": config})
        if made.status_code not in (200, 201):
            raise RuntimeError(made.text)
        cold, peer = [], []
        for i in range(cold_n):
            api.cluster(f"cold-{i}", LOCATION, 0)
            cold.append(api.timed_job(f"cold-job-{i}", f"cold-{i}"))
            api.delete(f"cold-{i}")
            peer.append(_sbatch_job(hosts, Path(raw) / f"sbatch-{i}.out"))
        api.cluster("warm-slurm", LOCATION, 1)
        # The local peer unconfined too: the test cluster's slurmd confine nothing (task/none), and a
        # local node's cgroup CPU quota (1 vCPU here) would slow its side on a loaded machine.
        plain = {"provider": "local", "config": {"cgroups": False}}
        made = api.http.put("/api/v1/locations/plain", json=plain)
        if made.status_code not in (200, 201):
            raise RuntimeError(made.text)
        api.cluster("warm-local", "plain", 1)
        for name in ("warm-slurm", "warm-local"):
            _wait(lambda n=name: [x for x in api.nodes(n) if x["state"] == "idle"], 120, f"{name} idle")
        warm: dict[str, list[float]] = {"warm-slurm": [], "warm-local": []}
        for i in range(-3, warm_n):  # 3 warm-up jobs each
            for name in warm:
                took = api.timed_job(f"{name}-{i + 3}", name)
                if i >= 0:
                    warm[name].append(took)
        addresses = sorted({n["privateIpAddress"] for n in api.nodes("warm-slurm")})
        data["loadavg_end"] = _results.loadavg()
    data["series"] = {
        "cloudlet.slurm_cold": summarize_ns(_ns(cold)),
        "peer.sbatch_job": summarize_ns(_ns(peer)),
        "cloudlet.slurm_warm": summarize_ns(_ns(warm["warm-slurm"])),
        "cloudlet.local_warm": summarize_ns(_ns(warm["warm-local"])),
    }
    s = data["series"]
    data["ratios"] = {
        "slurm_cold / sbatch_job p50": ratio(
            s["cloudlet.slurm_cold"]["p50_ms"], s["peer.sbatch_job"]["p50_ms"]
        ),
        "slurm_warm / local_warm p50": ratio(
            s["cloudlet.slurm_warm"]["p50_ms"], s["cloudlet.local_warm"]["p50_ms"]
        ),
        "slurm_warm / local_warm p99": ratio(
            s["cloudlet.slurm_warm"]["p99_ms"], s["cloudlet.local_warm"]["p99_ms"]
        ),
    }
    data["plan"] = {"cold": cold_n, "warm": warm_n, "size": SIZE, "slurm_node_addresses": addresses}
    return data


def markdown(data: dict[str, Any]) -> str:
    head = f"## {NAME} — {data['timestamp']}\n\n"
    if "skipped" in data:
        return head + f"Skipped: {data['skipped']}.\n"
    m, plan = data["machine"], data["plan"]
    lines = [
        head.rstrip("\n"),
        "",
        f"Machine: {m['nproc']} usable CPUs, Python {m['python']}, {m['platform']}; load average "
        f"{data['loadavg_start']} at start, {data.get('loadavg_end')} at end; "
        f"git {data['git'].get('commit')}.",
        "",
        f"Slurm 22.05 in 3 network namespaces (slurmctld, 2 slurmd × 2 CPUs), `sched_interval=1`. Cold: "
        f"{plan['cold']}× a fresh cluster at 0 nodes ({plan['size']}) gets one `{PAYLOAD}` job (submit -> "
        "its timestamp: sbatch of the placeholder, agent start, registration, dispatch) beside `sbatch "
        f"--wrap '{PAYLOAD}'` of the job itself. Warm: {plan['warm']} jobs one at a time on an "
        f"already-running Slurm node (agents at {', '.join(plan['slurm_node_addresses'])}) and on a "
        "local node without cgroups (the test Slurm confines nothing either).",
        "",
        "| series | n | p50 ms | p99 ms | mean ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in data["series"].items():
        lines.append(
            f"| {name} | {s['count']} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['mean_ms']:.1f} |"
        )
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in data["ratios"].items()]
    lines += ["", "Goal: a job on an already-running Slurm node as fast as on a local node (ratio ≈ 1)."]
    return "\n".join(lines) + "\n"


def report(data: dict[str, Any]) -> str:
    if "skipped" in data:
        return f"{NAME}: skipped ({data['skipped']})"
    return "\n".join(f"{NAME}: {k} = {v:.2f}" for k, v in data["ratios"].items())
