"""Migration 0008 (operations target a resource; a node has one owner reference) on a store
populated at 0007: every compute, node, job and operation is found through the new columns and
the services that read them, the step journal survives (operations is its parent: rebuilding it
would cascade), the schema at head matches the models, and a downgrade gives the old columns back
(SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, select, text

from cloudlet.domain.compute.compute_spec import parse_compute, spec_to_doc
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.resources import COMPUTES, JOBS
from cloudlet.services.access import workspaces
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import computes, operations, quotas
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.jobs import jobs
from cloudlet.services.views import operations as operation_view
from cloudlet.store import db
from cloudlet.store.schema import Node, Operation, OperationStep, Workspace
from tests.integration.test_migrations import _differences, _upgrade

SIZE = "Standard_DS3_v2"
CLUSTER, INSTANCE, GONE = 10, 11, 99  # compute ids; GONE was deleted, its node's record stays
CLUSTER_JOB, SERVERLESS_JOB = 20, 21  # job ids
_NODE_COLUMNS = (
    "installation_id, location, provider, provider_ref, size, family, vcpus, memory_gb, gpus, tier, "
    "token_hash, resources, usage, apps, report, created_at"
)
_NODE_VALUES = (
    "'i', 'loc', 'local', '{}', :size, 'standardDSv2Family', 4, 14.0, 0, 'dedicated', :id, "
    "'{}', '{}', '{}', '{}', :at"
)


def _downgrade(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(db.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def _compute_spec(doc: dict[str, object]) -> str:
    return json.dumps(spec_to_doc(parse_compute(doc)))


def _populate_at_0007(engine: Engine) -> None:
    _upgrade(engine, "0007")
    with engine.begin() as conn:
        run = conn.execute
        run(text("INSERT INTO subscriptions (id, display_name) VALUES ('s', 's')"))
        run(
            text(
                "INSERT INTO resource_groups (id, subscription_id, name, location) "
                "VALUES (1, 's', 'rg', 'loc')"
            )
        )
        run(
            text(
                "INSERT INTO workspaces (id, resource_group_id, name, location, tags, created_on) "
                "VALUES (1, 1, 'ws', 'loc', '{}', CURRENT_TIMESTAMP)"
            )
        )
        cluster: dict[str, object] = {
            "type": "amlcompute",
            "name": "cpu",
            "size": SIZE,
            "min_instances": 0,
            "max_instances": 2,
        }
        instance: dict[str, object] = {"type": "computeinstance", "name": "ci", "size": SIZE}
        for compute_id, doc, state in ((CLUSTER, cluster, None), (INSTANCE, instance, "Running")):
            run(
                text(
                    "INSERT INTO computes (id, workspace_id, name, type, location, size, spec, owner, "
                    "created_by, provisioning_state, state, current_node_count, errors, warnings, "
                    "created_on, last_modified_on) VALUES (:id, 1, :name, :type, 'loc', :size, :spec, "
                    "'alice', 'alice', 'Succeeded', :state, 1, '[]', '[]', CURRENT_TIMESTAMP, "
                    "CURRENT_TIMESTAMP)"
                ),
                {
                    "id": compute_id,
                    "name": doc["name"],
                    "type": doc["type"],
                    "size": SIZE,
                    "spec": _compute_spec(doc),
                    "state": state,
                },
            )
        for job_id, name, compute, status in (
            (CLUSTER_JOB, "job-c", "cpu", "Running"),
            (SERVERLESS_JOB, "job-s", "serverless", "Running"),
        ):
            run(
                text(
                    "INSERT INTO jobs (id, workspace_id, name, compute_name, spec, status, priority, "
                    "instance_count, attempt, max_attempts, cancel_requested, created_by, submitted_at) "
                    "VALUES (:id, 1, :name, :compute, :spec, :status, 2, 1, 1, 3, false, 'alice', 1.0)"
                ),
                {
                    "id": job_id,
                    "name": name,
                    "compute": compute,
                    "status": status,
                    "spec": '{"command": "true"}',
                },
            )
        nodes: tuple[tuple[str, int | None, str, str | None, str | None, str], ...] = (
            # id, compute_id, compute_name, serverless_job, operation_id, state
            ("n-cluster", CLUSTER, "cpu", None, None, "busy"),
            ("n-instance", INSTANCE, "ci", None, "op-create", "idle"),
            ("n-serverless", None, "serverless", "1:job-s", None, "busy"),
            ("n-gone", GONE, "old", None, None, "terminated"),
            ("n-unlinked", None, "cpu", None, None, "idle"),  # no compute_id: found by name
        )
        for at, (node_id, node_compute, compute_name, job_key, op_id, state) in enumerate(nodes):
            run(
                text(
                    f"INSERT INTO nodes (id, workspace_id, compute_id, compute_name, serverless_job, "
                    f"operation_id, state, {_NODE_COLUMNS}) VALUES (:id, 1, :compute_id, :compute_name, "
                    f":job_key, :op_id, :state, {_NODE_VALUES})"
                ),
                {
                    "id": node_id,
                    "compute_id": node_compute,
                    "compute_name": compute_name,
                    "job_key": job_key,
                    "op_id": op_id,
                    "state": state,
                    "size": SIZE,
                    "at": float(at),
                },
            )
        operations_at_0007 = (  # id, compute_id, compute_name, kind, status, step, journalled steps
            ("op-create", INSTANCE, "ci", "create", "Succeeded", "finalize", ("provision", "finalize")),
            ("op-update", CLUSTER, "cpu", "update", "InProgress", "apply", ()),
            ("op-delete", GONE, "old", "delete", "Succeeded", "remove", ("release", "remove")),
        )
        for op_id, compute_id, compute_name, kind, status, step, journal in operations_at_0007:
            run(
                text(
                    "INSERT INTO operations (id, workspace_id, compute_id, compute_name, kind, status, step, "
                    "created_by, created_on, lease_expires_at, fencing_token) VALUES (:id, 1, :compute_id, "
                    ":compute_name, :kind, :status, :step, 'alice', CURRENT_TIMESTAMP, 0, 1)"
                ),
                {
                    "id": op_id,
                    "compute_id": compute_id,
                    "compute_name": compute_name,
                    "kind": kind,
                    "status": status,
                    "step": step,
                },
            )
            for journalled in journal:
                run(
                    text(
                        "INSERT INTO operation_steps (operation_id, step, executor, fencing_token, at) "
                        "VALUES (:op, :step, 'replica-a', 1, CURRENT_TIMESTAMP)"
                    ),
                    {"op": op_id, "step": journalled},
                )


def _everything_found_at_head(engine: Engine) -> None:
    sessions = db.session_factory(engine)
    with sessions() as session:
        ws = session.get(Workspace, 1)
        assert ws is not None
        cluster, instance = computes.get(session, ws, "cpu"), computes.get(session, ws, "ci")
        assert (cluster.id, instance.id) == (CLUSTER, INSTANCE)
        assert jobs.get(session, ws, "job-c").id == CLUSTER_JOB
        assert jobs.get(session, ws, "job-s").id == SERVERLESS_JOB

        # Nodes: through the owner reference and the services' query shapes.
        assert [n.id for n in node_service.live_nodes(session, CLUSTER)] == ["n-cluster", "n-unlinked"]
        [instance_node] = node_service.live_nodes(session, INSTANCE)
        assert instance_node.id == "n-instance" and node_service.runs_jobs_side_by_side(instance_node)
        serverless = session.scalars(select(Node).where(node_service.owned_by_job(SERVERLESS_JOB))).all()
        assert [n.id for n in serverless] == ["n-serverless"]
        assert node_service.job_of(serverless[0]) == SERVERLESS_JOB
        assert node_service.compute_of(serverless[0]) is None
        gone = session.get(Node, "n-gone")
        assert gone is not None and (gone.owner_type, gone.owner_id) == (COMPUTES, GONE)
        owners = {node_id: owner for node_id, owner in session.execute(select(Node.id, Node.owner_type))}
        assert owners == {
            "n-cluster": COMPUTES,
            "n-instance": COMPUTES,
            "n-serverless": JOBS,
            "n-gone": COMPUTES,
            "n-unlinked": COMPUTES,
        }
        # The serverless job's node holds its cores (quota reads the owner through the job).
        catalogue = catalogue_service.current(session)
        holders = {h.compute: h.cores for h in quotas.holders(session, "s", "loc", catalogue)}
        assert holders["serverless job job-s"] == 4

        # Operations: the target by type and id, the journal intact, the wire view unchanged.
        ref = workspaces.ref_of(session, ws)
        create = session.get(Operation, "op-create")
        assert create is not None
        assert (create.resource_type, create.resource_id, create.resource_name) == (COMPUTES, INSTANCE, "ci")
        view = operation_view.render(create, ref)
        assert view["target"] == ref.compute_id("ci") and view["target_name"] == "ci"
        assert (view["kind"], view["status"], view["step"]) == ("create", "Succeeded", "finalize")
        journal = session.scalars(select(OperationStep.step).order_by(OperationStep.id)).all()
        assert journal == ["provision", "finalize", "release", "remove"]
        deleted = session.get(Operation, "op-delete")
        assert deleted is not None and operation_view.render(deleted, ref)["target_name"] == "old"
        running = operations.in_progress(session, operations.Target.of_compute(cluster))
        assert running is not None and running.id == "op-update"
        with pytest.raises(CloudletError) as busy:
            operations.ensure_idle(session, cluster)
        assert busy.value.code == "ComputeOperationInProgress"
        operations.ensure_idle(session, instance)


def _old_columns_back_at_0007(engine: Engine) -> None:
    with engine.connect() as conn:
        nodes = conn.execute(
            text("SELECT id, compute_id, compute_name, serverless_job FROM nodes ORDER BY created_at")
        ).all()
        ops = conn.execute(text("SELECT id, compute_id, compute_name FROM operations ORDER BY id")).all()
        steps = conn.execute(text("SELECT count(*) FROM operation_steps")).scalar_one()
    assert [tuple(n) for n in nodes] == [
        ("n-cluster", CLUSTER, "cpu", None),
        ("n-instance", INSTANCE, "ci", None),
        ("n-serverless", None, "serverless", "1:job-s"),
        ("n-gone", GONE, "", None),  # its compute's name went with the compute
        ("n-unlinked", CLUSTER, "cpu", None),
    ]
    assert [tuple(o) for o in ops] == [
        ("op-create", INSTANCE, "ci"),
        ("op-delete", GONE, "old"),
        ("op-update", CLUSTER, "cpu"),
    ]
    assert steps == 4


def _carried_through_0008(engine: Engine) -> None:
    _populate_at_0007(engine)
    _upgrade(engine, "head")
    assert _differences(engine) == []
    _everything_found_at_head(engine)
    _downgrade(engine, "0007")
    _old_columns_back_at_0007(engine)
    _upgrade(engine, "head")
    assert _differences(engine) == []
    _everything_found_at_head(engine)


def test_sqlite_store_from_0007_is_carried_through_0008(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _carried_through_0008(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_store_from_0007_is_carried_through_0008(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _carried_through_0008(engine)
    engine.dispose()
