"""The online loop's lease (issue 26): of the servers that share a store, one — the holder of the
named lease ``online-loop`` — runs the replicas (rolls deployments out, starts and stops replicas,
watches their liveness, autoscales); every server's gateway serves them.

The holder writes each deployment's **serving report** (its serving generation and spec, its
replicas with their addresses and readiness) to the deployment's row when it changes, fenced by
the lease's token (a holder that lost the lease writes nothing). Every other server's loop reads it
each pass and routes to those addresses: a replica is a process of the holder's host or an agent's
on a node, reached by host and port. Under ``--workers N`` worker 0 is the one that may hold the
lease, and what it knows — run or read — is what it publishes to the other workers in the same
shape (``control/online_shared.py``).

A request that another server's gateway holds for an autoscaled deployment with no replica ready
(scale from zero) is a demand only the holder can meet: that server writes until when it holds it
on the deployment's row (``demand_until``), the holder reads it on its next pass and counts it as
a request it holds itself (``control/online_autoscaler.py``), so a request through any server
brings a deployment at zero replicas up.

When the holder dies, another server takes the lease once its TTL has run out and does what a
restart does: it ends the replicas the dead holder left on this host, releases the nodes made for
them, and rolls every stored deployment out again (an autoscaled one from its stored count). A
holder that finds its lease taken (a pause longer than the TTL) stops its replicas and follows.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from cloudlet.control.online_state import DeploymentState, Replica
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.store.schema import OnlineDeployment

LEASE = "online-loop"
LEASE_TRY_S = 1.0  # how often a server that does not hold the lease tries it (a write each time)


class Change(enum.Enum):
    TAKE_OVER = "take over"  # the lease is ours now: run what is stored
    STEP_DOWN = "step down"  # the lease is another's now: stop ours, follow its report


def change(leading: bool, holds: bool) -> Change | None:
    """What a pass does about the lease: LEADING is what this server did until now, HOLDS whether
    it holds the lease now."""
    if holds and not leading:
        return Change.TAKE_OVER
    if leading and not holds:
        return Change.STEP_DOWN
    return None


# --- the serving report ---------------------------------------------------------------------------


def deployment_doc(deployment: DeploymentState) -> dict[str, Any]:
    """DEPLOYMENT as the gateways of other servers and workers need it (JSON-ready)."""
    return {
        "id": deployment.id,
        "name": deployment.name,
        "spec": deployment.spec.to_doc(),
        "generation": deployment.generation,
        "reason": deployment.reason,
        "restarts": deployment.restarts,
        "replicas": [
            {
                "host": r.host,
                "port": r.port,
                "ready": r.ready and r.proc.poll() is None,
                "node": getattr(r.proc, "node_id", None),  # show's, through any server or worker
            }
            for r in deployment.replicas
            if not r.retired
        ],
    }


class Elsewhere:
    """The process handle of a replica that another server or worker runs: alive while its runner
    lists it; NODE_ID: the node it runs on (None: a process of its runner's host)."""

    pid = -1
    returncode = None

    def __init__(self, node_id: str | None = None) -> None:
        self.node_id = node_id

    def poll(self) -> int | None:
        return None

    def stop(self) -> None:
        """Its runner stops it."""


def followed(doc: dict[str, Any], endpoint: str, old: DeploymentState | None) -> DeploymentState:
    """The deployment DOC reports, in OLD's state object when it is the same deployment (its
    in-flight count, the 429 rule, and its metrics carry on); replicas known by address are kept."""
    spec = rules.parse_deployment(doc["spec"], endpoint, doc["name"])
    deployment = (
        old if old is not None and old.id == doc["id"] else DeploymentState(doc["id"], doc["name"], spec)
    )
    by_address = {(r.host, r.port): r for r in deployment.replicas}
    replicas = []
    for r in doc["replicas"]:
        address = (str(r["host"]), int(r["port"]))  # a node's replica: its host's address
        replica = by_address.get(address) or Replica(
            address[1], Elsewhere(r.get("node")), Path(os.devnull), host=address[0]
        )
        replica.ready = bool(r["ready"])
        replicas.append(replica)
    deployment.spec, deployment.generation, deployment.replicas = spec, int(doc["generation"]), replicas
    deployment.reason, deployment.restarts = doc["reason"], int(doc["restarts"])
    return deployment


def write_reports(session: Session, reports: list[tuple[int, Any]]) -> None:
    for deployment_id, doc in reports:
        session.execute(
            update(OnlineDeployment).where(OnlineDeployment.id == deployment_id).values(serving=doc)
        )


def store_autoscaled(session: Session, deployment_id: int, count: int) -> None:
    """Autoscale's current count, which a restart or a new lease holder starts from."""
    session.execute(
        update(OnlineDeployment)
        .where(OnlineDeployment.id == deployment_id)
        .values(autoscaled_instances=count)
    )


def signal_demand(session: Session, deployment_id: int, until: float) -> None:
    """A request held here until UNTIL (epoch seconds) for a deployment this server does not run
    (never moving an earlier server's later bound back)."""
    row = OnlineDeployment
    session.execute(
        update(row)
        .where(row.id == deployment_id, or_(row.demand_until.is_(None), row.demand_until < until))
        .values(demand_until=until)
    )


def demand_left(rows: Iterable[OnlineDeployment], now: float) -> dict[int, float]:
    """The deployments among ROWS that another server holds a request for at NOW (epoch
    seconds), and for how many seconds more."""
    return {r.id: r.demand_until - now for r in rows if r.demand_until is not None and r.demand_until > now}


# --- taking over and stepping down ---------------------------------------------------------------


def leftover_replicas(installation: str) -> list[int]:
    """Replica processes carrying INSTALLATION (read from /proc; none where it is not readable)."""
    if not installation:
        return []
    tag = f"CLOUDLET_INSTALLATION={installation}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
            if b"azureml_inference_server_http" in argv and tag in (entry / "environ").read_bytes().split(
                b"\0"
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def end_leftovers(installation: str) -> None:
    """Kill the replica processes on this host that carry INSTALLATION (a dead holder's)."""
    for pid in leftover_replicas(installation):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
