"""The node agent as a real process (started by LocalProvider) against a fake control plane.

`FakeControlPlane` is a TEST DOUBLE: a small stdlib HTTP server implementing the agent routes of
docs/agent-protocol.md and recording every call. The real control-plane routes are being written
in parallel; this fake pins the protocol from the agent's side. Nothing of the agent is mocked.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cloudlet.agent.client import AgentClient, Backoff, Unreachable
from cloudlet.agent.config import AgentConfig, ConfigError
from cloudlet.agent.runstate import exit_code_of, utf8_cut
from cloudlet.providers.base import NodeHandle, NodeProvider, NodeRequest, SupportsResourceLimits
from cloudlet.providers.local import LocalProvider, parse_environ, process_alive

T = TypeVar("T")
NODE_ROUTE = re.compile(r"^/agent/v1/nodes/([^/]+)/(register|poll)$")
RUN_ROUTE = re.compile(r"^/agent/v1/runs/([^/]+)/(logs|exit)$")


@dataclass
class Call:
    method: str
    path: str
    body: Any
    authorization: str
    at: float = field(default_factory=time.monotonic)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # agents killed mid-connection reset their sockets: expected here


class FakeControlPlane:
    """Test double of the control plane's agent API (register, long poll, logs, exit, files)."""

    def __init__(self, poll_timeout_s: float = 2.0) -> None:
        self.poll_timeout_s = poll_timeout_s
        self.cond = threading.Condition()
        self.calls: list[Call] = []
        self.tokens: dict[str, str] = {}  # node -> valid token
        self.commands: dict[str, dict[str, Any]] = {}
        self.logs: dict[str, list[tuple[int, str]]] = {}  # run -> accepted chunks
        self.exits: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self.exit_log = False  # told at registration: a run's last log chunk may come with its exit
        self.down = False
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- control from the test -----------------------------------------------------------------
    def _start(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        self._server = _QuietServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def go_down(self) -> None:
        """Refuse new connections and drop requests on open ones, without answering."""
        with self.cond:
            self.down = True
            self.cond.notify_all()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def come_back(self) -> None:
        with self.cond:
            self.down = False
        self._start()

    def close(self) -> None:
        if self._server is not None and not self.down:
            self._server.shutdown()
            self._server.server_close()

    def command(
        self,
        node: str,
        *,
        start: dict[str, Any] | None = None,
        cancel: str | None = None,
        terminate: bool = False,
    ) -> None:
        with self.cond:
            cmd = self.commands.setdefault(node, {"start": [], "cancel": [], "terminate": False})
            if start:
                cmd["start"].append(start)
            if cancel:
                cmd["cancel"].append(cancel)
            cmd["terminate"] = cmd["terminate"] or terminate
            self.cond.notify_all()

    def revoke(self, node: str) -> None:
        with self.cond:
            self.tokens.pop(node, None)
            self.cond.notify_all()

    def wait_for(
        self, predicate: Callable[[], T | None], timeout: float = 10.0, what: str = "condition"
    ) -> T:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out waiting for {what}; calls: {[c.path for c in self.calls]}"
                    )
                self.cond.wait(min(left, 0.05))

    def calls_to(self, suffix: str, node_or_run: str) -> list[Call]:
        return [c for c in self.calls if c.path.endswith(f"/{node_or_run}/{suffix}")]

    def log_text(self, run: str) -> str:
        return "".join(data for _, data in self.logs.get(run, []))

    # -- serving -------------------------------------------------------------------------------
    def _reply(self, h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        auth = h.headers.get("Authorization", "")
        with self.cond:
            if self.down:
                h.close_connection = True
                return
            self.calls.append(Call(method, h.path, json.loads(raw) if raw else None, auth))
            self.cond.notify_all()
            valid = {f"Bearer {t}" for t in self.tokens.values()}
        node_match, run_match = NODE_ROUTE.match(h.path), RUN_ROUTE.match(h.path)
        if node_match:
            node = node_match.group(1)
            if auth != f"Bearer {self.tokens.get(node)}":
                return self._reply(h, 401, {"error": {"code": "Unauthorized", "message": "bad node token"}})
            if node_match.group(2) == "register":
                answer = {"heartbeat_s": 1, "poll_timeout_s": self.poll_timeout_s, "exit_log": self.exit_log}
                return self._reply(h, 200, answer)
            return self._poll(h, node)
        if auth not in valid:
            return self._reply(h, 401, {"error": {"code": "Unauthorized", "message": "bad node token"}})
        if run_match and method == "POST":
            run, kind = run_match.groups()
            body = json.loads(raw)
            with self.cond:
                chunk = body if kind == "logs" else body.get("log")
                if chunk is not None:
                    chunks = self.logs.setdefault(run, [])
                    have = sum(len(d.encode()) for _, d in chunks)
                    if chunk["offset"] == have:
                        chunks.append((chunk["offset"], chunk["data"]))
                    elif chunk["offset"] > have:
                        return self._reply(h, 409, {"error": {"code": "Gap", "message": f"expected {have}"}})
                if kind != "logs":
                    self.exits.setdefault(run, body)
                self.cond.notify_all()
            return self._reply(h, 200, {"ok": True})
        if method == "GET" and h.path in self.files:
            return self._reply(h, 200, self.files[h.path])
        return self._reply(h, 404, {"error": {"code": "NotFound", "message": h.path}})

    def _poll(self, h: BaseHTTPRequestHandler, node: str) -> None:
        deadline = time.monotonic() + self.poll_timeout_s
        with self.cond:
            while True:
                if self.down:
                    h.close_connection = True
                    return
                if node not in self.tokens:
                    break
                cmd = self.commands.get(node)
                if cmd and (cmd["start"] or cmd["cancel"] or cmd["terminate"]):
                    self.commands[node] = {"start": [], "cancel": [], "terminate": False}
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    cmd = {"start": [], "cancel": [], "terminate": False}
                    break
                self.cond.wait(left)
        if node not in self.tokens:
            return self._reply(h, 401, {"error": {"code": "Unauthorized", "message": "node terminated"}})
        self._reply(h, 200, cmd)


# -- fixtures and helpers ---------------------------------------------------------------------
@dataclass
class Node:
    req: NodeRequest
    handle: NodeHandle

    @property
    def id(self) -> str:
        return self.req.node_id

    @property
    def pid(self) -> int:
        return int(self.handle.provider_ref["pid"])


@pytest.fixture
def fake() -> Iterator[FakeControlPlane]:
    plane = FakeControlPlane()
    yield plane
    plane.close()


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    parent = f"cloudlet-test-{os.getpid()}"
    prov = LocalProvider(tmp_path / "nodes", cgroup_parent=parent)
    yield prov
    for controller in ("cpu", "memory"):
        path = Path("/sys/fs/cgroup") / controller / parent
        if path.is_dir():
            for child in path.iterdir():
                if child.is_dir():
                    child.rmdir()
            path.rmdir()


@pytest.fixture
def start_node(fake: FakeControlPlane, provider: LocalProvider) -> Iterator[Callable[[], Node]]:
    nodes: list[Node] = []

    def start() -> Node:
        node_id = f"n-{uuid.uuid4().hex[:8]}"
        req = NodeRequest(
            node_id=node_id,
            token=f"tok-{uuid.uuid4().hex}",
            installation_id=f"inst-{uuid.uuid4().hex[:8]}",
            server_url=fake.url,
            size="Standard_DS3_v2",
            vcpus=2,
            memory_gb=4,
        )
        with fake.cond:
            fake.tokens[node_id] = req.token
        node = Node(req, provider.create(req))
        nodes.append(node)
        fake.wait_for(lambda: fake.calls_to("register", node_id), what="registration")
        return node

    yield start
    for node in nodes:
        provider.terminate(node.handle)


def run_spec(command: str, **extra: Any) -> dict[str, Any]:
    spec = {
        "run": f"r-{uuid.uuid4().hex[:8]}",
        "job": "job-1",
        "attempt": 1,
        "rank": 0,
        "command": command,
        "cwd_code": None,
        "env": {},
        "timeout_s": 60,
        "log_name": "user_logs/std_log.txt",
    }
    spec.update(extra)
    return spec


def run_pids(run: str) -> list[int]:
    """Live processes of a run (they carry CLOUDLET_RUN_ID in their environment)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if parse_environ(raw).get("CLOUDLET_RUN_ID") == run and process_alive(int(entry)):
            pids.append(int(entry))
    return pids


def wait_until(predicate: Callable[[], T | None], timeout: float = 10.0, what: str = "it") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def run_tree(run: str, at_least: int) -> list[int] | None:
    pids = run_pids(run)
    return pids if len(pids) >= at_least else None


def vm_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# -- tests ------------------------------------------------------------------------------------
def test_registers_idles_is_listed_and_stays_small(
    fake: FakeControlPlane, provider: LocalProvider, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    reg = fake.calls_to("register", node.id)[0]
    assert reg.authorization == f"Bearer {node.req.token}"
    assert reg.body["pid"] == node.pid and reg.body["runs"] == [] and reg.body["agent_version"]
    assert reg.body["address"] == "127.0.0.1"  # the local provider says so: the node is this host
    res = reg.body["resources"]
    assert 0 < res["vcpus"] <= 2 and 0 < res["memory_gb"] <= 4 and res["gpus"] == 0 and res["disk_gb"] > 0
    poll = fake.wait_for(lambda: fake.calls_to("poll", node.id), what="a poll")[0]
    assert poll.body["idle"] is True and poll.body["runs"] == []
    assert {"cpu_percent", "memory_mb", "disk_mb"} <= set(poll.body["usage"])

    found = provider.list_nodes(node.req.installation_id)
    assert [h.node_id for h in found] == [node.id] and found[0].provider_ref["pid"] == node.pid
    assert provider.list_nodes("inst-someone-else") == []
    assert isinstance(provider, NodeProvider) and isinstance(provider, SupportsResourceLimits)
    if node.handle.provider_ref["limits_applied"]:
        limits = provider.resource_limits(node.handle)
        assert limits is not None
        assert limits["cpu_quota_us"] == 2 * limits["cpu_period_us"]
        assert limits["memory_bytes"] == 4 * 1024**3
        procs = Path(node.handle.provider_ref["cgroups"]["memory"], "cgroup.procs").read_text().split()
        assert str(node.pid) in procs

    time.sleep(1.0)  # idle: a held poll in flight
    rss_kb = vm_rss_kb(node.pid)
    print(f"agent idle VmRSS: {rss_kb / 1024:.1f} MiB")
    assert rss_kb <= 40 * 1024


def test_run_streams_merged_logs_with_offsets_and_reports_exit_code(
    fake: FakeControlPlane, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    spec = run_spec("""echo hello; python -c "import sys; print('err', file=sys.stderr)"; exit 3""")
    fake.command(node.id, start=spec)
    exit_body = fake.wait_for(lambda: fake.exits.get(spec["run"]), what="exit")
    assert exit_body["exit_code"] == 3 and exit_body["reason"] == "exited" and exit_body["ended_at"] > 0
    assert fake.log_text(spec["run"]) == "hello\nerr\n"
    offset = 0
    for chunk_offset, data in fake.logs[spec["run"]]:
        assert chunk_offset == offset
        offset += len(data.encode())
    log_calls = fake.calls_to("logs", spec["run"])
    assert log_calls and max(c.at for c in log_calls) <= fake.calls_to("exit", spec["run"])[0].at
    assert (Path(node.handle.provider_ref["node_dir"]) / "work" / spec["run"]).is_dir()


def _log_rode_on_exit(fake: FakeControlPlane, run: str, expected: str) -> bool:
    """The run's log arrived whole and in order; whether its last chunk came with the exit (at the
    offset the chunks posted before it reach)."""
    exit_body = fake.wait_for(lambda: fake.exits.get(run), what="exit")
    assert fake.log_text(run) == expected
    posted = sum(len(c.body["data"].encode()) for c in fake.calls_to("logs", run))
    tail = exit_body.get("log")
    if tail is None:
        assert posted == len(expected.encode())  # all of it went while the run still ran
        return False
    assert tail["offset"] == posted and posted + len(tail["data"].encode()) == len(expected.encode())
    return True


def test_a_server_that_takes_the_log_with_the_exit_gets_its_last_chunk_there(
    fake: FakeControlPlane, start_node: Callable[[], Node]
) -> None:
    """One request where there were two: a run whose log is unsent when it ends sends the rest
    with its exit. (A sender that wakes between a run's last write and its end posts the log
    alone, as before: of several tiny runs, most end first.)"""
    fake.exit_log = True
    node = start_node()
    carried = []
    for i in range(5):
        spec = run_spec(f"echo tiny-{i}; exit 2")
        fake.command(node.id, start=spec)
        carried.append(_log_rode_on_exit(fake, spec["run"], f"tiny-{i}\n"))
        assert fake.exits[spec["run"]]["exit_code"] == 2
    assert any(carried), "no tiny run's log came with its exit"
    spec = run_spec("seq 1 20000")  # more than a chunk: the first ones are posted alone
    fake.command(node.id, start=spec)
    _log_rode_on_exit(fake, spec["run"], "".join(f"{i}\n" for i in range(1, 20_001)))
    assert fake.calls_to("logs", spec["run"])


def test_code_snapshot_is_fetched_with_the_node_token_and_unpacked(
    fake: FakeControlPlane, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in {"train.py": "print('trained')\n", "data/x.txt": "xyz\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    fake.files["/files/snap-1.tar.gz"] = buf.getvalue()
    spec = run_spec("python train.py && cat data/x.txt", cwd_code=f"{fake.url}/files/snap-1.tar.gz")
    fake.command(node.id, start=spec)
    exit_body = fake.wait_for(lambda: fake.exits.get(spec["run"]), what="exit")
    assert exit_body["exit_code"] == 0, fake.log_text(spec["run"])
    assert fake.log_text(spec["run"]) == "trained\nxyz\n"
    get = next(c for c in fake.calls if c.path == "/files/snap-1.tar.gz")
    assert get.method == "GET" and get.authorization == f"Bearer {node.req.token}"


def test_cancel_kills_the_process_tree_within_two_seconds(
    fake: FakeControlPlane, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    # The shell and its children ignore SIGTERM, so this also proves the SIGKILL after 1 s.
    spec = run_spec("trap '' TERM; sleep 60 & sleep 60; wait")
    fake.command(node.id, start=spec)
    pids = wait_until(lambda: run_tree(spec["run"], 3), what="run processes")
    began = time.monotonic()
    fake.command(node.id, cancel=spec["run"])
    wait_until(lambda: not any(process_alive(p) for p in pids), timeout=2.0, what="the tree to die")
    assert time.monotonic() - began < 2.0
    exit_body = fake.wait_for(lambda: fake.exits.get(spec["run"]), what="exit")
    assert exit_body["reason"] == "canceled" and exit_body["exit_code"] == 128 + signal.SIGKILL


OUTAGE_NOTICED = "control plane call failed"


def test_run_survives_an_outage_and_its_exit_is_reported_after_reconnect(
    fake: FakeControlPlane, provider: LocalProvider, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    spec, long_spec = run_spec("sleep 3; echo done"), run_spec("sleep 30")
    fake.command(node.id, start=spec)
    fake.command(node.id, start=long_spec)
    pids = wait_until(lambda: run_pids(spec["run"]), what="the run to start")
    wait_until(lambda: run_pids(long_spec["run"]), what="the long run to start")
    noticed = provider.node_log(node.handle).count(OUTAGE_NOTICED)
    fake.go_down()
    # Not a sleep: the agent has met the outage (its call failed) and its runs live on.
    wait_until(
        lambda: provider.node_log(node.handle).count(OUTAGE_NOTICED) > noticed,
        30,
        "the agent to meet the outage",
    )
    assert all(process_alive(p) for p in pids), "the run died while the control plane was away"
    assert not fake.exits
    registrations_before = len(fake.calls_to("register", node.id))
    fake.come_back()
    exit_body = fake.wait_for(lambda: fake.exits.get(spec["run"]), timeout=10, what="exit after reconnect")
    assert exit_body["exit_code"] == 0 and fake.log_text(spec["run"]) == "done\n"
    regs = fake.wait_for(
        lambda: fake.calls_to("register", node.id)[registrations_before:], what="re-registration"
    )
    # The re-registration tells the server what still runs here.
    assert {"run": long_spec["run"], "state": "running"}.items() <= next(
        r for r in regs[0].body["runs"] if r["run"] == long_spec["run"]
    ).items()
    assert long_spec["run"] not in fake.exits


def test_revoked_token_stops_runs_and_the_agent_exits_zero(
    fake: FakeControlPlane, provider: LocalProvider, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    spec = run_spec("sleep 60")
    fake.command(node.id, start=spec)
    pids = wait_until(lambda: run_pids(spec["run"]), what="the run to start")
    fake.revoke(node.id)
    wait_until(lambda: provider.exit_code(node.handle) is not None, timeout=5, what="agent exit")
    assert provider.exit_code(node.handle) == 0
    assert not any(process_alive(p) for p in pids)


def test_terminate_command_stops_runs_reports_them_and_exits_zero(
    fake: FakeControlPlane, provider: LocalProvider, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    spec = run_spec("sleep 60")
    fake.command(node.id, start=spec)
    pids = wait_until(lambda: run_pids(spec["run"]), what="the run to start")
    fake.command(node.id, terminate=True)
    wait_until(lambda: provider.exit_code(node.handle) is not None, timeout=5, what="agent exit")
    assert provider.exit_code(node.handle) == 0
    assert not any(process_alive(p) for p in pids)
    assert fake.exits[spec["run"]]["reason"] == "canceled"


def test_terminate_stops_agent_and_runs_and_cleans_up(
    fake: FakeControlPlane, provider: LocalProvider, start_node: Callable[[], Node]
) -> None:
    node = start_node()
    spec = run_spec("sleep 60 & sleep 60; wait")
    fake.command(node.id, start=spec)
    pids = wait_until(lambda: run_tree(spec["run"], 3), what="run processes")
    began = time.monotonic()
    provider.terminate(node.handle)
    assert time.monotonic() - began < 3.5
    assert not process_alive(node.pid) and not any(process_alive(p) for p in pids)
    assert fake.exits[spec["run"]]["reason"] == "canceled"  # the agent reported on SIGTERM
    node_dir = Path(node.handle.provider_ref["node_dir"])
    assert (node_dir / "agent.log").is_file() and "shutting down" in provider.node_log(node.handle)
    assert not (node_dir / "work").exists() and not (node_dir / "mnt").exists()
    for path in node.handle.provider_ref["cgroups"].values():
        assert not Path(path).exists()
    assert provider.list_nodes(node.req.installation_id) == []
    provider.terminate(node.handle)  # idempotent


# -- agent pure parts (fast) ------------------------------------------------------------------
def test_backoff_doubles_from_a_tenth_to_two_seconds() -> None:
    b = Backoff()
    assert [b.next() for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    b.reset()
    assert b.next() == 0.1


def test_utf8_cut_never_splits_a_character() -> None:
    text = "añ€😀".encode()
    assert utf8_cut(text) == len(text)
    for n in range(len(text) + 1):
        cut = utf8_cut(text[:n])
        text[:cut].decode()  # valid
        assert n - cut < 4


def test_exit_codes_of_signals_follow_the_shell() -> None:
    assert exit_code_of(3) == 3 and exit_code_of(-9) == 137


def test_config_from_env() -> None:
    env = {
        "CLOUDLET_SERVER": "https://cp.example:8571/",
        "CLOUDLET_NODE_ID": "n-1",
        "CLOUDLET_NODE_TOKEN": "t",
        "CLOUDLET_NODE_DIR": "/tmp/n-1",
        "CLOUDLET_NODE_VCPUS": "4",
        "CLOUDLET_NODE_GPUS": "1",
    }
    cfg = AgentConfig.from_env(env)
    assert cfg.server == "https://cp.example:8571" and cfg.vcpus == 4 and cfg.gpus == 1
    assert cfg.memory_gb is None and cfg.work_dir == Path("/tmp/n-1/work")
    assert cfg.node_address is None
    assert AgentConfig.from_env({**env, "CLOUDLET_NODE_ADDRESS": " 10.0.0.7 "}).node_address == "10.0.0.7"
    with pytest.raises(ConfigError, match="CLOUDLET_NODE_TOKEN"):
        AgentConfig.from_env({k: v for k, v in env.items() if k != "CLOUDLET_NODE_TOKEN"})


def test_without_an_address_the_agent_reports_its_connections_local_address(fake: FakeControlPlane) -> None:
    client = AgentClient(fake.url, "t")
    try:
        assert client.local_address() == "127.0.0.1"  # the interface that routes to the control plane
    finally:
        client.close()
    fake.go_down()
    with pytest.raises(Unreachable):
        AgentClient(fake.url, "t", timeout=2).local_address()
