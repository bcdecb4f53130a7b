"""Attached VMs get their node: one agent holding the whole machine while it is attached.

The computes' step set (``control/compute_steps.py``) hands an attached VM's steps here, the way it
hands an instance's to ``control/instances.py``: ``provision`` records the node (``requested``,
tagged with the operation) and waits for its agent; ``release`` gives it back; ``remove`` stops
what is left of cloudlet on the VM and removes the agent's folder (``services/compute/attached_vms``), so
the VM is as it was. Provider calls run after the step's transaction commits
(``take_after_commit``); the VM's provider is its own SSH provider (``domain/compute/attached_vms``).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Mapping
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.actions import Actions, Launch, launch_node, release, terminate_node
from cloudlet.control.steps import AfterCommitQueue, Pending, StepOutcome
from cloudlet.domain.compute import attached_vms as vm_rules
from cloudlet.domain.compute.lifecycle import ProvisioningState
from cloudlet.domain.compute.nodes import FAILED, SERVING, NodeState
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.providers.base import NodeProvider, NodeRequest
from cloudlet.services.compute import host_keys
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.jobs import exits
from cloudlet.store.schema import Compute, Node, Operation

log = logging.getLogger("cloudlet.attached_vms")
RETRY_NODE_S = 30.0  # a VM whose node was lost (or failed to start) is tried again after this long


def keep_node(
    session: Session,
    compute: Compute,
    nodes: list[Node],
    installation_id: str,
    server_url: str,
    now: float,
    actions: Actions,
) -> None:
    """The cluster pass's part for an attached VM: once attached, it always has a node; a lost one
    (the VM rebooted, its agent died) is replaced, at most every ``RETRY_NODE_S``, so a VM that
    comes back is used again."""
    if compute.provisioning_state != ProvisioningState.SUCCEEDED.value or not vm_rules.is_attached(
        compute.spec
    ):
        return
    if any(NodeState(n.state) in SERVING or n.state == NodeState.TERMINATING.value for n in nodes):
        return
    latest = max((n.state_since or n.created_at for n in nodes), default=None)
    if latest is not None and now - latest < RETRY_NODE_S:
        return
    for node in nodes:  # the failed ones give their machine back (stops a stray agent)
        release(node, actions, now)
    node, token = node_service.new_node(
        session,
        owner=compute,
        installation_id=installation_id,
        location=vm_rules.provider_key(compute.id),
        size=vm_rules.vm_size(compute.spec.get("facts") or {}),
        tier=Tier.DEDICATED,
        now=now,
        provider_kind="ssh",
    )
    request = node_service.launch_request(node, token, installation_id, server_url)
    actions.launches.append(Launch(node.id, request, node.location))


class VmDriver(AfterCommitQueue):
    """Carries out the node-making steps of attached VMs' operations."""

    STEPS = frozenset({"provision", "release", "remove"})

    def __init__(
        self,
        sessions: sessionmaker[Session],
        providers: Mapping[str, NodeProvider],
        installation_id: str,
        server_url: Callable[[], str],
        clock: Clock = WALL_CLOCK,
    ) -> None:
        self.sessions = sessions
        self.providers = providers
        self.installation_id = installation_id
        self.server_url = server_url
        self.clock = clock
        self.start_timeout_s = float(os.environ.get("CLOUDLET_VM_START_TIMEOUT_S") or 90)
        super().__init__()
        self._launched: set[str] = set()

    def step(self, session: Session, op: Operation, step: str, compute: Compute) -> StepOutcome:
        if step == "provision":
            return self._up(session, op, compute)
        if step == "release":
            return None if self._down(session, compute) else Pending("releasing the VM's node")
        assert step == "remove"
        if not self._down(session, compute):
            return Pending("releasing the VM's node")
        # Blocking SSH on the reconciler's thread, bounded by the connect and command timeouts.
        from cloudlet.services.compute import attached_vms  # asyncssh only when a VM is attached

        why = attached_vms.uninstall(compute.spec, compute.spec.get("facts") or {})
        if why is not None:
            log.warning("detaching %s: could not remove the agent from the VM: %s", compute.name, why)
        host_keys.forget_scope(session, vm_rules.provider_key(compute.id))  # attach again: learned anew
        return None  # the generic remove step then deletes the record

    # -- the node --------------------------------------------------------------------------------
    def _up(self, session: Session, op: Operation, compute: Compute) -> StepOutcome:
        node = session.scalar(
            select(Node)
            .where(node_service.owned_by_compute(compute.id), Node.operation_id == op.id)
            .order_by(Node.created_at.desc())
            .limit(1)
        )
        if node is None:
            self._new_node(session, op, compute)
            return Pending("making the VM's node")
        state, now = NodeState(node.state), self.clock.now()
        if state is NodeState.REQUESTED and node.id not in self._launched:
            self._relaunch(node)  # recorded, then crashed before the provider call
            return Pending("making the VM's node")
        if state in (NodeState.REQUESTED, NodeState.ALLOCATED, NodeState.STARTING):
            if now - node.created_at > self.start_timeout_s:
                message = (
                    f"the VM's agent (node {node.id}) did not register within {self.start_timeout_s:g} s"
                )
                return self._fail(session, compute, "VirtualMachineAgentFailed", message)
            return Pending(f"waiting for the VM's agent (node {node.id})")
        if state in (NodeState.IDLE, NodeState.BUSY):
            return None
        reason = (node.error or {}).get("message") or f"node {node.id} is {state.value}"
        return self._fail(session, compute, "VirtualMachineAgentFailed", reason)

    def _new_node(self, session: Session, op: Operation, compute: Compute) -> None:
        size = vm_rules.vm_size(compute.spec.get("facts") or {})
        node, token = node_service.new_node(
            session,
            owner=compute,
            installation_id=self.installation_id,
            location=vm_rules.provider_key(compute.id),
            size=size,
            tier=Tier.DEDICATED,
            now=self.clock.now(),
            provider_kind="ssh",
        )
        node.operation_id = op.id
        request = node_service.launch_request(node, token, self.installation_id, self.server_url())
        self._after.append(partial(self._launch, node.location, request))

    def _relaunch(self, node: Node) -> None:
        token = secrets.token_urlsafe(32)
        node.token_hash = node_service.hash_token(token)
        request = node_service.launch_request(node, token, self.installation_id, self.server_url())
        self._after.append(partial(self._launch, node.location, request))

    def _launch(self, provider: str, request: NodeRequest) -> None:
        self._launched.add(request.node_id)
        launch_node(self.providers, self.sessions, provider, request, self.clock)

    def _down(self, session: Session, compute: Compute) -> bool:
        """Release the VM's node; True once none holds the machine any more."""
        nodes = node_service.live_nodes(session, compute.id)
        actions, now = Actions(), self.clock.now()
        for node in nodes:
            exits.fail_runs_on_node(session, node, ExitReason.CANCELED, now)
            if node.state == NodeState.TERMINATING.value:
                actions.terminations.append((node.id, node.location, dict(node.provider_ref)))
            else:
                release(node, actions, now)
        for node_id, provider, ref in actions.terminations:
            self._after.append(partial(terminate_node, self.providers, self.sessions, node_id, provider, ref))
        return all(NodeState(n.state) in FAILED and n.ended_at is not None for n in nodes)

    def _fail(self, session: Session, compute: Compute, code: str, message: str) -> StepOutcome:
        self._down(session, compute)
        compute.provisioning_state = ProvisioningState.FAILED.value
        error = {"code": code, "message": message}
        compute.errors = [error]
        return error
