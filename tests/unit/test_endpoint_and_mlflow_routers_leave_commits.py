"""Issue 26 item 1: a router parses, makes one service call and renders; the use case commits.
The MLflow, batch endpoint and online endpoint routers (native and ARM) hold no commit of their
own (same check as ``test_routers_leave_commits_to_services.py`` on h26-lead; fold them together)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[2] / "src" / "cloudlet" / "api"
ROUTERS = [
    "mlflow/experiments.py",
    "mlflow/models.py",
    "mlflow/runs.py",
    "routes_batch_endpoints.py",
    "arm/batch_endpoints.py",
    "routes_online.py",
    "arm/online_endpoints.py",
]


def commits(source: str) -> list[int]:
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
    assert commits((API / router).read_text()) == [], f"{router} commits or rolls back itself"
