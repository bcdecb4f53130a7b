"""Start and stop server processes for benchmarks: a real cloudlet server and the minimal peer app.

Mirrors ``tests/conftest.py::start_server`` without importing pytest: ``python -m cloudlet server
--port 0 --home DIR``, then wait for ``DIR/config.json`` + ``DIR/credentials`` and ``/healthz``.
Everything is loopback-only and bounded in time; ``stop()`` kills the whole process group.
The code under test is ``$CLOUDLET_BENCH_SRC`` when set (``source_tree()``), else this tree's ``src``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


@dataclass
class ServerProcess:
    """A server subprocess (its own session/process group) reachable at ``endpoint``."""

    process: subprocess.Popen[bytes]
    endpoint: str
    log_path: Path
    api_key: str = ""
    subscription_id: str = ""
    https_endpoint: str = ""  # the same API over TLS (the Azure ML facade's listener)
    ca_file: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def ws_path(self) -> str:
        return f"/api/v1/subscriptions/{self.subscription_id}/resourceGroups/default/workspaces/default"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def pids(self) -> list[int]:
        """The server's processes: its own and, under several workers, the workers it supervises."""
        return server_pids(self.process.pid)

    def rss_kib(self) -> int | None:
        """VmRSS of the server's processes in KiB, summed over its workers (None when it is gone or
        /proc is unavailable)."""
        sizes = [read_vm_rss_kib(pid) for pid in self.pids()]
        return None if sizes[0] is None else sum(size or 0 for size in sizes)

    def stop(self, timeout: float = 10) -> None:
        if self.process.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=timeout)
                return
            except subprocess.TimeoutExpired:
                continue


def read_vm_rss_kib(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def source_tree() -> Path:
    """The ``src`` folder the servers run from: ``$CLOUDLET_BENCH_SRC`` (another checkout's, as
    ``bench/versus.py`` sets it to compare two commits), else this checkout's."""
    given = os.environ.get("CLOUDLET_BENCH_SRC")
    return Path(given).resolve() if given else REPO_ROOT / "src"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    src = str(source_tree())
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def start_cloudlet(
    home: Path, timeout: float | None = None, host: str | None = None, db_url: str | None = None
) -> ServerProcess:
    """Start ``python -m cloudlet server --port 0 --home HOME`` and wait until it answers /healthz
    (on HOST instead of loopback when given: agents in other network namespaces dial it; on the
    database DB_URL instead of HOME's SQLite when given). TIMEOUT:
    ``$CLOUDLET_BENCH_START_TIMEOUT`` or 60 s (two workers took 42-48 s to serve at load 11-21)."""
    if timeout is None:
        timeout = float(os.environ.get("CLOUDLET_BENCH_START_TIMEOUT", "60"))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.json"
    credentials = home / "credentials"
    log_path = home / f"server-{time.time_ns()}.log"
    cmd = [sys.executable, "-m", "cloudlet", "server", "--port", "0", "--tls-port", "0", "--home", str(home)]
    cmd += ["--host", host] if host else []
    cmd += ["--db", db_url] if db_url else []
    env = _env({"CLOUDLET_HOME": str(home)})
    env.pop("CLOUDLET_DB", None)  # embedded SQLite in HOME, whatever the caller's environment says
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = ServerProcess(process, "", log_path)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"cloudlet server exited early:\n{log_path.read_text()}")
            if config.exists() and credentials.exists():
                try:
                    cfg: dict[str, Any] = json.loads(config.read_text())
                    key = json.loads(credentials.read_text())["api_key"]
                except (json.JSONDecodeError, KeyError):
                    cfg, key = {}, ""
                endpoint = cfg.get("endpoint")
                if endpoint and key and _healthy(endpoint + "/healthz"):
                    server.endpoint = endpoint
                    server.api_key = key
                    server.subscription_id = cfg["subscription_id"]
                    server.https_endpoint = cfg.get("https_endpoint", "")
                    server.ca_file = cfg.get("ca_file", "")
                    return server
            time.sleep(0.1)
        raise RuntimeError(f"cloudlet server did not become ready:\n{log_path.read_text()}")
    except BaseException:
        server.stop()
        raise


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def start_peer(body_path: Path, api_key: str, log_dir: Path, timeout: float = 30) -> ServerProcess:
    """Start the peer app (``bench/_peer_app.py``) serving the bytes in BODY_PATH behind a bearer check."""
    log_path = log_dir / f"peer-{time.time_ns()}.log"
    for _attempt in range(3):  # the probed port can be taken between probe and bind: retry a few times
        port = _free_port()
        cmd = [sys.executable, str(Path(__file__).with_name("_peer_app.py")), HOST, str(port), str(body_path)]
        env = _env({"BENCH_PEER_KEY": api_key})
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        server = ServerProcess(process, f"http://{HOST}:{port}", log_path, api_key=api_key)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and process.poll() is None:
                if _healthy(server.endpoint + "/healthz"):
                    return server
                time.sleep(0.1)
        except BaseException:
            server.stop()
            raise
        server.stop()
    raise RuntimeError(f"peer app did not become ready:\n{log_path.read_text()}")


# -- node processes (agents outlive the server by design) ------------------------------------
def proc_environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def server_pids(pid: int) -> list[int]:
    """PID and its direct children that are workers of ``cloudlet server --workers N`` (their
    environment names ``CLOUDLET_WORKER``); a single-process server's children are node agents
    and replicas, not the server."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        children = []
    return [pid, *(child for child in children if "CLOUDLET_WORKER" in proc_environ(child))]


def node_processes(home: Path) -> dict[int, dict[str, str]]:
    """Live processes started for this home's nodes (agents and their runs): their environment
    carries ``CLOUDLET_NODE_DIR`` under HOME. pid -> {"node", "kind"}."""
    prefix = str(home) + os.sep
    found: dict[int, dict[str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = proc_environ(int(entry))
        if not env.get("CLOUDLET_NODE_DIR", "").startswith(prefix):
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        is_agent = any(a == b"-m" and b == b"cloudlet.agent" for a, b in itertools.pairwise(argv))
        found[int(entry)] = {"node": env.get("CLOUDLET_NODE_ID", "?"), "kind": "agent" if is_agent else "run"}
    return found


def unmount_under(root: Path) -> None:
    """Unmount what a server mounted under its home (instances' OS disks are loop-mounted images)."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mountinfo") as mounts:
        points = [line.split()[4] for line in mounts if line.split()[4].startswith(prefix)]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def kill_node_processes(home: Path) -> int:
    """SIGKILL whatever this home's nodes left running (agents live in their own sessions and
    outlive the server), then unmount their disks. Bounded: a few sweeps."""
    try:
        return _kill_node_processes(home)
    finally:
        unmount_under(home)


def _kill_node_processes(home: Path) -> int:
    killed = 0
    for _ in range(10):
        procs = node_processes(home)
        if not procs:
            break
        for pid in procs:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)
    return killed


def status_kib(pid: int, field: str) -> int | None:
    """A ``/proc/PID/status`` memory field (``VmRSS``, ``VmHWM``) in KiB; None if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
