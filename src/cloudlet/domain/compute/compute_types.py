"""The compute types cloudlet knows: the Azure ML CLI v2 ``type`` values (pure).

A ``StrEnum``: each member equals its string, so stored rows (``computes.type``), YAML files and
wire shapes keep the plain values, and code compares against members instead of spelling them.
"""

from __future__ import annotations

from enum import StrEnum


class ComputeType(StrEnum):
    AMLCOMPUTE = "amlcompute"  # a cluster that scales its nodes
    COMPUTE_INSTANCE = "computeinstance"  # one person's workstation
    VIRTUAL_MACHINE = "virtualmachine"  # an attached machine cloudlet reaches over SSH
    KUBERNETES = "kubernetes"  # an attached Kubernetes cluster


_T = ComputeType
# Every type, in the order messages list them.
ALL: tuple[ComputeType, ...] = tuple(ComputeType)
# Types whose size comes from the VM size catalogue (the others bring their own machines).
WITH_SIZES: tuple[ComputeType, ...] = (_T.AMLCOMPUTE, _T.COMPUTE_INSTANCE)
# Types attached rather than created: detaching them leaves the machines alone.
ATTACHED: tuple[ComputeType, ...] = (_T.VIRTUAL_MACHINE, _T.KUBERNETES)
# Types whose compute is one node that runs jobs side by side (no scaling).
SINGLE_NODE: tuple[ComputeType, ...] = (_T.COMPUTE_INSTANCE, _T.VIRTUAL_MACHINE)
# Types jobs run on through cloudlet's own agents.
RUNS_JOBS: tuple[ComputeType, ...] = (_T.AMLCOMPUTE, _T.COMPUTE_INSTANCE, _T.VIRTUAL_MACHINE)
