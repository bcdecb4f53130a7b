"""The agent: register, then long-poll for commands; keep runs alive through outages."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from types import FrameType
from typing import Any

from cloudlet.agent.apps import AppSupervisor
from cloudlet.agent.client import AgentClient, Backoff, HTTPStatusError, Revoked, Unreachable
from cloudlet.agent.config import AGENT_VERSION, AgentConfig, ConfigError, log
from cloudlet.agent.launcher_client import node_launcher
from cloudlet.agent.monitor import RunMonitor
from cloudlet.agent.replicas import ReplicaSupervisor
from cloudlet.agent.runner import KILL_AFTER_S, RunManager
from cloudlet.agent.usage import UsageSampler, resources
from cloudlet.nodekit.sandbox import Sandbox, SandboxError


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.client = AgentClient(config.server, config.token, ca_file=config.ca_file)
        self.wake = threading.Event()
        # Every user process of the node runs in it (docs/isolation.md); built once, here.
        self.sandbox = Sandbox.from_env(config.node_dir, config.node_id)
        self.runs = RunManager(
            self.client,
            config.work_dir,
            on_change=self.wake.set,
            sandbox=self.sandbox,
            signal_means=config.signal_means,
            shared_filesystem=config.shared_filesystem,
            # Job runs start in the node's launcher, one sandbox for the node (docs/isolation.md).
            launcher=node_launcher(self.sandbox),
        )
        self.usage = UsageSampler(config.node_dir, config.vcpus)
        # Per-run resource samples, sent with the polls (CLOUDLET_MONITOR_INTERVAL_S=0: none).
        self.monitor_interval_s = float(os.environ.get("CLOUDLET_MONITOR_INTERVAL_S") or 5.0)
        self.monitor = RunMonitor(self._sampled_runs, config.node_dir, self.monitor_interval_s)
        self.stop = threading.Event()
        self.apps = AppSupervisor.from_env(
            self.client, config.node_id, config.node_dir, self.stop, self.sandbox
        )
        # Online-deployment replicas (nodes made for a deployment, compute instances).
        self.replicas: ReplicaSupervisor | None = None
        if ReplicaSupervisor.wanted(os.environ):
            self.replicas = ReplicaSupervisor(
                self.client,
                config.node_id,
                config.node_dir,
                config.node_address or "",
                self.sandbox,
                self.stop,
            )
        self.stop_reason = ""
        self.heartbeat_s = 5.0
        self.poll_timeout_s = 20.0
        self._resources: dict[str, Any] | None = None

    def _sampled_runs(self) -> list[tuple[str, int]]:
        return [(r.run_id, r.pid) for r in self.runs.running() if r.pid is not None]

    @property
    def _node_path(self) -> str:
        return f"/agent/v1/nodes/{self.config.node_id}"

    def halt(self, reason: str) -> None:
        if not self.stop.is_set():
            self.stop_reason = reason
            self.stop.set()
            self.wake.set()

    # -- calls ---------------------------------------------------------------------------------
    def register(self) -> None:
        if self._resources is None:
            c = self.config
            self._resources = resources(c.node_dir, c.vcpus, c.memory_gb, c.gpus)
        body = {
            "agent_version": AGENT_VERSION,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "address": self.config.node_address or self.client.local_address(),
            "resources": self._resources,
            "runs": self.runs.statuses(),
        }
        answer = self.client.call("POST", self._node_path + "/register", body) or {}
        self.heartbeat_s = float(answer.get("heartbeat_s") or self.heartbeat_s)
        self.poll_timeout_s = float(answer.get("poll_timeout_s") or self.poll_timeout_s)
        self.runs.exit_carries_log = answer.get("exit_log") is True

    def poll_once(self) -> dict[str, Any]:
        # Run states travel by the sender (running after a short while, exits with their logs);
        # the poll only says which runs the agent holds, so a lost start is sent again.
        body = {
            "runs": [],
            "reported": self.runs.held(),
            "usage": self.usage.sample(),
            "idle": not self.runs.running(),
        }
        samples = self.monitor.take()
        if samples:
            body["samples"] = samples
        try:
            answer = self.client.call(
                "POST", self._node_path + "/poll", body, timeout=self.poll_timeout_s + 10
            )
        except (Unreachable, HTTPStatusError):
            self.monitor.give_back(samples)
            raise
        return answer if isinstance(answer, dict) else {}

    def handle(self, answer: dict[str, Any]) -> bool:
        """Carry out a poll answer; True when it held a command."""
        starts, cancels = answer.get("start") or [], answer.get("cancel") or []
        for spec in starts:
            if isinstance(spec, dict):
                self.runs.start(spec)
        for run_id in cancels:
            self.runs.cancel(str(run_id))
        if answer.get("terminate"):
            self.halt("terminate")
        return bool(starts or cancels or answer.get("terminate"))

    # -- the poll loop (a thread) --------------------------------------------------------------
    def loop(self) -> None:
        backoff = Backoff()
        registered = False
        failures = 0
        # A local node boots in a fraction of a second; CLOUDLET_BOOT_DELAY_S makes it take as
        # long as a VM would, so a demo or a test can watch (or crash into) the preparing state.
        self.stop.wait(float(os.environ.get("CLOUDLET_BOOT_DELAY_S") or 0))
        while not self.stop.is_set():
            if self.runs.revoked.is_set():
                self.halt("revoked")
                return
            began = time.monotonic()
            try:
                if not registered:
                    self.register()
                    registered = True
                    log(f"registered with {self.config.server} ({len(self.runs.statuses())} runs)")
                answer = self.poll_once()
            except Revoked as exc:
                log(f"token refused ({exc}): stopping")
                self.halt("revoked")
                return
            except (Unreachable, HTTPStatusError) as exc:
                if isinstance(exc, Unreachable) or exc.status in (404, 409):
                    registered = False  # re-register (with our runs) once the server answers
                failures += 1
                if failures % 30 == 1:
                    log(f"control plane call failed ({failures}x), retrying: {exc}")
                away = time.monotonic() - self.client.last_answered
                if away > self.config.orphan_grace_s:
                    log(
                        f"control plane unreachable for {away:.0f} s (grace {self.config.orphan_grace_s:g} s)"
                    )
                    self.halt("orphaned")
                    return
                self.stop.wait(backoff.next())
                continue
            if failures:
                log(f"control plane reachable again after {failures} failed calls")
                backoff.reset()
                failures = 0
            if self.handle(answer):
                continue
            if time.monotonic() - began < 1.0:  # the server did not hold the poll: pace ourselves
                self.wake.wait(self.heartbeat_s)
                self.wake.clear()

    # -- process lifetime ----------------------------------------------------------------------
    def run(self) -> int:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            if signum == signal.SIGTERM:
                self.runs.signalled()  # before the runs stop: they end as the signal means
            self.halt("signal")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        data = "on a shared filesystem" if self.config.shared_filesystem else "over HTTP"
        log(
            f"node {self.config.node_id} starting (pid {os.getpid()}, server {self.config.server}, "
            f"job data {data})"
        )
        threading.Thread(target=self.loop, name="poll", daemon=True).start()
        if self.monitor_interval_s > 0:
            threading.Thread(target=self.monitor.loop, args=(self.stop,), name="monitor", daemon=True).start()
        if self.apps is not None:  # a compute instance's node: JupyterLab and friends
            self.apps.start()
        if self.replicas is not None:
            self.replicas.start()
        while not self.stop.wait(0.5):
            if self.runs.revoked.is_set():
                self.halt("revoked")
        return self.shutdown()

    def shutdown(self) -> int:
        deadline = time.monotonic() + self.config.shutdown_s
        log(f"shutting down ({self.stop_reason})")
        if self.apps is not None:
            self.apps.close()
        if self.replicas is not None:
            self.replicas.close()
        self.runs.stop_all("canceled", wait_s=min(KILL_AFTER_S + 0.5, self.config.shutdown_s))
        if self.stop_reason == "orphaned" and self.apps is not None:
            self.apps.release_os_disk()  # nobody else is left to unmount it
        if self.stop_reason not in ("revoked", "orphaned") and not self.runs.flush(deadline):
            log(f"{self.runs.pending()} run exits not acknowledged before exit")
        self.runs.close()
        self.client.close()
        return 0


USAGE = """usage: python -m cloudlet.agent

The cloudlet node agent. It takes no arguments: the provider that starts it sets its environment
(docs/agent-protocol.md): CLOUDLET_SERVER, CLOUDLET_NODE_ID, CLOUDLET_NODE_TOKEN, CLOUDLET_NODE_DIR,
and optionally CLOUDLET_NODE_ADDRESS (where other nodes and the control plane's proxy reach this
node; else the local address of its connection to the control plane), CLOUDLET_CA_FILE,
CLOUDLET_NODE_VCPUS, CLOUDLET_NODE_MEMORY_GB, CLOUDLET_NODE_GPUS, CLOUDLET_SANDBOX*,
CLOUDLET_SHARED_FILESYSTEM (0: jobs' data moves over HTTP), CLOUDLET_CHECKPOINT_UPLOAD_S."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        print(USAGE, file=sys.stdout if args[0] in ("-h", "--help") else sys.stderr)
        return 0 if args[0] in ("-h", "--help") else 2
    try:
        config = AgentConfig.from_env()
        agent = Agent(config)
    except (ConfigError, SandboxError) as exc:
        log(str(exc))
        return 2
    if agent.sandbox.enabled:
        log(f"user processes run sandboxed as uid {agent.sandbox.owner[0]} ({agent.sandbox.user_name()})")
    return agent.run()
