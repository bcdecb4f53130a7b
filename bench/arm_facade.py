"""arm_facade: what the Azure ML facade (``api/arm/``) adds to a call — ``compute.get`` through the
ARM route beside the native route, both over the same TLS listener, in one run.

Setup: a real cloudlet server (embedded SQLite, temp home) and one compute cluster made through
the native API. Targets, measured on one keep-alive HTTPS connection each, one request at a time,
interleaved in rounds so background noise on the machine lands on all of them alike:
  * ``native``: ``GET /api/v1/…/computes/{name}`` with the API key;
  * ``arm``: ``GET /subscriptions/…/providers/Microsoft.MachineLearningServices/…/computes/{name}
    ?api-version=…`` with a JWT from ``/msi/token`` (what the SDK sends);
  * ``native_http``: the native route over plain HTTP (what TLS itself costs).
The facade's cost is ``arm`` − ``native`` (goal: ≤ 1 ms p50). When the azure-ai-ml venv exists
(``.cache/azure-ai-ml-1.35.2``, scripts/setup.sh), the SDK's own ``ml.compute.get`` is timed too.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._server import REPO_ROOT, ServerProcess, kill_node_processes, start_cloudlet
from bench._stats import ratio, summarize_ns

NAME = "arm_facade"
GOAL_MS = 1.0
CLUSTER = "bench-cluster"
SDK_PYTHON = REPO_ROOT / ".cache" / "azure-ai-ml-1.35.2" / "bin" / "python"
SDK_SCRIPT = """
import json, sys, time
from azure.ai.ml import MLClient
from azure.identity import DefaultAzureCredential
ml = MLClient.from_config(DefaultAzureCredential())
n = int(sys.argv[1])
for _ in range(20):
    ml.compute.get("{cluster}")
out = []
for _ in range(n):
    t = time.perf_counter_ns()
    ml.compute.get("{cluster}")
    out.append(time.perf_counter_ns() - t)
print("RESULT " + json.dumps(out))
"""


def _plan(quick: bool) -> dict[str, int]:
    return (
        {"warmup": 100, "rounds": 3, "per_round": 300, "sdk_calls": 100}
        if quick
        else {
            "warmup": 300,
            "rounds": 6,
            "per_round": 1000,
            "sdk_calls": 300,
        }
    )


def _setup(server: ServerProcess) -> str:
    """The cluster (created natively, its operation awaited) and a JWT for the server's ARM audience."""
    spec = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 2}
    with httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=30) as client:
        created = client.put(f"{server.ws_path}/computes/{CLUSTER}", json=spec)
        created.raise_for_status()
        deadline = time.monotonic() + 60
        while client.get(created.headers["Operation-Location"]).json()["status"] == "InProgress":
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster's create operation did not finish")
            time.sleep(0.1)
    return arm_token(server)


def arm_token(server: ServerProcess) -> str:
    """A JWT for the server's ARM audience from ``/msi/token``, as the SDK's credential gets one."""
    minted = httpx.get(
        server.https_endpoint + "/msi/token",
        params={"resource": server.https_endpoint, "api-version": "2019-08-01"},
        headers={"X-IDENTITY-HEADER": server.api_key},
        verify=ssl.create_default_context(cafile=server.ca_file),
    )
    minted.raise_for_status()
    return str(minted.json()["access_token"])


def _targets(server: ServerProcess, token: str) -> dict[str, tuple[str, str, dict[str, str]]]:
    native = f"{server.ws_path}/computes/{CLUSTER}"
    arm = (
        f"/subscriptions/{server.subscription_id}/resourceGroups/default/providers/"
        f"Microsoft.MachineLearningServices/workspaces/default/computes/{CLUSTER}?api-version=2024-10-01"
    )
    key = server.headers()
    return {
        "native": (server.https_endpoint, native, key),
        "arm": (server.https_endpoint, arm, {"Authorization": f"Bearer {token}"}),
        "native_http": (server.endpoint, native, key),
    }


def _measure(plan: dict[str, int], server: ServerProcess, token: str) -> dict[str, list[int]]:
    verify = ssl.create_default_context(cafile=server.ca_file)
    clients = {
        name: (httpx.Client(base_url=base, headers=headers, verify=verify, timeout=30), path)
        for name, (base, path, headers) in _targets(server, token).items()
    }
    samples: dict[str, list[int]] = {name: [] for name in clients}
    try:
        for client, path in clients.values():
            for _ in range(plan["warmup"]):
                client.get(path).raise_for_status()
        # Request by request in turn (not target by target): on a shared machine a burst of
        # background load then lands on every target alike.
        for _ in range(plan["rounds"] * plan["per_round"]):
            for name, (client, path) in clients.items():
                start = time.perf_counter_ns()
                response = client.get(path)
                samples[name].append(time.perf_counter_ns() - start)
                if response.status_code != 200:
                    raise RuntimeError(f"{name}: {response.status_code} {response.text[:300]}")
    finally:
        for client, _ in clients.values():
            client.close()
    return samples


def _sdk(server: ServerProcess, calls: int, home: Path) -> list[int] | None:
    if not SDK_PYTHON.exists():
        return None
    rows = run_sdk_script(server, home, SDK_SCRIPT.replace("{cluster}", CLUSTER), str(calls))
    return [int(v) for v in rows]


def run_sdk_script(server: ServerProcess, home: Path, script: str, *args: str) -> Any:
    """Run SCRIPT with the SDK's interpreter in ``home/sdk`` (a config.json for this server's
    default workspace, only ``cloudlet azureml env``'s variables); what it prints last as
    ``RESULT <json>``."""
    workdir = home / "sdk"
    workdir.mkdir()
    config = {
        "subscription_id": server.subscription_id,
        "resource_group": "default",
        "workspace_name": "default",
    }
    (workdir / "config.json").write_text(json.dumps(config))
    (workdir / "bench_sdk.py").write_text(script)
    proc = subprocess.run(
        [str(SDK_PYTHON), "bench_sdk.py", *args],
        cwd=workdir,
        env=sdk_env(server, workdir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            found = json.loads(line[7:])
    if found is None:
        raise RuntimeError(f"the SDK script failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return found


def sdk_env(server: ServerProcess, workdir: Path) -> dict[str, str]:
    """Only what ``cloudlet azureml env`` sets (plus PATH and HOME): the SDK finds this server."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "ARM_CLOUD_METADATA_URL": server.https_endpoint + "/metadata/endpoints",
        "REQUESTS_CA_BUNDLE": server.ca_file,
        "IDENTITY_ENDPOINT": server.https_endpoint + "/msi/token",
        "IDENTITY_HEADER": server.api_key,
    }


def run(quick: bool = False) -> dict[str, Any]:
    plan = _plan(quick)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {**plan, "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-arm-"))
    server = start_cloudlet(tmp / "home")
    try:
        token = _setup(server)
        samples = _measure(plan, server, token)
        sdk = _sdk(server, plan["sdk_calls"], tmp)
    finally:
        server.stop()
        kill_node_processes(tmp / "home")
        shutil.rmtree(tmp, ignore_errors=True)
    summaries = {name: summarize_ns(values) for name, values in samples.items()}
    if sdk is not None:
        summaries["sdk_compute_get"] = summarize_ns(sdk)
    data["series"] = summaries
    arm, native = summaries["arm"], summaries["native"]
    data["facade_added_p50_ms"] = round(arm["p50_ms"] - native["p50_ms"], 4)
    data["facade_added_p99_ms"] = round(arm["p99_ms"] - native["p99_ms"], 4)
    data["ratio_p50"] = ratio(arm["p50_ms"], native["p50_ms"])
    data["ratio_p99"] = ratio(arm["p99_ms"], native["p99_ms"])
    data["goal_met"] = data["facade_added_p50_ms"] <= GOAL_MS
    data["loadavg_end"] = _results.loadavg()
    return data


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    machine = data["machine"]
    quick = "; --quick" if data["plan"]["quick"] else ""
    rows = [
        f"## arm_facade — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}; load average "
        f"{data.get('loadavg_start')} at start, {data.get('loadavg_end')} at end; "
        f"{data['plan']['rounds'] * data['plan']['per_round']} sequential requests per target, "
        f"one per target in turn{quick}.",
        "",
        "| compute get | p50 ms | p90 ms | p99 ms | mean ms |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = {
        "native": "native route, HTTPS, API key",
        "arm": "ARM facade, HTTPS, JWT",
        "native_http": "native route, plain HTTP",
        "sdk_compute_get": "azure-ai-ml `ml.compute.get` (whole SDK call)",
    }
    for key, label in labels.items():
        s = data["series"].get(key)
        if s:
            cells = " | ".join(f(s[k], 3) for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms"))
            rows.append(f"| {label} | {cells} |")
    rows += [
        "",
        f"Facade adds {f(data['facade_added_p50_ms'], 3)} ms at p50 (ratio {f(data['ratio_p50'], 3)}) and "
        f"{f(data['facade_added_p99_ms'], 3)} ms at p99 (ratio {f(data['ratio_p99'], 3)}); "
        f"goal ≤ {GOAL_MS} ms p50: {'met' if data['goal_met'] else 'NOT met'}.",
    ]
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    arm, native = data["series"]["arm"], data["series"]["native"]
    sdk = data["series"].get("sdk_compute_get")
    verdict = "met" if data["goal_met"] else "NOT met"
    line = (
        f"compute get p50: native {native['p50_ms']:.3f} ms, ARM {arm['p50_ms']:.3f} ms "
        f"(+{data['facade_added_p50_ms']:.3f} ms; goal ≤ {GOAL_MS} ms: {verdict})"
    )
    return line + (f"\nSDK ml.compute.get p50 {sdk['p50_ms']:.2f} ms" if sdk else "")
