"""Online endpoints: a request straight to one replica (``azmlinfsrv``'s ``/score``) beside the
same request through cloudlet's gateway (key check, traffic choice, limits, the async proxy), at
1, 8 and 32 clients (threads, one keep-alive ``httpx.Client`` each), for a trivial model (echo)
and a small sklearn one; plus deploy → first answer and update → all traffic on the new version.

Beside them, the same endpoint through a real HAProxy driven by cloudlet's view of it
(``bench/_haproxy.py``: keys, weights, the pinned header, backends = the ready replicas, 429 / 408 /
424 rules), to choose the gateway by measurement (issue 14); each series is run through the three
paths in turn, and the semantics each path kept (401, pinned 404, 424, 408) are checked after.

Peer: Ray Serve (``bench/_ray_serve_peer.py`` under a venv with ``ray[serve]``, see
``ray_serve_python()``), one replica of each model behind Serve's HTTP proxy, measured with the
same client at the same client counts, with its deploy → first answer and update → all traffic
on the new version. Where it cannot be installed the report says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench import _haproxy, _results
from bench._haproxy import Haproxy
from bench._server import REPO_ROOT, start_cloudlet
from bench._stats import summarize_ns
from cloudlet.control.online_replicas import default_python
from cloudlet.control.replica_process import free_port

NAME = "online_gateway"
ECHO = """import json, os, time
def init():
    pass
def run(raw):
    data = json.loads(raw)
    if data.get("fail"):  # the 424 check
        raise ValueError("asked to fail")
    time.sleep(data.get("sleep", 0))  # the 408 check
    return {"version": os.environ.get("VERSION", "1"), "data": data}
"""
SKLEARN = """import json, os, joblib
def init():
    global model
    root = os.environ["AZUREML_MODEL_DIR"]  # the folder by its name under it, or (at c762ef6) itself
    nested = os.path.join(root, "model", "model.pkl")
    model = joblib.load(nested if os.path.exists(nested) else os.path.join(root, "model.pkl"))
def run(raw):
    return model.predict(json.loads(raw)["data"]).tolist()
"""
TRAIN = """import sys, joblib
from sklearn.linear_model import LogisticRegression
joblib.dump(LogisticRegression().fit([[0, 0], [1, 1], [5, 5], [6, 6]], [0, 0, 1, 1]), sys.argv[1])
"""
RAY_VERSION = "2.60.0"  # as bench/dispatch.py
RAY_SERVE_VENV = Path("/tmp/cloudlet-bench-ray-serve")
BODY = b'{"data": [[0, 0], [6, 6]]}'
CLIENTS = (1, 8, 32)
ECHO_TIMEOUT_MS = 2000  # the echo deployment's request_timeout_ms (the 408 check sleeps past it)


def _load(url: str, headers: dict[str, str], clients: int, per_client: int) -> dict[str, Any]:
    latencies: list[int] = []
    errors: list[int] = []
    codes: dict[int, int] = {}  # the statuses other than 200, counted
    lock = threading.Lock()

    def worker() -> None:
        mine: list[int] = []
        bad = 0
        seen: dict[int, int] = {}
        with httpx.Client(timeout=30, trust_env=False) as http:
            for _ in range(per_client):
                start = time.perf_counter_ns()
                answer = http.post(url, content=BODY, headers=headers)
                mine.append(time.perf_counter_ns() - start)
                if answer.status_code != 200:
                    bad += 1
                    seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
        with lock:
            latencies.extend(mine)
            errors.append(bad)
            for code, count in seen.items():
                codes[code] = codes.get(code, 0) + count

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    summary = summarize_ns(latencies, time.perf_counter() - started)
    summary["errors"] = sum(errors)
    summary["error_statuses"] = {str(k): v for k, v in sorted(codes.items())}
    return summary


def ray_serve_python() -> tuple[Path | None, str]:
    """The interpreter with Ray Serve: $BENCH_RAY_SERVE_PYTHON, else the venv under /tmp (made
    with ``pip install ray[serve]==RAY_VERSION scikit-learn joblib`` unless BENCH_RAY_INSTALL=0)."""
    given = os.environ.get("BENCH_RAY_SERVE_PYTHON")
    python = Path(given) if given else RAY_SERVE_VENV / "bin" / "python"
    probe = [str(python), "-c", "import ray.serve, sklearn, joblib"]
    if python.exists() and subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
        return python, f"existing venv {python.parent.parent}"
    if given or os.environ.get("BENCH_RAY_INSTALL") == "0":
        return None, f"no Ray Serve at {python}"
    try:
        subprocess.run(["python3.11", "-m", "venv", str(RAY_SERVE_VENV)], check=True, timeout=120)
        pip = [str(RAY_SERVE_VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run(
            [*pip, f"ray[serve]=={RAY_VERSION}", "scikit-learn", "joblib"], check=True, timeout=900
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"pip install ray[serve] failed: {exc}"
    return RAY_SERVE_VENV / "bin" / "python", f"installed into {RAY_SERVE_VENV}"


def _ray_serve(tmp: Path, per_client_total: int) -> dict[str, Any]:
    """Ray Serve's p50/p99/req/s for both models at 1, 8 and 32 clients and its deploy / update
    times, or why not."""
    python, how = ray_serve_python()
    if python is None:
        return {"measured": False, "why": how}
    ready = tmp / "ray-serve.json"
    peer = subprocess.Popen(
        [str(python), str(Path(__file__).with_name("_ray_serve_peer.py")), str(ready), "--deadline=900"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 400
        while not ready.exists() and peer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not ready.exists():
            return {"measured": False, "why": f"Ray Serve did not start (exit {peer.poll()})"}
        started = json.loads(ready.read_text())
        if "url" not in started:
            return {"measured": False, "why": started.get("error", "?")}
        headers = {"Content-Type": "application/json"}
        series = {}
        for model, url in (("echo", started["echo_url"]), ("sklearn", started["url"])):
            _load(url, headers, 1, 20)  # warm
            for clients in CLIENTS:
                per = max(1, per_client_total // clients)
                series[f"{model}/ray_serve/{clients}"] = _load(url, headers, clients, per)
        timings = {k: v for k, v in started.items() if k.endswith("_s") or "_s_" in k}
        return {"measured": True, "how": how, "ray": started.get("ray"), "series": series, **timings}
    finally:
        if peer.stdin is not None:
            peer.stdin.close()
        try:
            peer.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(peer.pid, 9)
            peer.wait(10)


def _until_version(url: str, headers: dict[str, str], version: str, in_a_row: int = 20) -> None:
    """Until IN_A_ROW answers in a row are VERSION's (as the Ray Serve peer's ``_until``)."""
    seen, deadline = 0, time.monotonic() + 300
    with httpx.Client(timeout=30, trust_env=False) as http:
        while seen < in_a_row:
            assert time.monotonic() < deadline, f"not all traffic on version {version} within 300 s"
            answer = http.post(url, content=BODY, headers=headers)
            ok = answer.status_code == 200 and answer.json().get("version") == version
            seen = seen + 1 if ok else 0
            if not ok:
                time.sleep(0.02)


def _semantics(url: str, headers: dict[str, str]) -> dict[str, Any]:
    """What a path answers to a wrong key, an unknown pinned deployment, a raising model and one
    slower than request_timeout_ms (the echo deployment's: ``ECHO_TIMEOUT_MS``)."""
    checks = {
        "wrong_key": ({**headers, "Authorization": "Bearer wrong"}, BODY),
        "pinned_unknown": ({**headers, "azureml-model-deployment": "nosuch"}, BODY),
        "model_error": (headers, b'{"fail": true}'),
        "timeout": (headers, json.dumps({"sleep": ECHO_TIMEOUT_MS / 1000 + 0.5}).encode()),
    }
    out: dict[str, Any] = {}
    for name, (hdrs, body) in checks.items():
        began = time.perf_counter()
        answer = httpx.post(url, content=body, headers=hdrs, timeout=30, trust_env=False)
        out[name] = answer.status_code
        if name == "timeout":  # what answered, and when
            out["timeout_after_s"] = round(time.perf_counter() - began, 2)
            out["timeout_body"] = answer.text[:160]
    time.sleep(ECHO_TIMEOUT_MS / 1000)  # the sync worker finishes the slow request before the next path
    return out


def _haproxy_for(
    tmp: Path, model: str, endpoint: dict[str, Any], keys: dict[str, Any], deployments: list[dict[str, Any]]
) -> Haproxy:
    """HAProxy driven by cloudlet's view of ENDPOINT: its path, keys, traffic and each
    deployment's ready replicas and request_settings (as ``show`` gives them)."""
    view = _haproxy.Endpoint(
        path=urlsplit(endpoint["scoring_uri"]).path,
        keys=[keys["primaryKey"], keys["secondaryKey"]],
        traffic=dict(endpoint.get("traffic") or {}),
        deployments=[
            _haproxy.Deployment(
                name=d["name"],
                ports=[r["port"] for r in d["replicas"] if r["ready"]],
                max_concurrent=(d.get("request_settings") or {}).get(
                    "max_concurrent_requests_per_instance", 1
                ),
                timeout_ms=(d.get("request_settings") or {}).get("request_timeout_ms", 5000),
            )
            for d in deployments
        ],
    )
    return Haproxy(view, free_port(), tmp / f"haproxy-{model}")


def run(quick: bool = False) -> dict[str, Any]:
    from cloudlet.client import MLClient

    per_client_total = 200 if quick else 1000
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {"requests_per_series": per_client_total, "clients": list(CLIENTS), "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-online-"))
    server = start_cloudlet(tmp / "home")
    series: dict[str, Any] = {}
    semantics: dict[str, Any] = {}
    haproxy_version = None
    try:
        for model in ("echo", "sklearn"):
            root = tmp / model
            (root / "src").mkdir(parents=True)
            (root / "model").mkdir()
            (root / "src" / "score.py").write_text(ECHO if model == "echo" else SKLEARN)
            if model == "sklearn":
                subprocess.run([default_python(), "-c", TRAIN, str(root / "model" / "model.pkl")], check=True)
            else:
                (root / "model" / "none.txt").write_text("-")
        with MLClient(home=tmp / "home") as ml:
            for model in ("echo", "sklearn"):
                name = f"ep-{model}"
                ml.online_endpoints.create_or_update({"name": name, "auth_mode": "key"})
                settings: dict[str, Any] = {"max_concurrent_requests_per_instance": 64}
                if model == "echo":
                    settings["request_timeout_ms"] = ECHO_TIMEOUT_MS
                doc = {
                    "name": "blue",
                    "endpoint_name": name,
                    "model": "model",
                    "code_configuration": {"code": "src", "scoring_script": "score.py"},
                    "instance_type": "Standard_DS3_v2",
                    "request_settings": settings,
                    "readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 120},
                }
                started = time.perf_counter()
                created = ml.online_deployments.create_or_update(doc, base_path=tmp / model)
                shown = ml.online_deployments.wait(name, "blue", generation=created["generation"])
                endpoint = ml.online_endpoints.update_traffic(name, {"blue": 100})
                keys = ml.online_endpoints.get_keys(name)
                headers = {
                    "Authorization": f"Bearer {keys['primaryKey']}",
                    "Content-Type": "application/json",
                }
                first = httpx.post(endpoint["scoring_uri"], content=BODY, headers=headers, timeout=30)
                data[f"deploy_to_first_answer_s_{model}"] = round(time.perf_counter() - started, 3)
                assert first.status_code == 200, first.text
                paths = {
                    "direct": f"http://127.0.0.1:{shown['replicas'][0]['port']}/score",
                    "gateway": endpoint["scoring_uri"],
                }
                proxy: Haproxy | None = None
                try:
                    proxy = _haproxy_for(tmp, model, endpoint, keys, [shown])
                    paths["haproxy"] = proxy.url
                    haproxy_version = proxy.version
                except (OSError, RuntimeError) as exc:
                    data["haproxy_not_measured"] = str(exc)
                try:
                    for url in paths.values():  # warm every path
                        _load(url, headers, 1, 20)
                    for clients in CLIENTS:
                        per = max(1, per_client_total // clients)
                        for path, url in paths.items():  # in turn, so drift in load touches each
                            series[f"{model}/{path}/{clients}"] = _load(url, headers, clients, per)
                    if model == "echo":
                        semantics = {
                            path: _semantics(url, headers) for path, url in paths.items() if path != "direct"
                        }
                finally:
                    if proxy is not None:
                        proxy.stop()
                if model == "echo":
                    started = time.perf_counter()
                    updated = ml.online_deployments.create_or_update(
                        {**doc, "environment_variables": {"VERSION": "2"}}, base_path=tmp / model
                    )
                    ml.online_deployments.wait(name, "blue", generation=updated["generation"])
                    _until_version(endpoint["scoring_uri"], headers, "2")
                    data["update_to_all_traffic_s"] = round(time.perf_counter() - started, 3)
        data["series"] = series
        data["semantics"] = semantics
        data["haproxy"] = haproxy_version
        data["overhead_p50_ms"] = {
            f"{m}/{p}/{c}": round(series[f"{m}/{p}/{c}"]["p50_ms"] - series[f"{m}/direct/{c}"]["p50_ms"], 3)
            for m in ("echo", "sklearn")
            for p in ("gateway", "haproxy")
            for c in CLIENTS
            if f"{m}/{p}/{c}" in series
        }
    finally:
        server.stop()
    try:
        peer = _ray_serve(tmp, per_client_total)  # alone: the cloudlet server is gone
        series.update(peer.pop("series", {}))
        data["peer"] = {"name": "ray_serve", **peer}
        if "sklearn/ray_serve/8" in series:
            data["gateway_vs_ray_serve_rps_8"] = {
                f"{m}/{p}": round(
                    series[f"{m}/{p}/8"]["throughput_rps"] / series[f"{m}/ray_serve/8"]["throughput_rps"], 2
                )
                for m in ("echo", "sklearn")
                for p in ("direct", "gateway", "haproxy")
                if f"{m}/{p}/8" in series and f"{m}/ray_serve/8" in series
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return data


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    peer = data.get("peer") or {}
    proxy = data.get("haproxy") or f"HAProxy (not measured: {data.get('haproxy_not_measured')})"
    rows = [
        f"## online_gateway — {data['timestamp']}",
        "",
        f"Machine: {data['machine']['nproc']} usable CPUs; {data['plan']['requests_per_series']} requests a "
        "series; one replica (azmlinfsrv, 1 sync worker) straight (direct), through cloudlet's gateway, "
        f"and through {proxy} "
        "driven by cloudlet's view. Ray Serve: "
        + (
            f"ray {peer.get('ray')}, one replica of each model behind Serve's proxy (*/ray_serve/*)."
            if peer.get("measured")
            else f"not measured ({peer.get('why', 'not run')})."
        ),
        "",
        "| series | p50 ms | p99 ms | req/s | errors |",
        "|---|---|---|---|---|",
    ]
    for name, s in sorted(data["series"].items()):
        rows.append(
            f"| {name} | {f(s['p50_ms'])} | {f(s.get('p99_ms'))} | "
            f"{f(s.get('throughput_rps'), 0)} | {s['errors']} |"
        )
    rows.append("")
    rows.append(f"Overhead p50 over direct (ms): {data['overhead_p50_ms']}")
    rows.append(f"req/s at 8 clients ÷ Ray Serve's: {data.get('gateway_vs_ray_serve_rps_8')}")
    rows.append(f"Semantics (status answered): {data.get('semantics')}")
    rows.append(
        f"Deploy → first answer: echo {data.get('deploy_to_first_answer_s_echo')} s, sklearn "
        f"{data.get('deploy_to_first_answer_s_sklearn')} s (Ray Serve: echo "
        f"{peer.get('deploy_to_first_answer_s_echo')} s, sklearn "
        f"{peer.get('deploy_to_first_answer_s_sklearn')} s);"
        f" update → all traffic on the new version: {data.get('update_to_all_traffic_s')} s "
        f"(Ray Serve: {peer.get('update_to_all_traffic_s')} s)."
    )
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"{n}: p50 {s['p50_ms']:.2f} ms, {s.get('throughput_rps', 0):.0f} req/s"
            for n, s in data["series"].items()
        ]
        + [f"overhead p50 ms: {data['overhead_p50_ms']}"]
        + [f"req/s at 8 clients / Ray Serve's: {data.get('gateway_vs_ray_serve_rps_8')}"]
        + [f"semantics: {data.get('semantics')}"]
    )
