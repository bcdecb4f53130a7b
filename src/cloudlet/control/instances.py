"""Compute instances get real machines: one node of the instance's size while it runs.

The computes' step set (``control/compute_steps.py``) hands an instance's steps here. A step
looks at the world and moves it one notch, inside the step's transaction: record a node (state
``requested``, tagged with the operation), release one (``terminating``), or wait. Provider
calls run after that transaction commits (``take_after_commit``), so a crash in between leaves a
record the retried step or the cluster reconciler's sweep finishes. A step that is not finished
returns ``Pending``: the reconciler commits what it recorded, does not journal the step, and
comes back on its next pass.

Because the world is read afresh every time, a retried step finds what an earlier try made: the
node tagged with its operation id (``nodes.operation_id``, and ``CLOUDLET_OPERATION_ID`` in the
node's processes). Instance nodes are known to the store and ``HOLDING`` while they live, so the
cluster reconciler's orphan sweep leaves them alone.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.actions import Actions, launch_node, release, terminate_node
from cloudlet.control.steps import AfterCommitQueue, Pending, StepOutcome
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.lifecycle import InstanceEvent, ProvisioningState, advance_instance
from cloudlet.domain.compute.nodes import FAILED, NodeEvent, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.providers.base import (
    HostsInstanceDisks,
    NodeHandle,
    NodeProvider,
    NodeRequest,
    SupportsNodeLogs,
)
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import instance_reports
from cloudlet.services.compute import instances as instance_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import exits
from cloudlet.store.schema import Compute, Node, Operation

log = logging.getLogger("cloudlet.instances")

LOG_TAIL_BYTES = 4096


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


class InstanceDriver(AfterCommitQueue):
    """Carries out the node-making steps of compute-instance operations."""

    STEPS = frozenset({"provision", "power_on", "power_off", "reboot", "release", "remove"})

    def __init__(
        self,
        sessions: sessionmaker[Session],
        providers: Mapping[str, NodeProvider],
        installation_id: str,
        data: DataRoot,
        server_url: Callable[[], str],
        token_secret: str,
        clock: Clock = WALL_CLOCK,
        https: Callable[[], tuple[str, str]] = lambda: ("", ""),
    ) -> None:
        self.sessions = sessions
        self.clock = clock
        self.providers = providers
        self.installation_id = installation_id
        self.data = data
        self.server_url = server_url
        self.token_secret = token_secret
        self.https = https  # the TLS listener's URL and CA file (azure-ai-ml on the instance)
        # The agent must register within this long; then its apps must be ready within that long.
        self.start_timeout_s = _seconds("CLOUDLET_INSTANCE_START_TIMEOUT_S", 60)
        self.apps_timeout_s = _seconds("CLOUDLET_INSTANCE_APPS_TIMEOUT_S", 180)
        super().__init__()
        self._launched: set[str] = set()

    # -- the reconciler's interface -----------------------------------------------------------
    def step(self, session: Session, op: Operation, step: str, compute: Compute) -> StepOutcome:
        if step == "provision":
            return self._provision(session, op, compute)
        if step in ("power_on", "reboot"):
            event = InstanceEvent.STARTED if step == "power_on" else InstanceEvent.RESTARTED
            return self._bring_up(session, op, compute, event, InstanceEvent.START_FAILED)
        if step == "power_off":
            return self._settle_down(session, compute, InstanceEvent.STOPPED)
        if step == "release":
            return self._settle_down(session, compute, None)
        assert step == "remove"
        return self._remove(session, compute)

    # -- steps ---------------------------------------------------------------------------------
    def _provision(self, session: Session, op: Operation, compute: Compute) -> StepOutcome:
        outcome = self._up(session, op, compute, InstanceEvent.CREATE_FAILED)
        if isinstance(outcome, dict):
            compute.provisioning_state = ProvisioningState.FAILED.value
            compute.errors = [outcome]
        return outcome  # finalize (Succeeded, Running) follows once the node and apps are up

    def _bring_up(
        self, session: Session, op: Operation, compute: Compute, done: InstanceEvent, failed: InstanceEvent
    ) -> StepOutcome:
        if not self._down(session, compute, keep=op.id):
            return Pending("releasing the previous node")
        outcome = self._up(session, op, compute, failed)
        if outcome is None:
            compute.state = advance_instance(compute.state, done, compute.name)
        return outcome

    def _settle_down(self, session: Session, compute: Compute, done: InstanceEvent | None) -> StepOutcome:
        if not self._down(session, compute, keep=None):
            return Pending("releasing the node")
        if done is InstanceEvent.STOPPED:
            instance_service.detach_os_disk(self.data, compute)  # its processes are gone by now
        if done is not None:
            compute.state = advance_instance(compute.state, done, compute.name)
        return None

    def _remove(self, session: Session, compute: Compute) -> StepOutcome:
        if not self._down(session, compute, keep=None):
            return Pending("releasing the node")
        instance_service.remove_os_disk(self.data, compute)
        host = self._disk_host(session, compute)
        if host:  # a provider that keeps OS disks on its hosts (looked up after the commit)
            disk = instance_service.instance_disk_key(compute)
            self._after.append(partial(self._remove_host_disk, compute.location, disk, host))
        return None  # the generic remove step then deletes the record (control/compute_steps.py)

    # -- making a node and waiting for it -------------------------------------------------------
    def _up(self, session: Session, op: Operation, compute: Compute, failed: InstanceEvent) -> StepOutcome:
        node = session.scalar(
            select(Node)
            .where(node_service.owned_by_compute(compute.id), Node.operation_id == op.id)
            .order_by(Node.created_at.desc())
            .limit(1)
        )
        if node is None:
            self._new_node(session, op, compute)
            return Pending("making the node")
        state, now = NodeState(node.state), self.clock.now()
        if state is NodeState.REQUESTED and node.id not in self._launched:
            self._relaunch(session, op, compute, node)  # made, then crashed before the provider call
            return Pending("making the node")
        if state in (NodeState.REQUESTED, NodeState.ALLOCATED, NodeState.STARTING):
            if now - node.created_at > self.start_timeout_s:
                message = f"the agent of node {node.id} did not register within {self.start_timeout_s:g} s"
                return self._fail(session, compute, node, "InstanceNodeSetupFailed", message, failed)
            return Pending(f"waiting for node {node.id}'s agent")
        if state in (NodeState.IDLE, NodeState.BUSY):
            return self._await_apps(session, compute, node, failed, now)
        reason = (node.error or {}).get("message") or f"node {node.id} is {state.value}"
        return self._fail(session, compute, node, "InstanceNodeFailed", reason, failed)

    def _await_apps(
        self, session: Session, compute: Compute, node: Node, failed: InstanceEvent, now: float
    ) -> StepOutcome:
        setup = instance_reports.startup_status(compute, node)  # setup scripts and sshd come first
        if setup.error is not None:
            error = self._fail(session, compute, node, setup.error["code"], setup.error["message"], failed)
            return {**error, **{k: v for k, v in setup.error.items() if k not in error}}
        if setup.waiting is not None:
            return Pending(f"waiting for {setup.waiting}")  # bounded by the script's own timeout
        broken = instance_service.failed_app(node)
        if broken is not None:
            name, info = broken
            message = f"{name} did not start on node {node.id}: {info.get('error') or 'it exited'}"
            return self._fail(session, compute, node, "InstanceAppFailed", message, failed, info.get("log"))
        missing = sorted(set(node.apps or {}) - instance_service.ready_apps(node))
        if not missing:
            return None
        if now - max(node.registered_at or now, setup.finished_at or 0) > self.apps_timeout_s:
            message = f"{', '.join(missing)} not ready on node {node.id} within {self.apps_timeout_s:g} s"
            return self._fail(session, compute, node, "InstanceAppTimeout", message, failed)
        return Pending(f"waiting for {', '.join(missing)} on node {node.id}")

    def _new_node(self, session: Session, op: Operation, compute: Compute) -> None:
        size = catalogue_service.current(session).require_size(
            compute.size or "", ComputeType.COMPUTE_INSTANCE
        )
        node, token = node_service.new_node(
            session,
            owner=compute,
            installation_id=self.installation_id,
            location=compute.location,
            size=size,
            tier=Tier.DEDICATED,
            now=self.clock.now(),
        )
        node.operation_id = op.id
        apps = instance_service.configured_apps()
        node.apps = {app: {"state": "starting"} for app in apps}
        self._after.append(partial(self._launch, self._request(session, compute, node, token, op.id, apps)))

    def _relaunch(self, session: Session, op: Operation, compute: Compute, node: Node) -> None:
        """A node recorded by a try that crashed before calling the provider: its token was never
        handed out, so give it a new one and launch it (providers create idempotently by id)."""
        token = secrets.token_urlsafe(32)
        node.token_hash = node_service.hash_token(token)
        apps = tuple(node.apps or {})
        self._after.append(partial(self._launch, self._request(session, compute, node, token, op.id, apps)))

    def _request(
        self, session: Session, compute: Compute, node: Node, token: str, op_id: str, apps: tuple[str, ...]
    ) -> tuple[str, NodeRequest]:
        azureml = instance_service.azureml_env(session, compute, self.token_secret, *self.https())
        host = self._disk_host(session, compute, node.id)
        env = instance_service.node_env(
            compute, node.id, op_id, self.data, self.token_secret, apps, azureml, host
        )
        request = node_service.launch_request(node, token, self.installation_id, self.server_url(), env)
        return node.location, request

    @staticmethod
    def _disk_host(session: Session, compute: Compute, skip: str | None = None) -> str:
        """The host the instance's OS disk is on: its last node's (``""``: none yet)."""
        earlier = session.scalars(
            select(Node)
            .where(node_service.owned_by_compute(compute.id), Node.id != (skip or ""))
            .order_by(Node.created_at.desc())
        )
        return next((str(n.provider_ref["host"]) for n in earlier if (n.provider_ref or {}).get("host")), "")

    def _remove_host_disk(self, location: str, disk: str, host: str) -> None:
        provider = self.providers.get(location)  # after the step's commit: the store is free
        if not isinstance(provider, HostsInstanceDisks):
            return
        try:
            provider.remove_instance_disk(disk, host)
        except Exception as exc:  # the record goes anyway: say what is left on the host
            log.warning("could not remove the OS disk %s on %s: %s (remove it by hand)", disk, host, exc)

    def _launch(self, target: tuple[str, NodeRequest]) -> None:
        provider, request = target
        self._launched.add(request.node_id)
        # After the step's commit, so the provider can be looked up (the store is free again).
        on_host = isinstance(self.providers.get(provider), HostsInstanceDisks)
        try:
            name = request.env.get("CLOUDLET_INSTANCE", "")
            env = instance_service.for_provider(request.env, on_host, name)
        except (OSError, RuntimeError) as exc:  # the node fails now, as a provider's refusal does
            log.warning("node %s: cannot prepare the OS disk: %s", request.node_id, exc)
            with self.sessions.begin() as session:
                node = session.get(Node, request.node_id)
                if node is not None and node.state == NodeState.REQUESTED.value:
                    node.error = {"code": "AllocationFailed", "message": f"cannot prepare the OS disk: {exc}"}
                    node_service.advance(node, NodeEvent.ALLOCATION_FAIL, self.clock.now())
            return
        request = dataclasses.replace(request, env=env)
        launch_node(self.providers, self.sessions, provider, request, self.clock)

    # -- releasing -----------------------------------------------------------------------------
    def _down(self, session: Session, compute: Compute, keep: str | None) -> bool:
        """Release the instance's nodes (except those made by operation ``keep``); True once none
        of them holds a machine any more."""
        nodes = [
            n for n in node_service.live_nodes(session, compute.id) if keep is None or n.operation_id != keep
        ]
        actions, now = Actions(), self.clock.now()
        for node in nodes:
            # Jobs running on the instance end with it and wait for its next start (requeued).
            exits.fail_runs_on_node(session, node, ExitReason.STOPPED, now)
            if node.state == NodeState.TERMINATING.value:
                actions.terminations.append((node.id, node.location, dict(node.provider_ref)))
            else:
                release(node, actions, now)
        for node_id, provider, ref in actions.terminations:
            self._after.append(partial(self._terminate, node_id, provider, ref))
        return all(NodeState(n.state) in FAILED and n.ended_at is not None for n in nodes)

    def _terminate(self, node_id: str, provider: str, ref: dict[str, object]) -> None:
        terminate_node(self.providers, self.sessions, node_id, provider, ref, self.clock)

    def _fail(
        self,
        session: Session,
        compute: Compute,
        node: Node,
        code: str,
        message: str,
        event: InstanceEvent,
        app_log: str | None = None,
    ) -> dict[str, Any]:
        """End the operation with an error that carries the agent's (and app's) log; the node is
        released, so a failed start holds no machine."""
        error: dict[str, Any] = {"code": code, "message": message, "node": node.id}
        agent_log = self._agent_log(node)
        if agent_log:
            error["agent_log"] = agent_log
        if app_log:
            error["app_log"] = app_log[-LOG_TAIL_BYTES:]
        self._down(session, compute, keep=None)
        compute.state = advance_instance(compute.state, event, compute.name)
        return error

    def _agent_log(self, node: Node) -> str:
        provider = self.providers.get(node.location)
        if not node.provider_ref or not isinstance(provider, SupportsNodeLogs):
            return ""
        return provider.node_log(NodeHandle(node.id, dict(node.provider_ref)), LOG_TAIL_BYTES)
