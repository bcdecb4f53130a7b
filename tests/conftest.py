"""Shared fixtures: a real cloudlet server process spoken to over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

NO_BWRAP = (
    "bubblewrap (bwrap) is not installed, and the local provider runs every node's jobs and apps in "
    "a bubblewrap sandbox: run scripts/setup.sh (apt-get install bubblewrap)"
)


def pytest_configure(config: pytest.Config) -> None:
    """Without bwrap the servers' nodes would be refused: under CI that fails the run; elsewhere
    the servers run nodes unsandboxed (CLOUDLET_SANDBOX=none) and the isolation tests are skipped."""
    if shutil.which("bwrap") is not None:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(f"CI must run jobs sandboxed: {NO_BWRAP}")
    print(f"\n!!! {NO_BWRAP}; nodes run UNSANDBOXED (CLOUDLET_SANDBOX=none) in this run !!!\n")
    os.environ.setdefault("CLOUDLET_SANDBOX", "none")


CI_SKIP = (
    "CI=true runs everything the acceptance needs, so a skip is a missing part (Chromium, sshd, root, "
    "PostgreSQL, torch, …): install it (scripts/setup.sh and scripts/setup-tests.sh do, as root) "
    "instead of skipping. "
    "Skipped because: "
)


def _fail_skip_under_ci(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not (report.skipped and os.environ.get("CI")) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = CI_SKIP + reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _fail_skip_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail_skip_under_ci(outcome.get_result())


@dataclass
class RunningServer:
    home: Path
    process: subprocess.Popen[bytes]
    endpoint: str
    api_key: str
    subscription_id: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    installation: str = ""
    https_url: str = ""  # the same API over TLS (the Azure ML facade's listener)
    ca_file: str = ""  # the CA that signed its certificate

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    @property
    def ws_path(self) -> str:
        return self.workspace_path("default")

    def workspace_path(self, workspace: str, resource_group: str = "default") -> str:
        return (
            f"/api/v1/subscriptions/{self.subscription_id}/resourceGroups/{resource_group}"
            f"/workspaces/{workspace}"
        )

    def client(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.endpoint, headers={"Authorization": f"Bearer {key or self.api_key}"}, timeout=30
        )

    def cli_env(self) -> dict[str, str]:
        return {**os.environ, "CLOUDLET_HOME": str(self.home), "CLOUDLET_OUTPUT": "json", **self.env}

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=20)

    def wait_operation(self, client: httpx.Client, url: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body: dict[str, Any] = client.get(url).json()
            if body["status"] != "InProgress" or time.monotonic() > deadline:
                return body
            time.sleep(0.05)


# Tests serve with one worker process unless they test several (CLOUDLET_WORKERS in their
# extra_env): `cloudlet server`'s default, `auto`, is a supervisor and one worker per core, which
# on a 2-core machine running tests side by side costs a start and memory that the test does not
# need. ``start_server(workers=None)`` serves with the server's own default.
TEST_WORKERS = "1"


def server_env(
    home: Path, extra_env: dict[str, str] | None, workers: str | None = TEST_WORKERS
) -> dict[str, str]:
    """The environment of a test's server for HOME: WORKERS (None: the server's default, whatever
    this process's environment says), then EXTRA_ENV over it."""
    env = {**os.environ, "CLOUDLET_HOME": str(home)}
    env.pop("CLOUDLET_WORKERS", None)
    if workers is not None:
        env["CLOUDLET_WORKERS"] = workers
    return {**env, **(extra_env or {})}


def server_argv(home: Path, port: int, host: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    """``cloudlet server`` on PORT (0: any) for HOME. ``--tls-port 0``: a free port (the default,
    ``--port`` + 1, may be taken when a test restarts a server on its port). HOST: listen there
    instead of loopback (agents in other network namespaces dial it). EXTRA: more options."""
    cloudlet = [sys.executable, "-m", "cloudlet", "server"]
    argv = [*cloudlet, "--port", str(port), "--tls-port", "0", "--home", str(home), *extra]
    return [*argv, "--host", host] if host else argv


def start_server(
    home: Path,
    db_url: str | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 60,
    api_key: str | None = None,
    port: int = 0,
    host: str | None = None,
    workers: str | None = TEST_WORKERS,
    args: Sequence[str] = (),
) -> RunningServer:
    """Start ``cloudlet server`` and wait until it answers. A replica joining a store that another
    server bootstrapped writes no credentials: pass that server's ``api_key``. A restarted server
    that its node agents should find again needs the same ``port`` (``RunningServer.port``).
    WORKERS: ``--workers`` (None: the server's default); ``CLOUDLET_WORKERS`` in EXTRA_ENV wins.
    ARGS: more ``cloudlet server`` options."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.json"
    stale_endpoint = json.loads(config.read_text())["endpoint"] if config.exists() else None
    log_path = home / f"server-{time.time_ns()}.log"
    env = server_env(home, extra_env, workers)
    cmd = server_argv(home, port, host, args)
    if db_url:
        cmd += ["--db", db_url]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited early:\n{log_path.read_text()}")
        if config.exists() and (api_key or (home / "credentials").exists()):
            try:
                cfg = json.loads(config.read_text())
            except json.JSONDecodeError:
                cfg = {}
            endpoint = cfg.get("endpoint")
            if endpoint and endpoint != stale_endpoint:
                try:
                    health = httpx.get(endpoint + "/healthz", timeout=1)
                    if health.status_code == 200:
                        key = api_key or json.loads((home / "credentials").read_text())["api_key"]
                        installation = str(health.json()["installation"])
                        return RunningServer(
                            home,
                            process,
                            endpoint,
                            key,
                            cfg["subscription_id"],
                            log_path,
                            extra_env or {},
                            installation,
                            cfg.get("https_endpoint", ""),
                            cfg.get("ca_file", ""),
                        )
                except httpx.HTTPError:
                    pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not become ready:\n{log_path.read_text()}")


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    started: list[RunningServer] = []

    def make(home: Path | None = None, **kwargs: Any) -> RunningServer:
        server = start_server(home or tmp_path / f"home{len(started)}", **kwargs)
        started.append(server)
        return server

    yield make
    for server in started:
        _kill_with_its_nodes(server)


def _kill_with_its_nodes(server: RunningServer) -> None:
    """Agents outlive a killed server (by design: they wait for it to come back), so a test's
    teardown also ends every process that carries this installation's id."""
    from tests.jobs_helpers import reap_installation, unmount_under

    server.kill()
    if server.installation:
        reap_installation(server.installation)
    unmount_under(server.home)


@pytest.fixture
def server(server_factory: Callable[..., RunningServer]) -> RunningServer:
    return server_factory()


# A module that defines a module-scoped ``srv`` fixture gets these with it.
@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


@pytest.fixture(scope="module")
def installation(srv: RunningServer) -> str:
    return str(httpx.get(srv.endpoint + "/healthz").json()["installation"])


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    from tests.postgres import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    from tests.postgres import fresh_database

    with fresh_database(postgres_admin_url) as url:
        yield url
