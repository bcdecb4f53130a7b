"""Issue 26 item 1: a router parses, makes one service call and renders; the use case commits.
No module of the API commits or rolls back a transaction of its own (``api/deps.py`` holds the
request's session; the agent protocol's routes hand their work to ``services/compute/agent_protocol``).
The studio (``cloudlet.studio``, issue 27) is a front door too: the same holds for its modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "cloudlet"
API = PACKAGE / "api"
FRONT_DOORS = (API, PACKAGE / "studio")
ROUTERS = sorted(
    str(p.relative_to(PACKAGE)) for door in FRONT_DOORS for p in door.rglob("*.py") if p.name != "deps.py"
)


def _commits(source: str) -> list[int]:
    """Lines calling ``.commit()`` or ``.rollback()`` on anything (ctx, a session)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("commit", "rollback")
    ]


@pytest.mark.parametrize("router", ROUTERS)
def test_the_router_leaves_the_transaction_to_its_service(router: str) -> None:
    assert _commits((PACKAGE / router).read_text()) == [], f"{router} commits or rolls back itself"
