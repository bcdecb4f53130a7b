"""Where an online deployment's replica runs (issue 14): the seam between the runtime
(``control/online_replicas.py``, which decides how many replicas, probes them and routes to
them) and what hosts their processes.

- ``LocalProcess``: a sandboxed process of the server's machine (``--local`` deployments).
- ``AgentProcess``: a replica a node's agent runs (``agent/replicas.py``), on a compute
  instance's node (a deployment with ``compute``) or on a node made for the replica
  (``NodeMaker``, managed deployments: one node per instance, of the deployment's size, on the
  workspace's location, made and released through the provider like an instance's node).

The agents learn what to run from the ``ReplicaBoard``: the desired replicas per node, in this
process (the runtime's view is per process, as the gateway's is), answered to each agent's
report (``POST /agent/v1/nodes/{node}/replicas``). Both kinds of process look alike to the
runtime: ``pid``, ``returncode``, ``poll()`` (None while it lives) and ``stop()``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.actions import Actions, launch_node, release, terminate_node
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.compute.nodes import FAILED, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.resources import ONLINE_DEPLOYMENTS
from cloudlet.providers.base import NodeProvider
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.store.schema import Node, Workspace

NODE_START_TIMEOUT_S = float(os.environ.get("CLOUDLET_ONLINE_NODE_START_TIMEOUT_S") or 120)
AGENT_START_TIMEOUT_S = 600.0  # download and an environment build on the node
WITHDRAW_WAIT_S = 10.0


class ReplicaProcess(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def stop(self) -> None: ...


class LocalProcess:
    """A replica process of this machine (its own session: the group goes with it)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


# -- the board: what each node's agent should run --------------------------------------------
@dataclass
class Assignment:
    id: str
    node_id: str
    spec: dict[str, Any]  # what the agent is sent
    archives: dict[str, Path]  # "code" / "model" → the tar.gz the agent downloads
    log_path: Path  # the agent's log tail lands here (get-logs, failure reasons)
    status: dict[str, Any] = field(default_factory=dict)
    withdrawn: bool = False


class ReplicaBoard:
    def __init__(self) -> None:
        self.assignments: dict[str, Assignment] = {}
        self.held: dict[str, set[str]] = {}  # node → replica ids its agent last reported
        self.reports: dict[str, int] = {}  # node → reports received
        self.changed = threading.Condition()

    def assign(
        self, node_id: str, spec: dict[str, Any], archives: dict[str, Path], log_path: Path
    ) -> Assignment:
        rid = f"r-{secrets.token_hex(6)}"
        base = f"/agent/v1/nodes/{node_id}/replicas/{rid}"
        full = {**spec, "id": rid, "code_url": f"{base}/code", "model_url": f"{base}/model"}
        assignment = Assignment(rid, node_id, full, archives, log_path)
        with self.changed:
            self.assignments[rid] = assignment
        return assignment

    def desired(self, node_id: str) -> list[dict[str, Any]]:
        with self.changed:
            return [a.spec for a in self.assignments.values() if a.node_id == node_id and not a.withdrawn]

    def report(self, node_id: str, statuses: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        """An agent's report of its replicas; the answer is what it should run."""
        with self.changed:
            self.held[node_id] = set(statuses)
            self.reports[node_id] = self.reports.get(node_id, 0) + 1
            for rid, status in statuses.items():
                found = self.assignments.get(rid)
                if found is None or found.node_id != node_id:
                    continue
                text = status.get("log")
                if isinstance(text, str):
                    with contextlib.suppress(OSError):
                        found.log_path.write_text(text, encoding="utf-8")
                found.status = {k: v for k, v in status.items() if k != "log"}
            for rid in [r for r, a in self.assignments.items() if a.withdrawn and a.node_id == node_id]:
                if rid not in statuses:
                    del self.assignments[rid]  # the agent has let it go
            self.changed.notify_all()
        return self.desired(node_id)

    def archive(self, node_id: str, rid: str, part: str) -> Path | None:
        found = self.assignments.get(rid)
        if found is None or found.node_id != node_id or found.withdrawn:
            return None
        return found.archives.get(part)

    def wait(self, check: Callable[[], bool], timeout: float, stop: threading.Event) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check():
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set():
                    return False
                self.changed.wait(min(left, 0.5))
        return True

    def await_report(self, nodes: set[str], timeout: float, stop: threading.Event) -> None:
        """Wait (bounded) until each of NODES has reported once more (what it says is fresh)."""
        with self.changed:
            seen = {n: self.reports.get(n, 0) for n in nodes}
        self.wait(lambda: all(self.reports.get(n, 0) > c for n, c in seen.items()), timeout, stop)

    def withdraw(self, rid: str, wait_s: float = WITHDRAW_WAIT_S) -> None:
        """Ask the agent to stop RID; wait (bounded) until it no longer reports it."""
        with self.changed:
            found = self.assignments.get(rid)
            if found is None:
                return
            found.withdrawn = True
        self.wait(lambda: rid not in self.assignments, wait_s, threading.Event())
        with self.changed:
            self.assignments.pop(rid, None)


class AgentProcess:
    """A replica as its agent reports it. ``on_stop`` runs once it was withdrawn (a node made
    for it is released then)."""

    def __init__(
        self,
        board: ReplicaBoard,
        assignment: Assignment,
        on_stop: Callable[[], None] | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.board, self.assignment, self.on_stop = board, assignment, on_stop
        self.stopping = stopping or threading.Event()
        self._stopped = False

    @property
    def pid(self) -> int:
        return int(self.assignment.status.get("pid") or 0)

    @property
    def node_id(self) -> str:
        return self.assignment.node_id

    @property
    def returncode(self) -> int | None:
        state = self.assignment.status.get("state")
        if self._stopped or state in ("exited", "failed"):
            return int(self.assignment.status.get("exit_code") or 1)
        return None

    def poll(self) -> int | None:
        return self.returncode

    @property
    def address(self) -> tuple[str, int] | None:
        status = self.assignment.status
        if status.get("state") == "running" and status.get("port"):
            return str(status.get("address") or "127.0.0.1"), int(status["port"])
        return None

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # A stopping server serves no more reports: its nodes go with their replicas.
        self.board.withdraw(self.assignment.id, 0.0 if self.stopping.is_set() else WITHDRAW_WAIT_S)
        if self.on_stop is not None:
            self.on_stop()


def pack(folder: Path, archive: Path) -> Path:
    """FOLDER as a tar.gz the agent unpacks (symlinks to model files are followed)."""
    partial = archive.with_name(f".{archive.name}.{secrets.token_hex(4)}")
    with tarfile.open(partial, "w:gz", dereference=True) as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name)
    partial.replace(archive)
    return archive


# -- nodes made for replicas --------------------------------------------------------------------
class NodeMaker:
    """One node per managed replica: recorded (owned by the deployment), launched through the
    location's provider, awaited until its agent registers, released when the replica goes."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        providers: Mapping[str, NodeProvider],
        installation_id: str,
        server_url: Callable[[], str],
    ) -> None:
        self.sessions = sessions
        self.providers = providers
        self.installation_id = installation_id
        self.server_url = server_url

    def make(self, ws_id: int, deployment_id: int, size_name: str, stop: threading.Event) -> tuple[str, str]:
        """(node id, address) of a fresh node whose agent has registered."""
        with self.sessions.begin() as session:
            ws = session.get(Workspace, ws_id)
            assert ws is not None
            size = catalogue_service.current(session).require_size(
                size_name, ComputeType.AMLCOMPUTE, "instance_type"
            )
            owner = node_service.Owner(ONLINE_DEPLOYMENTS, deployment_id, ws_id)
            node, token = node_service.new_node(
                session,
                owner=owner,
                installation_id=self.installation_id,
                location=ws.location,
                size=size,
                tier=Tier.DEDICATED,
            )
            env = {"CLOUDLET_ONLINE_REPLICAS": "1"}
            request = node_service.launch_request(node, token, self.installation_id, self.server_url(), env)
            node_id, location = node.id, node.location
        launch_node(self.providers, self.sessions, location, request)
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        while True:
            with self.sessions() as session:
                row = session.get(Node, node_id)
                assert row is not None
                state, address, error = NodeState(row.state), node_address(row.resources), row.error
            if state in (NodeState.IDLE, NodeState.BUSY) and address:
                return node_id, address
            failure = None
            if state in FAILED or state in (NodeState.TERMINATING, NodeState.TERMINATED):
                failure = (error or {}).get("message") or f"node {node_id} is {state.value}"
            elif time.monotonic() > deadline:
                failure = f"the agent of node {node_id} did not register within {NODE_START_TIMEOUT_S:g} s"
            elif stop.is_set():
                failure = "the server is stopping"
            if failure is not None:
                self.release(node_id)
                raise RuntimeError(failure)
            stop.wait(0.1)

    def release(self, node_id: str) -> None:
        actions = Actions()
        with self.sessions.begin() as session:
            node = session.get(Node, node_id)
            if node is not None:
                release(node, actions, time.time())
        for target, provider, ref in actions.terminations:
            terminate_node(self.providers, self.sessions, target, provider, ref)
