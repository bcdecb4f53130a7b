"""Helpers for the job, cluster and crash tests: HTTP shorthands, deadline polling, /proc scans.

Everything here talks to a real server over HTTP or reads the real process table; nothing is mocked.
Node agents and job processes live in their own sessions and outlive a killed server, so module
fixtures call ``reap_installation`` after killing a server: it ends exactly the processes whose
environment carries that server's installation id (the ones these tests caused to be started).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx
import pytest

from tests.conftest import RunningServer, start_server

T = TypeVar("T")
TERMINAL = ("Completed", "Failed", "Canceled")


# -- polling ----------------------------------------------------------------------------------
def wait_until(
    probe: Callable[[], T | Literal[False] | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """Call ``probe`` until it returns something truthy (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def reconciler_passes(api: httpx.Client, loop: str) -> int:
    response = api.get("/api/v1/system/reconcilers")
    assert response.status_code == 200, response.text
    return int(response.json()[loop]["passes"])


def wait_passes(api: httpx.Client, loop: str, passes: int = 2, timeout: float = 60) -> None:
    """Until the control loop LOOP (``cluster-reconciler``, ``instance-watch``,
    ``operation-reconciler``) has finished PASSES more passes than it had now: at least one of
    them began after the caller's change, so whatever it would do about that change, it has done.
    The way to check that something did NOT happen, on a machine of any speed."""
    start = reconciler_passes(api, loop)
    wait_until(lambda: reconciler_passes(api, loop) >= start + passes, timeout, f"{passes} passes of {loop}")


# -- HTTP shorthands --------------------------------------------------------------------------
def installation_id(srv: RunningServer) -> str:
    body = httpx.get(srv.endpoint + "/healthz", timeout=5).json()
    return str(body["installation"])


def create_compute(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.put(f"{srv.ws_path}/computes/{name}", json=body)
    assert response.status_code in (200, 201), response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"])
    assert op["status"] == "Succeeded", op
    return compute(api, srv, name)


def delete_compute(api: httpx.Client, srv: RunningServer, name: str) -> None:
    response = api.delete(f"{srv.ws_path}/computes/{name}")
    if response.status_code == 202:
        srv.wait_operation(api, response.headers["Operation-Location"], timeout=30)


def compute(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    response = api.get(f"{srv.ws_path}/computes/{name}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def nodes(api: httpx.Client, srv: RunningServer, name: str) -> list[dict[str, Any]]:
    response = api.get(f"{srv.ws_path}/computes/{name}/nodes")
    assert response.status_code == 200, response.text
    value: list[dict[str, Any]] = response.json()["nodes"]
    return value


def submit(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.put(f"{srv.ws_path}/jobs/{name}", json=body)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


def job(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    response = api.get(f"{srv.ws_path}/jobs/{name}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_job(
    api: httpx.Client,
    srv: RunningServer,
    name: str,
    statuses: tuple[str, ...] = TERMINAL,
    timeout: float = 60,
) -> dict[str, Any]:
    return wait_until(
        lambda: (j := job(api, srv, name))["status"] in statuses and j,
        timeout,
        f"job {name} to be {'/'.join(statuses)}",
    )


def logs(api: httpx.Client, srv: RunningServer, name: str, attempt: int | None = None) -> dict[str, Any]:
    params = {"attempt": attempt} if attempt is not None else {}
    response = api.get(f"{srv.ws_path}/jobs/{name}/logs", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def log_text(api: httpx.Client, srv: RunningServer, name: str, attempt: int | None = None) -> str:
    return str(logs(api, srv, name, attempt)["data"])


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error: dict[str, Any] = response.json()["error"]
    return error


def quota_url(srv: RunningServer, name: str) -> str:
    return f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas/{name}"


def rg_lock_url(srv: RunningServer, lock: str) -> str:
    return f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/default/locks/{lock}"


# -- the process table ------------------------------------------------------------------------
def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(state) and state[0] != b"Z"


def processes_with_env(key: str, value: str) -> list[int]:
    """Live (non-zombie) pids whose environment has ``key=value``."""
    pids = []
    needle = value.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle not in handle.read():
                    continue
        except OSError:
            continue
        if _environ(int(entry)).get(key) == value and _alive(int(entry)):
            pids.append(int(entry))
    return pids


def is_agent(pid: int) -> bool:
    argv = _cmdline(pid)
    return any(a == "-m" and b == "cloudlet.agent" for a, b in itertools.pairwise(argv))


def agent_pids(installation: str, node_id: str | None = None) -> list[int]:
    """Agent processes (``python -m cloudlet.agent``) of this installation (and node)."""
    pids = [p for p in processes_with_env("CLOUDLET_INSTALLATION", installation) if is_agent(p)]
    if node_id is not None:
        pids = [p for p in pids if _environ(p).get("CLOUDLET_NODE_ID") == node_id]
    return pids


def agent_nodes(installation: str) -> set[str]:
    """Node ids that have a live agent process of this installation."""
    return {_environ(p).get("CLOUDLET_NODE_ID", "") for p in agent_pids(installation)}


def cmdlines_with_env(key: str, value: str) -> list[list[str]]:
    return [_cmdline(p) for p in processes_with_env(key, value)]


def reap_installation(installation: str) -> None:
    """SIGKILL every process tagged with this installation id (after its server was killed)."""
    for _ in range(20):
        pids = processes_with_env("CLOUDLET_INSTALLATION", installation)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def unmount_under(root: Path) -> None:
    """Unmount whatever a server mounted under its home (instances' OS disks are loop-mounted,
    machine-wide here), so a killed server leaves no mount or loop device behind."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mountinfo") as mounts:
        points = [line.split()[4] for line in mounts if line.split()[4].startswith(prefix)]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@contextlib.contextmanager
def reaped(srv: RunningServer) -> Iterator[str]:
    """Yield the server's installation id; on exit kill the server, then its leftover processes,
    then unmount its disks."""
    installation = installation_id(srv)
    try:
        yield installation
    finally:
        srv.kill()
        reap_installation(installation)
        unmount_under(srv.home)


def served(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    extra_env: dict[str, str] | None = None,
    host: str | None = None,
) -> Iterator[RunningServer]:
    """A test module's server (``yield from`` it in a module-scoped ``srv`` fixture): started in a
    fresh home (listening on HOST, loopback by default), reaped with its agents and OS disk
    mounts at the end."""
    server = start_server(Path(tmp_path_factory.mktemp(name)), extra_env=extra_env, host=host)
    with reaped(server):
        yield server


# -- a background recorder of what the API shows over time -----------------------------------
@dataclass
class Snapshot:
    at: float  # time.time()
    compute: dict[str, Any]
    nodes: list[dict[str, Any]]
    jobs: dict[str, dict[str, Any]]


@dataclass
class Recorder:
    """Polls a cluster, its nodes and some jobs every ``interval`` s in a thread and keeps every
    snapshot, so a test can assert the order of what it saw (states that last a fraction of a
    second included) without racing its own assertions."""

    srv: RunningServer
    compute_name: str
    job_names: list[str] = field(default_factory=list)
    interval: float = 0.05
    snapshots: list[Snapshot] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Recorder:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        now = time.time()  # take one more look, so the record ends with what the test saw last
        deadline = time.monotonic() + 5
        while not (self.snapshots and self.snapshots[-1].at > now) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        with self.srv.client() as api:
            while not self._stop.is_set():
                try:
                    snap = Snapshot(
                        time.time(),
                        compute(api, self.srv, self.compute_name),
                        nodes(api, self.srv, self.compute_name),
                        {n: job(api, self.srv, n) for n in list(self.job_names)},
                    )
                    self.snapshots.append(snap)
                except Exception as exc:  # recorded, asserted empty by the tests
                    self.errors.append(repr(exc))
                self._stop.wait(self.interval)

    def node_states(self) -> dict[str, list[str]]:
        """Each node's Azure nodeState sequence (consecutive repeats collapsed), plus 'gone' when
        it left the list."""
        seen: dict[str, list[str]] = {}
        for snap in self.snapshots:
            present = set()
            for node in snap.nodes:
                present.add(node["nodeId"])
                states = seen.setdefault(node["nodeId"], [])
                if not states or states[-1] != node["nodeState"]:
                    states.append(node["nodeState"])
            for node_id, states in seen.items():
                if node_id not in present and states[-1] != "gone":
                    states.append("gone")
        return seen

    def first(self, predicate: Callable[[Snapshot], bool]) -> Snapshot | None:
        return next((s for s in self.snapshots if predicate(s)), None)

    def last_time(self, predicate: Callable[[Snapshot], bool]) -> float | None:
        times = [s.at for s in self.snapshots if predicate(s)]
        return max(times) if times else None


# -- inference (online and batch deployments) ------------------------------------------------------
def require_inference_environment() -> None:
    """Skip (a failure under CI) unless the inference server's environment, which replicas run
    from when a deployment names none of its own, is installed."""
    from cloudlet.control.online_replicas import default_python

    python = default_python()
    probe = subprocess.run([python, "-c", "import azureml_inference_server_http, sklearn"], check=False)
    if probe.returncode != 0:
        pytest.skip(f"the inference environment ({python}) is missing: run ./scripts/setup.sh")


def served_for_inference(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[RunningServer]:
    """``served`` for a module that deploys models: skipped without the inference environment."""
    require_inference_environment()
    yield from served(tmp_path_factory, name)


def cli_json(srv: RunningServer, *args: str, cwd: Path | None = None, timeout: float = 120) -> Any:
    """``cloudlet ARGS`` as a user runs it, its JSON answer (None when it printed nothing)."""
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "CLOUDLET_OUTPUT": "json"},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout) if done.stdout.strip() else None


def finished_parent(api: httpx.Client, srv: RunningServer, name: str, timeout: float) -> dict[str, Any]:
    """A parent job (a batch invocation) once it has ended; on a timeout, what it and its
    children said."""
    try:
        return wait_job(api, srv, name, timeout=timeout)
    except AssertionError as exc:
        shown = job(api, srv, name)
        kids = [(c["name"], c["status"], log_text(api, srv, c["name"])[-3000:]) for c in shown["children"]]
        raise AssertionError(f"{exc}\n{shown['status']}: {shown.get('status_message')}\n{kids}") from None
