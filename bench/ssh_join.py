"""SSH hosts: host -> node idle (join) and first job, beside a Ray worker joining a Ray head over the
same network namespaces; and a cluster's scale 0 -> 16 nodes across 4 SSH hosts.

Hosts are tests/netns_hosts.py's (4 namespaces with their own sshd on 10.77.1.0/24); the cloudlet
server listens on the bridge (10.77.1.1) and its agents dial it over TLS. Times are wall-clock from
the request (``min_instances`` raised) until the API lists the node idle (join), and from a job's
submission until it is Completed on an idle node (first job). The first node's join includes the
host's bootstrap (connect, probe, agent copied over SFTP); the later ones do not (the goal: <= 1 s).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from tests import netns_hosts

from bench import _results
from bench._server import REPO_ROOT, start_cloudlet
from bench.dispatch import ray_python

NAME = "ssh_join"
SIZE = "Standard_DS1_v2"  # 1 vCPU, 3.5 GB: with overcommit 4, 8 fit a 2-core namespace host
GOAL_JOIN_S = 1.0
RAY_MEASURED_S = 3.1


def _wait(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def _cloudlet(hosts: list[netns_hosts.SshHost], tmp: Path, reps: int, scale_to: int) -> dict[str, Any]:
    server = start_cloudlet(tmp / "home", host=netns_hosts.BRIDGE_ADDRESS)
    ws = f"/api/v1/subscriptions/{server.subscription_id}/resourceGroups/default/workspaces/default"
    api = httpx.Client(
        base_url=server.endpoint, headers={"Authorization": f"Bearer {server.api_key}"}, timeout=30
    )
    out: dict[str, Any] = {}
    try:
        config = {"hosts": [h.as_config() for h in hosts], "overcommit": 4}
        assert (
            api.put("/api/v1/locations/bench-ssh", json={"provider": "ssh", "config": config}).status_code
            == 201
        )

        def cluster(name: str, min_n: int, max_n: int) -> None:
            body = {
                "type": "amlcompute",
                "size": SIZE,
                "location": "bench-ssh",
                "min_instances": min_n,
                "max_instances": max_n,
                "idle_time_before_scale_down": 300,
            }
            r = api.put(f"{ws}/computes/{name}", json=body)
            assert r.status_code in (200, 201), r.text
            op = r.headers.get("Operation-Location")
            if op:
                _wait(lambda: api.get(op).json()["status"] != "InProgress", 120, "the compute operation")

        def idle(name: str) -> list[dict[str, Any]]:
            return [
                n for n in api.get(f"{ws}/computes/{name}/nodes").json()["nodes"] if n["nodeState"] == "idle"
            ]

        joins: list[float] = []
        cluster("join", 0, reps + 1)
        for k in range(1, reps + 2):
            began = time.monotonic()
            cluster("join", k, reps + 1)
            _wait(lambda k=k: len(idle("join")) >= k, 180, f"{k} idle nodes")
            joins.append(time.monotonic() - began)
        out["first_join_s"] = joins[0]  # includes the hosts' bootstrap
        out["join_s"] = joins[1:]
        firsts = []
        for i in range(reps):
            began = time.monotonic()
            name = f"bench-ssh-job-{i}"
            r = api.put(f"{ws}/jobs/{name}", json={"command": "true", "compute": "azureml:join"})
            assert r.status_code == 201, r.text
            _wait(lambda n=name: api.get(f"{ws}/jobs/{n}").json()["status"] == "Completed", 120, name)
            firsts.append(time.monotonic() - began)
        out["first_job_s"] = firsts
        api.delete(f"{ws}/computes/join")
        _wait(
            lambda: not [h for h in hosts if netns_hosts.host_processes(h.user, "cloudlet.agent")],
            120,
            "agents gone",
        )
        began = time.monotonic()
        cluster("scale", scale_to, scale_to)
        _wait(lambda: len(idle("scale")) >= scale_to, 600, f"{scale_to} idle nodes")
        out["scale_0_to_n_s"] = time.monotonic() - began
        out["scale_n"] = scale_to
        per_host: dict[str, int] = {}
        for n in idle("scale"):
            per_host[n["privateIpAddress"]] = per_host.get(n["privateIpAddress"], 0) + 1
        out["scale_per_host"] = per_host
        api.delete(f"{ws}/computes/scale")
    finally:
        api.close()
        server.stop()
        netns_hosts.kill_host_processes([h.user for h in hosts])
    return out


def _ray(hosts: list[netns_hosts.SshHost], tmp: Path, reps: int) -> dict[str, Any]:
    python, how = ray_python()
    if python is None:
        return {"skipped": how}
    out_path = tmp / "ray.json"
    cmd = [
        str(python),
        str(Path(__file__).with_name("_ray_join_peer.py")),
        str(out_path),
        f"--head-ip={netns_hosts.BRIDGE_ADDRESS}",
        f"--namespace={hosts[-1].namespace}",
        f"--worker-ip={hosts[-1].address}",
        f"--reps={reps}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        done = subprocess.run(cmd, env=env, timeout=900, capture_output=True)
        stderr, rc = done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stderr, rc = exc.stderr or b"", None
    data: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {"skipped": "no output"}
    data["interpreter"] = how
    if rc != 0 or "error" in data or "skipped" in data:
        data["peer_exit"] = rc
        data["peer_stderr_tail"] = stderr.decode(errors="replace").splitlines()[-20:]
    return data


def run(quick: bool = False) -> dict[str, Any]:
    reps = 2 if quick else 5
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {"reps": reps, "hosts": 4, "scale_to": 16, "size": SIZE}
    root = Path(tempfile.mkdtemp(prefix="clssh-bench-", dir="/var/tmp"))
    root.chmod(0o755)
    try:
        with netns_hosts.ssh_hosts(4, root) as hosts:
            data["cloudlet"] = _cloudlet(hosts, root, reps, 16)
            data["loadavg_before_ray"] = _results.loadavg()
            data["ray"] = _ray(hosts, root, reps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    c, r = data["cloudlet"], data["ray"]
    join = statistics.median(c["join_s"])
    data["summary"] = {
        "cloudlet_join_median_s": join,
        "cloudlet_first_join_s": c["first_join_s"],
        "cloudlet_first_job_median_s": statistics.median(c["first_job_s"]),
        "ray_join_median_s": statistics.median(r["join_s"]) if r.get("join_s") else None,
        "ray_first_task_median_s": statistics.median(r["first_task_s"]) if r.get("first_task_s") else None,
        "scale_0_to_16_s": c["scale_0_to_n_s"],
        "goal_join_s": GOAL_JOIN_S,
        "ray_measured_earlier_s": RAY_MEASURED_S,
    }
    s = data["summary"]
    s["ray_first_task_start_median_s"] = (
        statistics.median(r["first_task_start_s"]) if r.get("first_task_start_s") else None
    )
    if s["ray_join_median_s"]:
        s["join_ratio_cloudlet_over_ray"] = join / s["ray_join_median_s"]
    if s["ray_first_task_median_s"]:
        s["first_job_ratio_cloudlet_over_ray"] = (
            s["cloudlet_first_job_median_s"] / s["ray_first_task_median_s"]
        )
    if r.get("error"):
        s["ray_error"] = r["error"]
    return data


def markdown(data: dict[str, Any]) -> str:
    s = data["summary"]

    def f(v: Any) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    rows = [
        ("SSH node join (host bootstrapped), median s", s["cloudlet_join_median_s"]),
        ("SSH first node join (bootstrap included), s", s["cloudlet_first_join_s"]),
        ("SSH first job on an idle node, median s", s["cloudlet_first_job_median_s"]),
        ("Ray worker join, median s", s["ray_join_median_s"]),
        ("Ray first task on the new worker (submit -> result), median s", s["ray_first_task_median_s"]),
        ("cloudlet join / Ray join (same run)", s.get("join_ratio_cloudlet_over_ray")),
        ("cloudlet first job / Ray first task (same run)", s.get("first_job_ratio_cloudlet_over_ray")),
        ("scale 0 -> 16 nodes on 4 hosts, s", s["scale_0_to_16_s"]),
    ]
    lines = [f"## {NAME} — {data.get('timestamp', '')}", "", "| measure | value |", "|---|---:|"]
    lines += [f"| {k} | {f(v)} |" for k, v in rows]
    lines += [
        "",
        f"Goal: SSH node join <= {GOAL_JOIN_S:g} s (Ray measured {RAY_MEASURED_S:g} s earlier).",
        "",
    ]
    if s.get("ray_error"):
        lines += [f"Ray peer failed: {s['ray_error']}", ""]
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    return json.dumps(data["summary"], indent=1)
