"""C12: the one eviction rule, over plain data. Which node may be taken back, for which cause, and
in what order dedicated demand takes low-priority nodes. The server's three ways of evicting
(dedicated demand: ``control/eviction.py``; a node's engine preempting it:
``services/compute/preemption.py``; an operator: the evict route) and the simulator (``sim/engine.py``)
all ask here; ``services/compute/preemption.evict`` carries the decision out on a stored node."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from cloudlet.domain.compute.nodes import NodeState

_S = NodeState


class Cause(Enum):
    DEMAND = "demand"  # dedicated demand takes its capacity back from low-priority nodes
    ENGINE = "engine"  # the node's engine (Slurm, a cloud's spot market) took its machine back
    OPERATOR = "operator"  # an operator (or a test) evicts a low-priority node


# A node that holds, or is getting, a machine can lose it.
PREEMPTIBLE = frozenset({_S.REQUESTED, _S.ALLOCATED, _S.STARTING, _S.IDLE, _S.BUSY, _S.DRAINING})
# Dedicated demand takes only the vCPUs it can claim at once: nodes booted or booting, not ones
# still being requested nor ones already going away.
FOR_DEMAND = frozenset({_S.STARTING, _S.IDLE, _S.BUSY})


@dataclass(frozen=True)
class Candidate:
    """What the rule needs of a node."""

    id: str
    state: NodeState
    low_priority: bool
    vcpus: int = 0
    created_at: float = 0.0


class Refusal(Enum):
    DEDICATED = "dedicated"  # only low-priority nodes are taken back by cloudlet
    NOT_LIVE = "not live"  # no machine to take back (ended, or going away)


def refusal(node: Candidate, cause: Cause) -> Refusal | None:
    """Why NODE may not be evicted for CAUSE; None when it may. An engine takes back what it
    likes (a dedicated node's placeholder included); cloudlet itself only low-priority nodes."""
    if cause is not Cause.ENGINE and not node.low_priority:
        return Refusal.DEDICATED
    if node.state not in (FOR_DEMAND if cause is Cause.DEMAND else PREEMPTIBLE):
        return Refusal.NOT_LIVE
    return None


def order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Idle nodes first (no work lost), then the youngest (the least work lost)."""
    return sorted(candidates, key=lambda n: (n.state is not _S.IDLE, -n.created_at))


def victims(candidates: Iterable[Candidate], vcpus_needed: int) -> list[Candidate]:
    """The nodes dedicated demand of VCPUS_NEEDED takes back, in eviction order, and no more."""
    chosen: list[Candidate] = []
    freed = 0
    for node in order(n for n in candidates if refusal(n, Cause.DEMAND) is None):
        if freed >= vcpus_needed:
            break
        chosen.append(node)
        freed += node.vcpus
    return chosen
