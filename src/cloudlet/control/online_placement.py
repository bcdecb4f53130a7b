"""Where a deployment's replicas go, and starting one on a node's agent (issue 14).

``Placement.of`` reads the rule (``domain/endpoints/online_endpoints.placement_kind``): a ``--local``
deployment runs as processes of the server's machine; one with ``compute`` on that compute
instance's node; any other (managed) on nodes made for it, one per replica. ``AgentHosts.start``
makes (or finds) the node, puts the replica on the ``ReplicaBoard`` for that node's agent and
waits until the agent says where the server listens; the runtime then probes it as any replica.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.replica_hosts import (
    AGENT_START_TIMEOUT_S,
    AgentProcess,
    NodeMaker,
    ReplicaBoard,
    pack,
)
from cloudlet.domain.assets import environments
from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.compute.nodes import HOLDING, NodeState
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.resources import ONLINE_DEPLOYMENTS
from cloudlet.services.compute import nodes as node_service
from cloudlet.store.schema import Compute, Node

INFERENCE_PACKAGE = "azureml-inference-server-http"


@dataclass(frozen=True)
class Placement:
    kind: str  # process | instance | node
    ws_id: int
    deployment_id: int
    instance_type: str
    compute: str | None = None

    @classmethod
    def of(
        cls, spec: rules.DeploymentSpec, ws_id: int, deployment_id: int, local: bool, makes_nodes: bool = True
    ) -> Placement:
        """Where a deployment's replicas run. A runtime that makes no nodes for replicas (a
        worker of ``--workers N`` other than worker 0, which runs none) would run a managed
        deployment's replicas as processes on its own host, as ``--local`` ones."""
        kind = rules.placement_kind(local, spec.compute)
        if kind == "node" and not makes_nodes:
            kind = "process"
        return cls(kind, ws_id, deployment_id, spec.instance_type, spec.compute)


def replica_environment(spec: rules.DeploymentSpec) -> dict[str, object] | None:
    """What the node prepares for the replica, as for a job (``nodekit/envs.py``): the deployment's
    inline environment (image + conda_file, or pip; a registered one is inlined when the
    deployment is written) with the inference server added; None (the node's inference
    interpreter) when none is given or it is only named. An image with no packages is passed as
    is: nodes run no containers yet, so the agent warns and uses the node's inference interpreter
    (an Azure inference image carries the server); an image with packages gets their venv."""
    if isinstance(spec.environment_doc, dict):
        resolved = environments.resolve_environment(spec.environment_doc)
    elif spec.environment and environments.curated_environment(spec.environment) is not None:
        resolved = environments.resolve_environment(spec.environment)
    else:
        return None  # only named (or none): the node's inference interpreter
    if resolved.kind == "python":
        return None
    if resolved.kind == "image" and not resolved.pip:
        return dataclasses.asdict(resolved)
    pip = list(resolved.pip)
    if not any(p.lower().replace("_", "-").startswith(INFERENCE_PACKAGE) for p in pip):
        pip.append(INFERENCE_PACKAGE)
    again = environments._resolved(resolved.kind, pip, resolved.image, resolved.name, resolved.python)
    return dataclasses.asdict(again)


@dataclass
class HeldNode:
    """The node a replica runs on; ``on_stop`` releases it (a node made for the replica)."""

    node_id: str
    address: str
    on_stop: Callable[[], None] | None

    def release(self) -> None:
        if self.on_stop is not None:
            self.on_stop()


class AgentHosts:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        board: ReplicaBoard,
        nodes: NodeMaker | None,
        python: str = "",
        stopping: threading.Event | None = None,
    ) -> None:
        self.sessions = sessions
        self.stopping = stopping or threading.Event()  # the server's: no waiting on agents then
        self.board = board
        self.nodes = nodes
        self.python = python  # the server's inference interpreter: a same-host node may use it

    def release_leftovers(self) -> None:
        """Nodes a previous server process made for replicas: their replicas start again anew."""
        if self.nodes is None:
            return
        with self.sessions() as session:
            left = session.scalars(
                select(Node.id).where(
                    Node.owner_type == ONLINE_DEPLOYMENTS,
                    Node.state.in_([s.value for s in HOLDING]),
                )
            ).all()
        for node_id in left:
            self.nodes.release(node_id)

    def start(
        self,
        placement: Placement,
        spec: rules.DeploymentSpec,
        code_dir: Path,
        model_dir: Path,
        log_path: Path,
        stop: threading.Event,
        held: HeldNode | None = None,
    ) -> tuple[str, int, AgentProcess]:
        """(host, port, process) of a replica an agent runs (on HELD's node while it lives: a
        restart); raises with the reason otherwise."""
        if held is not None and not self._alive(held.node_id):
            held.release()
            held = None
        if held is None:
            held = self._node_for(placement, stop)
        node_id, address, on_stop = held.node_id, held.address, held.on_stop
        folder = code_dir.parent
        archives = {
            part: (folder / f"{part}.tar.gz")
            if (folder / f"{part}.tar.gz").exists()
            else pack(path, folder / f"{part}.tar.gz")
            for part, path in (("code", code_dir), ("model", model_dir))
        }
        doc = {
            "scoring_script": spec.scoring_script,
            "variables": dict(spec.environment_variables),
            "environment": replica_environment(spec),
            "python": self.python,
        }
        assignment = self.board.assign(node_id, doc, archives, log_path)
        proc = AgentProcess(self.board, assignment, on_stop, self.stopping)
        started = self.board.wait(
            lambda: proc.address is not None or proc.poll() is not None, AGENT_START_TIMEOUT_S, stop
        )
        where = proc.address
        if not started or where is None:
            status = dict(assignment.status)
            proc.stop()
            why = status.get("error") or (
                f"the replica exited ({status.get('exit_code')})"
                if status
                else f"the agent of node {node_id} did not start the replica"
            )
            raise RuntimeError(f"{why} on node {node_id}")
        return where[0] or address, where[1], proc

    def _node_for(self, placement: Placement, stop: threading.Event) -> HeldNode:
        if placement.kind != "node":
            return HeldNode(*self._instance_node(placement), None)
        if self.nodes is None:
            raise RuntimeError("this server makes no nodes for replicas")
        maker = self.nodes
        node_id, address = maker.make(placement.ws_id, placement.deployment_id, placement.instance_type, stop)
        return HeldNode(node_id, address, lambda: maker.release(node_id))

    def detach(self, proc: object) -> HeldNode | None:
        """PROC's node, taken from it (stopping PROC then leaves the node up) for a restart."""
        if not isinstance(proc, AgentProcess):
            return None
        on_stop, proc.on_stop = proc.on_stop, None
        status = proc.assignment.status
        return HeldNode(proc.node_id, str(status.get("address") or "127.0.0.1"), on_stop)

    def _alive(self, node_id: str) -> bool:
        with self.sessions() as session:
            node = session.get(Node, node_id)
            return node is not None and NodeState(node.state) in (NodeState.IDLE, NodeState.BUSY)

    def _instance_node(self, placement: Placement) -> tuple[str, str]:
        with self.sessions() as session:
            compute = session.scalar(
                select(Compute).where(
                    Compute.workspace_id == placement.ws_id, Compute.name == placement.compute
                )
            )
            if compute is None:
                raise RuntimeError(f"compute instance '{placement.compute}' is gone")
            for node in node_service.live_nodes(session, compute.id):
                if NodeState(node.state) in (NodeState.IDLE, NodeState.BUSY) and node_address(node.resources):
                    return node.id, str(node_address(node.resources))
        raise RuntimeError(
            f"compute instance '{placement.compute}' is not running: start it "
            f"(cloudlet compute start -n {placement.compute})"
        )
