"""``client.events``: the workspace's lifecycle events feed (``GET …/events``).

``list`` reads pages after a sequence number; ``watch`` follows the server-sent stream and, when
the connection breaks, reconnects with the last seq it delivered (``Last-Event-ID``), so a caller
sees every event once, in order, within the server's retention window (past it: 410,
``HttpResponseError`` with code ``EventsPruned``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from cloudlet.client._rest import API_PREFIX, ServiceRequestError
from cloudlet.client.operations import _Operations


class EventOperations(_Operations):
    def page(
        self,
        since: int | None = None,
        *,
        type: str | None = None,
        compute: str | None = None,
        limit: int = 100,
        all_workspaces: bool = False,
    ) -> dict[str, Any]:
        """One page: ``{"value": [events], "lastSeq": N}`` (``nextLink`` while more follow)."""
        params = {"since": since, "type": type, "compute": compute, "limit": limit}
        path = f"{API_PREFIX}/events" if all_workspaces else f"{self._scope.ws_path()}/events"
        return dict(self._rest.get(path, params))

    def list(
        self,
        since: int | None = None,
        *,
        type: str | None = None,
        compute: str | None = None,
        page_size: int = 100,
        all_workspaces: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Every event after SINCE kept now, oldest first, page by page."""
        while True:
            got = self.page(since, type=type, compute=compute, limit=page_size, all_workspaces=all_workspaces)
            yield from got["value"]
            since = int(got["lastSeq"])
            if "nextLink" not in got:
                return

    def watch(
        self,
        since: int | None = None,
        *,
        type: str | None = None,
        compute: str | None = None,
        all_workspaces: bool = False,
        reconnect_s: float = 1.0,
    ) -> Iterator[dict[str, Any]]:
        """Events after SINCE as they happen, forever; reconnects after a broken connection."""
        path = f"{API_PREFIX}/events" if all_workspaces else f"{self._scope.ws_path()}/events"
        last = since
        while True:
            params = {"since": last, "type": type, "compute": compute, "watch": "true"}
            resume = {} if last is None else {"Last-Event-ID": str(last)}
            try:
                for event in _parse(self._rest.stream_lines(path, params, resume)):
                    last = max(last or 0, int(event["seq"]))
                    yield event
            except ServiceRequestError:
                pass  # the server went away or the network broke: reconnect from LAST
            time.sleep(reconnect_s)


def _parse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The ``data`` of each server-sent event (comments and heartbeats skipped)."""
    data: list[str] = []
    kind = "message"
    for line in lines:
        if not line:
            if kind == "error":  # pruned past us while we watched: reconnecting answers 410
                return
            if data:
                yield json.loads("\n".join(data))
            data, kind = [], "message"
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line.startswith("event:"):
            kind = line[6:].strip()
