"""The Quota page's service (``quotas.quota_page``) over a real store: per location × family the
limit and used cores, and who holds them (name, kind, owner, cores), biggest first."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import insert, select

from cloudlet.domain.compute.compute_spec import parse_compute, spec_to_doc
from cloudlet.server import open_store
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import quotas
from cloudlet.store.schema import Compute, Workspace


def _compute(
    ws: Workspace, doc: dict[str, object], owner: str | None, state: str | None
) -> dict[str, object]:
    now = datetime.now(UTC)
    return {
        "workspace_id": ws.id,
        "name": doc["name"],
        "type": doc["type"],
        "location": ws.location,
        "size": doc["size"],
        "spec": spec_to_doc(parse_compute(doc)),
        "owner": owner,
        "created_by": "admin@example.com",
        "provisioning_state": "Succeeded",
        "state": state,
        "current_node_count": 0,
        "errors": [],
        "warnings": [],
        "created_on": now,
        "last_modified_on": now,
    }


def test_quota_page_lists_limits_usage_and_holders(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    store = open_store(tmp_path / "home", None)
    with store.control.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        instance = {"type": "computeinstance", "name": "ana-ci", "size": "Standard_DS3_v2"}
        cluster = {
            "type": "amlcompute",
            "name": "train",
            "size": "Standard_DS2_v2",
            "min_instances": 2,
            "max_instances": 4,
        }
        rows = [_compute(ws, instance, "ana@example.com", "Running"), _compute(ws, cluster, None, None)]
        session.execute(insert(Compute), rows)
    with store.sessions() as session:
        ws = session.scalars(select(Workspace)).one()
        sub = workspaces.ref_of(session, ws).subscription_id
        page = quotas.quota_page(session, sub, [ws.location], catalogue_service.current(session))
    family = next(line for line in page if line["name"] == "standardDSv2Family")
    assert family["location"] == ws.location and family["kind"] == "family"
    assert family["used"] == 8 and int(str(family["limit"])) > 0  # 4 (instance) + 2 nodes × 2
    assert family["holders"] == [
        {
            "name": "ana-ci",
            "kind": "computeinstance",
            "workspace": ws.name,
            "owner": "ana@example.com",
            "cores": 4,
            "tier": "dedicated",
            "state": "Running",
        },
        {
            "name": "train",
            "kind": "amlcompute",
            "workspace": ws.name,
            "owner": "admin@example.com",
            "cores": 4,
            "tier": "dedicated",
            "state": "2 nodes",
        },
    ]
    assert any(line["kind"] == "total_dedicated" and line["used"] == 8 for line in page)
    # Families nobody holds and that have no limit are not drawn.
    assert all(line["limit"] or line["holders"] for line in page if line["kind"] == "family")
