"""The events feed across servers: a stream watched on server B (one PostgreSQL store) delivers the
events of a change made through server A, in order, each once (B polls the store; nothing in
process tells it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import RunningServer
from tests.integration.test_events import Watcher
from tests.jobs_helpers import wait_until


@pytest.mark.postgres
def test_a_stream_on_one_server_sees_changes_made_through_another(
    server_factory: Callable[..., RunningServer], postgres_url: str
) -> None:
    a = server_factory(db_url=postgres_url)
    b = server_factory(db_url=postgres_url, api_key=a.api_key, extra_env={"CLOUDLET_EVENTS_HEARTBEAT_S": "1"})
    with b.client() as api:
        start = api.get(f"{b.ws_path}/events", params={"limit": 1000}).json()["lastSeq"]
    watcher = Watcher(b, start, {"type": "compute"})
    watcher.start()
    try:
        with a.client() as api:
            body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
            made = api.put(f"{a.ws_path}/computes/from-a", json=body)
            assert made.status_code in (200, 201), made.text
        wait_until(
            lambda: any(e["name"] == "from-a" and e["to_state"] == "Succeeded" for e in list(watcher.events)),
            60,
            "server B's stream to deliver the compute made through A",
        )
    finally:
        watcher.close()
    moves = [(e["from_state"], e["to_state"]) for e in watcher.events if e["name"] == "from-a"]
    assert moves[0][0] is None, moves
    seqs = [e["seq"] for e in watcher.events]
    assert seqs == sorted(set(seqs))
