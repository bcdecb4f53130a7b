"""The compute document clients see: status fields derived on read."""

from __future__ import annotations

from datetime import UTC, datetime

from cloudlet.domain.compute.locks import Lock, LockLevel
from cloudlet.domain.compute.sizes import load_catalogue
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.views.computes import render
from cloudlet.store.schema import Compute

REF = WorkspaceRef("sub1", "rg1", "ws1")


def _compute(size: str = "Standard_DS3_v2", **spec: object) -> Compute:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    doc = {"name": "c1", "type": "amlcompute", "size": size, "min_instances": 0, "max_instances": 2, **spec}
    return Compute(
        workspace_id=1,
        name="c1",
        type="amlcompute",
        location="local",
        size=size,
        spec=doc,
        owner=None,
        created_by="admin",
        provisioning_state="Succeeded",
        state=None,
        current_node_count=0,
        errors=[],
        warnings=[],
        created_on=now,
        last_modified_on=now,
    )


def test_cluster_on_a_retired_series_is_flagged_with_replacements() -> None:
    body = render(_compute("Standard_NC6s_v3"), REF, [], load_catalogue())
    (warning,) = body["warnings"]
    assert warning["code"] == "RetiredVmSeries"
    assert "2025-09-30" in warning["message"] and "NCasT4_v3" in warning["message"]


def test_current_series_has_no_retirement_warning() -> None:
    assert render(_compute(), REF, [], load_catalogue())["warnings"] == []


def test_min_instances_makes_the_cluster_resize_towards_it() -> None:
    body = render(_compute(min_instances=2), REF, [])
    assert (body["allocation_state"], body["current_node_count"], body["target_node_count"]) == (
        "Resizing",
        0,
        2,
    )


def test_resource_group_lock_shows_the_cluster_stuck_at_its_node_count() -> None:
    lock = Lock("keep", LockLevel.CAN_NOT_DELETE, REF.rg_scope)
    body = render(_compute(min_instances=1), REF, [lock])
    assert body["allocation_state"] == "Resizing"
    assert (body["current_node_count"], body["target_node_count"]) == (0, 0)
    assert body["scaling_blocked"]["lock"] == "keep"
    assert "move the lock" in body["status_message"]


def test_workspace_lock_does_not_block_scaling() -> None:
    lock = Lock("keep", LockLevel.READ_ONLY, REF.arm_id)
    body = render(_compute(), REF, [lock])
    assert body["scaling_blocked"] is None and body["allocation_state"] == "Steady"
