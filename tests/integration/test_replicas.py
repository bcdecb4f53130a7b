"""Crash and replica behaviour of the operation reconciler, with real server processes.

- kill -9 during a create: the restarted server finishes the operation, with no duplicate.
- two servers on one PostgreSQL: every operation step is carried out exactly once, and when the
  replica holding an operation dies, the other takes it over after the lease lapses.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import RunningServer

CLUSTER = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 2}
PLAN_LENGTH = {"create": 2, "update": 1, "delete": 2, "start": 1, "stop": 1, "restart": 1}


def _steps(url: str) -> list[tuple[str, str, str, str]]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT o.resource_name, o.kind, s.step, s.executor FROM operation_steps s "
                "JOIN operations o ON o.id = s.operation_id"
            )
        ).all()
    engine.dispose()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def _assert_each_step_once(steps: list[tuple[str, str, str, str]], computes: list[str]) -> None:
    per_step = Counter((name, kind, step) for name, kind, step, _ in steps)
    assert all(count == 1 for count in per_step.values()), per_step
    per_op = Counter((name, kind) for name, kind, _, _ in steps)
    for name in computes:
        assert per_op[(name, "create")] == PLAN_LENGTH["create"], (name, per_op)


def test_kill9_during_create_then_restart_finishes_once(server_factory: Callable[..., RunningServer]) -> None:
    slow = {"CLOUDLET_FAULT_STEP_DELAY_S": "1.0"}
    first = server_factory(extra_env=slow)
    with first.client() as client:
        response = client.put(first.ws_path + "/computes/crashy", json=CLUSTER)
        assert response.status_code == 201
        op_path = response.headers["Operation-Location"].split(first.endpoint, 1)[1]
        assert client.get(op_path).json()["status"] == "InProgress"
    first.kill()  # SIGKILL while the reconciler sleeps inside the first step

    second = server_factory(home=first.home)
    with second.client() as client:
        done = second.wait_operation(client, op_path, timeout=30)
        assert done["status"] == "Succeeded", done
        computes = client.get(second.ws_path + "/computes").json()["value"]
        assert [c["name"] for c in computes] == ["crashy"]
        assert computes[0]["provisioning_state"] == "Succeeded"
    steps = _steps(f"sqlite:///{first.home / 'cloudlet.db'}")
    _assert_each_step_once(steps, ["crashy"])


@pytest.mark.postgres
def test_two_servers_on_one_postgres_run_each_operation_once(
    server_factory: Callable[..., RunningServer], postgres_url: str
) -> None:
    env = {"CLOUDLET_FAULT_STEP_DELAY_S": "0.05", "CLOUDLET_LEASE_TTL_S": "5"}
    a = server_factory(db_url=postgres_url, extra_env=env)
    b = server_factory(db_url=postgres_url, extra_env=env, api_key=a.api_key)
    names = [f"c{i:02d}" for i in range(16)]
    with a.client() as ca, b.client() as cb:
        op_paths = []
        for i, name in enumerate(names):
            server, client = (a, ca) if i % 2 == 0 else (b, cb)
            response = client.put(server.ws_path + f"/computes/{name}", json=CLUSTER)
            assert response.status_code == 201, response.text
            op_paths.append(response.headers["Operation-Location"].split(server.endpoint, 1)[1])
        for path in op_paths:
            assert a.wait_operation(ca, path, timeout=60)["status"] == "Succeeded"
        listed = cb.get(b.ws_path + "/computes").json()["value"]
        assert sorted(c["name"] for c in listed) == names
    steps = _steps(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    _assert_each_step_once(steps, names)
    assert len({executor for *_, executor in steps}) == 2, "both replicas should have carried out work"


@pytest.mark.postgres
def test_replica_takes_over_operations_of_a_dead_replica(
    server_factory: Callable[..., RunningServer], postgres_url: str
) -> None:
    a = server_factory(
        db_url=postgres_url, extra_env={"CLOUDLET_FAULT_STEP_DELAY_S": "30", "CLOUDLET_LEASE_TTL_S": "60"}
    )
    with a.client() as client:
        response = client.put(a.ws_path + "/computes/orphan", json=CLUSTER)
        assert response.status_code == 201, response.text
        op_id = response.headers["Operation-Location"].rsplit("/", 1)[1]
    # Wait until replica A holds the lease, then kill it.
    with psycopg.connect(postgres_url) as conn:
        for _ in range(200):
            owner = conn.execute("SELECT lease_owner FROM operations WHERE id = %s", (op_id,)).fetchone()
            if owner and owner[0]:
                break
            conn.commit()
            time.sleep(0.05)
        assert owner and owner[0]
        # Shorten A's lease so the test need not wait a minute: as if its TTL had run out.
        conn.execute("UPDATE operations SET lease_expires_at = 0 WHERE id = %s", (op_id,))
        conn.commit()
    a.kill()
    b = server_factory(db_url=postgres_url, api_key=a.api_key)
    with b.client() as client:
        done = b.wait_operation(client, f"/api/v1/operations/{op_id}", timeout=30)
        assert done["status"] == "Succeeded"
    steps = _steps(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    _assert_each_step_once(steps, ["orphan"])
    assert {executor for *_, executor in steps} == {b_executor(b)}


def b_executor(server: RunningServer) -> str:
    return (server.home / "replica-id").read_text().strip()
