"""The events feed's retention window over HTTP: a server that keeps only the last 2 events prunes
the rest in its loop, a ``since`` that lost events answers 410 with the oldest seq kept, and
reading on from just below that seq (or from the oldest, with no ``since``) works."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, served, wait_until


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {"CLOUDLET_EVENTS_MAX_COUNT": "2", "CLOUDLET_EVENTS_PRUNE_EVERY_S": "0.2"}
    yield from served(tmp_path_factory, "events-retention", extra_env=env)


def test_a_since_past_the_window_answers_410_with_the_oldest_kept(srv: RunningServer) -> None:
    feed = f"{srv.ws_path}/events"
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, "kept-short", body)  # a compute and its operation: several events
        gone = wait_until(
            lambda: (r := api.get(feed, params={"since": 0})).status_code == 410 and r,
            30,
            "the first events to be pruned",
        )
        error = gone.json()["error"]
        assert error["code"] == "EventsPruned" and error["target"] == "since", error
        oldest = error["details"][0]["oldestSeq"]
        assert oldest > 1
        on = api.get(feed, params={"since": oldest - 1})
        assert on.status_code == 200, on.text
        assert on.json()["value"][0]["seq"] == oldest
        assert api.get(feed, params={"since": oldest - 2}).status_code == 410
        fresh = api.get(feed)  # no since: from the oldest kept, never 410
        assert fresh.status_code == 200 and len(fresh.json()["value"]) <= 2
        watched = httpx.get(
            srv.endpoint + feed,
            params={"watch": "true", "since": 0},
            headers={"Authorization": f"Bearer {srv.api_key}"},
        )
        assert watched.status_code == 410  # a stream too: an HTTP status, not a broken stream
