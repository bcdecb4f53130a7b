"""Tables of online and batch endpoints and deployments: a name first, readable cells, and a failed
deployment's log behind ``get-logs`` rather than in a cell."""

from __future__ import annotations

import cloudlet.cli.main  # noqa: F401  (registers every command's columns)
from cloudlet.cli.output import COLUMNS, REASON_WIDTH, table_rows

ARM_ID = "/subscriptions/s/resourceGroups/default/providers/Microsoft.MachineLearningServices/workspaces/w"


def test_online_deployments_list_by_name_with_the_first_line_of_a_failure() -> None:
    log = "init() failed: ModuleNotFoundError: No module named 'sklearn'\n" + "Traceback line\n" * 200
    failed = {
        "id": f"{ARM_ID}/onlineEndpoints/ep/deployments/blue",
        "name": "blue",
        "endpoint_name": "ep",
        "provisioning_state": "Failed",
        "stage": "replicas",
        "instance_type": "Standard_DS3_v2",
        "instance_count": 1,
        "model": {"path": "./model"},
        "reason": log,
    }
    headers, rows = table_rows([failed], "online-deployment")
    assert headers[0] == "NAME" and "ID" not in headers
    cell = dict(zip(headers, rows[0], strict=True))
    assert cell["NAME"] == "blue" and cell["STATE"] == "Failed" and cell["MODEL"] == "./model"
    assert cell["REASON"].startswith("init() failed: ModuleNotFoundError") and cell["REASON"].endswith(
        "get-logs)"
    )
    assert len(cell["REASON"]) <= REASON_WIDTH + len(" … (more: get-logs)")


def test_online_endpoints_list_traffic_readably() -> None:
    endpoint = {
        "id": f"{ARM_ID}/onlineEndpoints/ep",
        "name": "ep",
        "auth_mode": "key",
        "provisioning_state": "Succeeded",
        "traffic": {"blue": 90, "green": 10},
        "scoring_uri": "https://h/score",
    }
    headers, rows = table_rows([endpoint], "online-endpoint")
    assert headers[0] == "NAME" and "ID" not in headers
    assert dict(zip(headers, rows[0], strict=True))["TRAFFIC"] == "blue=90%, green=10%"


def test_every_endpoint_kind_has_named_columns() -> None:
    for kind in ("online-endpoint", "online-deployment", "batch-endpoint", "batch-deployment"):
        assert COLUMNS[kind][0][0] == "NAME"
