"""Where a node is reached: the address its agent reported when it registered.

The agent says where other nodes and the control plane's proxy reach it (``CLOUDLET_NODE_ADDRESS``
from its provider, else the local address of its connection to the control plane); failing that the
server records the address the registration came from. Nothing assumes the node is this host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def node_address(resources: Mapping[str, Any] | None) -> str | None:
    """The node's reported address, or None before it registered."""
    value = (resources or {}).get("address")
    return str(value) if value else None


def reported_address(reported: str | None, peer: str | None) -> str | None:
    """What registration stores: the agent's own word, else the peer address of its request."""
    return (reported or "").strip() or peer or None
