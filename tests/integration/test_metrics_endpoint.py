"""``GET /metrics`` on a real server (issue 29 item 1): who may scrape (the scrape token, loopback
only where configured, never anyone otherwise) and what a scrape says: HTTP requests by route
template (never the raw path) and status, the store's families, reconcile passes per loop."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cloudlet.services.core import metrics
from tests.conftest import RunningServer
from tests.integration.test_online_workers import _client_on, _replica_of
from tests.jobs_helpers import submit, wait_job, wait_until

TOKEN = "scrape-token-for-tests-0123456789"


def _scrape(srv: RunningServer, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(srv.endpoint + "/metrics", headers=headers, timeout=10, trust_env=False)


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
    ]


def test_scrape_token_is_needed_and_the_families_are_there(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory(extra_env={metrics.TOKEN_ENV: TOKEN})
    for token in (None, "wrong", TOKEN[:-1]):
        refused = _scrape(srv, token)
        assert refused.status_code == 401, refused.text
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "cloudlet_" not in refused.text
    with srv.client() as api:
        job = submit(api, srv, "metrics-local", {"command": "true", "compute": "local"})
        assert wait_job(api, srv, job["name"])["status"] == "Completed"
        assert api.get(f"{srv.ws_path}/jobs/no-such-job").status_code == 404

    def scraped() -> list[tuple[str, dict[str, str], float]] | None:
        answer = _scrape(srv, TOKEN)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain; version=")
        samples = _samples(answer.text)
        passes = [s for s in samples if s[0] == "cloudlet_reconcile_pass_duration_seconds_count"]
        return samples if passes else None

    samples = wait_until(scraped, 30, "a scrape with reconcile passes")
    requests = {
        (labels["method"], labels["route"], labels["status"]): value
        for name, labels, value in samples
        if name == "cloudlet_http_requests_total"
    }
    job_route = "/api/v1/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}/jobs/{name}"
    assert requests.get(("GET", job_route, "404"), 0) >= 1, requests
    assert not any("no-such-job" in route for _, route, _ in requests), "a raw path as a label"
    assert any(n == "cloudlet_http_request_duration_seconds_bucket" for n, _, _ in samples)
    passes = "cloudlet_reconcile_pass_duration_seconds_count"
    loops = {labels["loop"] for n, labels, _ in samples if n == passes}
    assert "cluster-reconciler" in loops, loops
    jobs = {
        (labels["compute"], labels["status"]): value for n, labels, value in samples if n == "cloudlet_jobs"
    }
    assert jobs.get(("local", "Completed")) == 1, jobs
    families = {f.name for f in text_string_to_metric_families(_scrape(srv, TOKEN).text)}
    for family in ("operations", "nodes", "queue_depth", "queue_oldest_age_seconds", "agent_connections"):
        assert f"cloudlet_{family}" in families, families


# One core busy until canceled (iter(int, 1) never ends; any() keeps nothing).
BURN = 'python -c "import time; any(time.time() < 0 for _ in iter(int, 1))"'


def test_a_running_jobs_resource_gauges_are_scraped_and_gone_after_it_ends(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory(extra_env={metrics.TOKEN_ENV: TOKEN, "CLOUDLET_MONITOR_INTERVAL_S": "1"})

    def gauges(name: str) -> list[tuple[dict[str, str], float]]:
        answer = _scrape(srv, TOKEN)
        assert answer.status_code == 200, answer.text
        return [(labels, value) for n, labels, value in _samples(answer.text) if n == name]

    with srv.client() as api:
        submit(api, srv, "metrics-burn", {"command": BURN, "compute": "local"})

        def busy() -> dict[str, str] | None:
            found = [labels for labels, value in gauges("cloudlet_job_cpu_percent") if value > 0]
            return found[0] if found else None

        labels = wait_until(busy, 60, "the running job's CPU gauge above 0", interval=0.5)
        assert labels["job"] == "metrics-burn" and labels["compute"] == "local" and labels["node"], labels
        memory = gauges("cloudlet_job_memory_bytes")
        assert [value > 0 for labels, value in memory if labels["job"] == "metrics-burn"] == [True], memory
        assert gauges("cloudlet_job_gpu_utilization_percent") == []  # no GPU here: no series, not zeros
        assert api.post(f"{srv.ws_path}/jobs/metrics-burn/cancel").status_code == 202
        assert wait_job(api, srv, "metrics-burn", timeout=60)["status"] == "Canceled"
    for family in ("cloudlet_job_cpu_percent", "cloudlet_job_memory_bytes"):
        assert not [labels for labels, _ in gauges(family) if labels["job"] == "metrics-burn"], family


def test_without_a_token_metrics_are_off_even_from_loopback(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory()
    refused = _scrape(srv)
    assert refused.status_code == 403, refused.text
    assert metrics.TOKEN_ENV in refused.text
    assert _scrape(srv, "anything").status_code == 403


def test_loopback_may_scrape_where_configured(server_factory: Callable[..., RunningServer]) -> None:
    srv = server_factory(extra_env={metrics.LOOPBACK_ENV: "1"})
    answer = _scrape(srv)
    assert answer.status_code == 200, answer.text
    assert "cloudlet_http_requests_total" in answer.text


@pytest.mark.parametrize(
    ("env", "authorization", "host", "refused"),
    [
        ({metrics.LOOPBACK_ENV: "1"}, "", "127.0.0.1", None),
        ({metrics.LOOPBACK_ENV: "1"}, "", "::1", None),
        ({metrics.LOOPBACK_ENV: "1"}, "", "10.1.2.3", 403),  # loopback only, and no token set
        ({metrics.LOOPBACK_ENV: "1", metrics.TOKEN_ENV: TOKEN}, "", "10.1.2.3", 401),
        ({metrics.LOOPBACK_ENV: "1", metrics.TOKEN_ENV: TOKEN}, f"Bearer {TOKEN}", "10.1.2.3", None),
        ({metrics.TOKEN_ENV: TOKEN}, "", "127.0.0.1", 401),  # loopback not allowed: the token
        ({metrics.TOKEN_ENV: TOKEN}, f"Basic {TOKEN}", "10.1.2.3", 401),
        ({}, "", "127.0.0.1", 403),
        ({}, "", None, 403),
    ],
)
def test_who_may_scrape(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    authorization: str,
    host: str | None,
    refused: int | None,
) -> None:
    for name in (metrics.TOKEN_ENV, metrics.TOKEN_FILE_ENV, metrics.LOOPBACK_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    answer = metrics.scrape_refusal(authorization, host)
    assert (answer and answer[0]) == refused, answer


def test_the_token_may_be_read_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "scrape-token"
    path.write_text(TOKEN + "\n")
    monkeypatch.delenv(metrics.TOKEN_ENV, raising=False)
    monkeypatch.delenv(metrics.LOOPBACK_ENV, raising=False)
    monkeypatch.setenv(metrics.TOKEN_FILE_ENV, str(path))
    assert metrics.scrape_refusal(f"Bearer {TOKEN}", "10.1.2.3") is None
    refused = metrics.scrape_refusal("Bearer nope", "10.1.2.3")
    assert refused is not None and refused[0] == 401


def _worker_pid(supervisor: int, slot: int) -> int:
    """The pid of the supervisor's worker SLOT (its spec is in its environment, ``serving.py``)."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    for pid in map(int, children):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # a worker just killed, not reaped yet
            continue
        for entry in environ:
            if entry.startswith(b"CLOUDLET_WORKER=") and json.loads(entry.partition(b"=")[2])["slot"] == slot:
                return pid
    raise AssertionError(f"no worker {slot} under {supervisor}: {children}")


def test_a_scrape_sums_every_worker_and_keeps_an_exited_workers_counts(
    server_factory: Callable[..., RunningServer],
) -> None:
    """20 refused scrapes through worker 1 are counted by a scrape through worker 0 (multiprocess
    mode), and still after worker 1 was killed and started again."""
    srv = server_factory(extra_env={"CLOUDLET_WORKERS": "2", metrics.TOKEN_ENV: TOKEN}, timeout=120)
    seen: set[str] = set()

    def both() -> bool:
        with httpx.Client(base_url=srv.endpoint, timeout=10, trust_env=False) as http:
            seen.add(_replica_of(http))
        return len(seen) == 2

    wait_until(both, 60, "both workers answering")
    first, second = sorted(seen)
    refused = '{method="GET",route="/metrics",status="401"}'

    def refused_count(replica: str) -> float:
        http = _client_on(srv, replica)
        try:
            answer = http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 200, answer.text
            assert _replica_of(http) == replica
        finally:
            http.close()
        found = [s for s in _samples(answer.text) if s[0] == "cloudlet_http_requests_total"]
        counts = [v for _, labels, v in found if labels["route"] == "/metrics" and labels["status"] == "401"]
        return sum(counts)

    http = _client_on(srv, second)
    try:
        for _ in range(20):
            assert http.get("/metrics").status_code == 401
            assert _replica_of(http) == second
    finally:
        http.close()
    assert refused_count(first) == 20, f"worker 0's scrape counts worker 1's requests {refused}"
    old = _worker_pid(srv.process.pid, 1)
    os.kill(old, signal.SIGKILL)

    def restarted() -> bool:
        try:
            return _worker_pid(srv.process.pid, 1) != old
        except AssertionError:  # between the exit and the start
            return False

    wait_until(restarted, 60, "worker 1 started again", interval=0.2)
    seen.clear()
    wait_until(both, 60, "both workers answering again")
    assert refused_count(first) == 20
    assert refused_count(second) == 20
