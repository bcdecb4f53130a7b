"""The resource types that operations target and that own nodes.

Each name is the type's segment in its ARM path (``…/workspaces/{ws}/computes/{name}``), so a
stored ``(resource_type, resource_id)`` reads as the resource it points at.
"""

from __future__ import annotations

from typing import Final

COMPUTES: Final = "computes"
JOBS: Final = "jobs"
# Nodes made for an online deployment's replicas (issue 14) name it as their owner.
ONLINE_DEPLOYMENTS: Final = "deployments"
