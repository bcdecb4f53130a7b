"""A job on a cluster with a managed identity runs as the cluster's principal (C13). The principal,
its role assignment and their audit rows are made when the job is submitted (the use case that
grants the identity); placing the job only reads them (issue 26 item 4), so its run specs can be
built without the write lock. Real SQLite store in a tmp dir."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cloudlet.services.core.context import Caller
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, prepared_specs, run_specs
from cloudlet.services.jobs.jobs import prepare, submit
from cloudlet.store.schema import AuditEntry, Compute, Principal, RoleAssignment, Workspace
from tests.unit.control_fakes import add_cluster, new_store


def _rows(session: Session) -> tuple[int, int, int]:
    return tuple(  # type: ignore[return-value]
        int(session.scalar(select(func.count()).select_from(table)) or 0)
        for table in (Principal, RoleAssignment, AuditEntry)
    )


def test_submission_grants_the_identity_and_placement_only_reads_it(tmp_path: Path) -> None:
    sessions, _ = new_store(tmp_path / "home")
    data = DataRoot(tmp_path / "data")
    add_cluster(sessions, "idc", max_instances=1)
    with sessions.begin() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "idc")).one()
        compute.spec = {**compute.spec, "identity": {"type": "system_assigned"}}
    with sessions.begin() as session:
        before = _rows(session)
        ws = session.scalars(select(Workspace)).one()
        caller = Caller(1, "alice", is_admin=True)
        doc = prepare({"command": "true", "compute": "azureml:idc"}, "with-id")
        job, _ = submit(session, ws, "with-id", doc, caller, data)
        granted = _rows(session)
        assert granted[0] == before[0] + 1 and granted[1] == before[1] + 1 and granted[2] > before[2]
        attempt = run_specs.Attempt(job.name, ws.id, "idc", job.spec, 1)
    # Placing: built in a session that takes no write lock, and nothing is written.
    with prepared_specs.read_only(sessions) as reads:
        made = dispatch.build(reads, attempt, [("n-1", "")], data, "http://127.0.0.1:9", None)
        assert made.specs is not None, made.error
        env = made.specs[0][1]["env"]
        assert env["CLOUDLET_IDENTITY_TOKEN"] and env["DEFAULT_IDENTITY_CLIENT_ID"] == "idc@identity"
        assert _rows(reads) == granted
