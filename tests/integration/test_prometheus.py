"""A real Prometheus (Debian's ``prometheus``, its binary started here) scrapes a cloudlet server of
two workers every second with the scrape token (issue 29's acceptance). Through its HTTP API
(``/api/v1/query``), PromQL sees:

- the job counters rise as jobs run (a cluster of at most one node, three jobs of a few seconds:
  the Completed count goes 1, 2, 3 in Prometheus's own series) and the queue depth while they wait;
- the store's gauges once, not once per worker (exactly 3 completed, not 6); the node busy, its
  agent connected, every control loop's passes timed;
- a deployment's request counter at 50 after 50 scoring requests, 25 through each worker (each
  worker counts its own; the scrape, whichever worker answers, sums them), and the HTTP requests of
  the scoring route's template at 50 too.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from cloudlet.client import MLClient
from cloudlet.services.core import metrics
from tests.conftest import RunningServer
from tests.integration.test_online_workers import BODY, SCORE, _client_on, _ml_on, _replica_of
from tests.jobs_helpers import create_compute, require_inference_environment, submit, wait_job, wait_until

pytestmark = pytest.mark.timeout(400)
TOKEN = "prometheus-scrape-token-0123456789abcdef"
CLUSTER = "metrics-cluster"
SCORE_ROUTE = "/online/{sub}/{rg}/{ws}/{endpoint}/score"


def _prometheus_binary() -> str:
    found = shutil.which("prometheus") or next(
        (p for p in ("/usr/bin/prometheus",) if os.access(p, os.X_OK)), None
    )
    if found is None:
        message = "prometheus is missing: run ./scripts/setup-tests.sh (Debian package prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """One Prometheus process scraping TARGET's /metrics every second with the scrape token."""

    def __init__(self, binary: str, root: Path, target: str, token_file: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        config = root / "prometheus.yml"
        config.write_text(
            textwrap.dedent(
                f"""\
                global:
                  scrape_interval: 1s
                  scrape_timeout: 1s
                scrape_configs:
                  - job_name: cloudlet
                    metrics_path: /metrics
                    authorization:
                      type: Bearer
                      credentials_file: {token_file}
                    static_configs:
                      - targets: ["{target}"]
                """
            )
        )
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.log = root / "prometheus.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address={urlsplit(self.url).netloc}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.http = httpx.Client(base_url=self.url, timeout=10, trust_env=False)

    def ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()
        try:
            return self.http.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = self.http.get("/api/v1/query", params={"query": promql})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """An instant query's one value (None when it has none)."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def series(self, promql: str) -> list[float]:
        """A range selector's values, oldest first (one series)."""
        result = self.query(promql)
        assert len(result) == 1, result
        return [float(value) for _, value in result[0]["values"]]

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def prometheus_binary() -> str:
    return _prometheus_binary()


@pytest.fixture
def started_prometheus(tmp_path: Path) -> Iterator[Callable[[str, Path], Prometheus]]:
    made: list[Prometheus] = []

    def start(target: str, token_file: Path) -> Prometheus:
        made.append(Prometheus(_prometheus_binary(), tmp_path / "prometheus", target, token_file))
        return made[-1]

    yield start
    for prometheus in made:
        prometheus.stop()


def _jobs_rise_and_wait_in_queue(srv: RunningServer, prom: Prometheus) -> None:
    with srv.client() as api:
        create_compute(
            api,
            srv,
            CLUSTER,
            {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1},
        )
        names = [
            submit(api, srv, f"metrics-{i}", {"command": "sleep 3", "compute": f"azureml:{CLUSTER}"})["name"]
            for i in range(3)
        ]
        for name in names:
            assert wait_job(api, srv, name, timeout=180)["status"] == "Completed"
    where = f'workspace="default",compute="{CLUSTER}"'
    completed = f'cloudlet_jobs{{{where},status="Completed"}}'
    wait_until(lambda: prom.value(completed) == 3, 30, "Prometheus seeing the 3 completed jobs")
    rising = prom.series(f"{completed}[10m]")
    assert rising == sorted(rising), rising
    assert {1.0, 2.0, 3.0} <= set(rising), f"the count rose one job at a time: {rising}"
    # Three jobs, one node at most: they waited in the queue (all three while the node started).
    depth = prom.series(f"cloudlet_queue_depth{{{where}}}[10m]")
    assert max(depth) >= 2, depth
    assert prom.value(f"cloudlet_queue_depth{{{where}}}") in (None, 0.0)
    oldest = prom.series(f"cloudlet_queue_oldest_age_seconds{{{where}}}[10m]")
    assert max(oldest) > 0, oldest
    # The cluster's node ran them (busy), its agent holding a long poll on one worker or the other.
    assert prom.value(f'max_over_time(cloudlet_nodes{{{where},state="busy"}}[10m])') == 1
    assert (prom.value("max_over_time(cloudlet_agent_connections[10m])") or 0) >= 1
    loops = {r["metric"]["loop"] for r in prom.query("cloudlet_reconcile_pass_duration_seconds_count")}
    assert {"cluster-reconciler", "operation-reconciler", "parent-jobs"} <= loops, loops


def _deploy(srv: RunningServer, replica: str, tmp_path: Path) -> tuple[str, str]:
    """Endpoint ep-m with deployment blue at 100 %: its scoring path and key."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "none.txt").write_text("-")
    doc = {
        "name": "blue",
        "endpoint_name": "ep-m",
        "model": {"path": "model"},
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "instance_type": "Standard_DS3_v2",
        "instance_count": 1,
        "environment_variables": {"WHO": "blue"},
        "readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 60},
    }
    ml: MLClient
    with _ml_on(srv, replica) as ml:
        ml.online_endpoints.create_or_update({"name": "ep-m", "auth_mode": "key"})
        created = ml.online_deployments.create_or_update(doc, base_path=tmp_path)
        shown = ml.online_deployments.wait("ep-m", "blue", generation=created["generation"])
        assert shown["provisioning_state"] == "Succeeded", shown
        endpoint = ml.online_endpoints.update_traffic("ep-m", {"blue": 100})
        key = ml.online_endpoints.get_keys("ep-m")["primaryKey"]
    return urlsplit(endpoint["scoring_uri"]).path, key


def _fifty_requests_through_both_workers(
    srv: RunningServer, prom: Prometheus, replicas: list[str], tmp_path: Path
) -> None:
    """25 answered requests through each worker. A worker's gateway may not yet see the replica
    (its view follows worker 0's within a wake-up): such a request is answered 503 before it is
    sent, and is not a request to the deployment."""
    path, key = _deploy(srv, replicas[0], tmp_path)
    auth = {"Authorization": f"Bearer {key}"}
    for replica in replicas:
        http = _client_on(srv, replica)
        answered, deadline = 0, time.monotonic() + 60
        try:
            while answered < 25:
                assert time.monotonic() < deadline, f"25 answers through {replica}"
                assert _replica_of(http) == replica  # the same worker's connection throughout
                answer = http.post(path, json=BODY, headers=auth)
                assert answer.status_code in (200, 503), answer.text
                answered += answer.status_code == 200
        finally:
            http.close()
    requests = 'sum(cloudlet_online_requests_total{endpoint="ep-m",deployment="blue"})'
    wait_until(lambda: prom.value(requests) == 50, 30, "the deployment's counter at 50")
    score_http = f'sum(cloudlet_http_requests_total{{route="{SCORE_ROUTE}",status="200"}})'
    assert prom.value(score_http) == 50
    assert prom.value('sum(cloudlet_online_request_errors_total{endpoint="ep-m"})') in (None, 0.0)
    durations = 'sum(cloudlet_online_request_duration_seconds_count{endpoint="ep-m",deployment="blue"})'
    assert prom.value(durations) == 50


def test_prometheus_scrapes_a_server_of_two_workers(
    server_factory: Callable[..., RunningServer],
    started_prometheus: Callable[[str, Path], Prometheus],
    prometheus_binary: str,
    tmp_path: Path,
) -> None:
    require_inference_environment()
    token_file = tmp_path / "scrape-token"
    token_file.write_text(TOKEN + "\n")
    srv = server_factory(
        extra_env={"CLOUDLET_WORKERS": "2", metrics.TOKEN_FILE_ENV: str(token_file)}, timeout=240
    )
    seen: set[str] = set()

    def both() -> bool:
        with httpx.Client(base_url=srv.endpoint, timeout=10, trust_env=False) as http:
            seen.add(_replica_of(http))
        return len(seen) == 2

    wait_until(both, 60, "both workers answering")
    prom = started_prometheus(urlsplit(srv.endpoint).netloc, token_file)
    wait_until(prom.ready, 60, "Prometheus ready")
    wait_until(lambda: prom.value('up{job="cloudlet"}') == 1, 30, "Prometheus scraping cloudlet")
    started = time.monotonic()
    _jobs_rise_and_wait_in_queue(srv, prom)
    _fifty_requests_through_both_workers(srv, prom, sorted(seen), tmp_path)
    assert time.monotonic() - started < 360
    assert prom.value('up{job="cloudlet"}') == 1, "every scrape was answered"
