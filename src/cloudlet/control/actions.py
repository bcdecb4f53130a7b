"""What a reconcile pass decided to do once its transaction commits."""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudlet.providers.base import NodeRequest


@dataclass
class Launch:
    node_id: str
    request: NodeRequest
    provider: str


@dataclass
class Actions:
    launches: list[Launch] = field(default_factory=list)
    terminations: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)  # id, provider, ref
    wake: list[str] = field(default_factory=list)
