"""The replica board under ``cloudlet server --workers N`` (issue 26): a replica on a compute
instance is driven by the board of what each node's agent runs (``control/replica_hosts.py``),
which worker 0 (the owner, ``control/online_shared.py``) keeps; an agent's report may reach any
worker.

The owner's ``PublishedBoard`` writes what each node should run (and where each replica's
archives and log lie) to ``$CLOUDLET_HOME/online/board.json`` whenever that changes, atomically.
Another worker's ``MirroredBoard`` answers an agent's report from that file, writes the log tail
the agent sent to the replica's log itself, and passes the statuses on to the owner (a wake-up,
kind ``ASK``, op ``report``); it serves the archives from the paths in the file. A report lost in
a full inbox is the agent's next report's to carry (agents report every few seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cloudlet.control.replica_hosts import Assignment, ReplicaBoard


def board_path(home: Path) -> Path:
    return home / "online" / "board.json"


class PublishedBoard(ReplicaBoard):
    """The owner's board: every change of what the agents should run goes to the board file."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._written = ""
        self._writing = threading.Lock()

    def assign(
        self, node_id: str, spec: dict[str, Any], archives: dict[str, Path], log_path: Path
    ) -> Assignment:
        made = super().assign(node_id, spec, archives, log_path)
        self.publish()
        return made

    def report(self, node_id: str, statuses: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        answer = super().report(node_id, statuses)
        self.publish()  # a withdrawn replica the agent let go is gone
        return answer

    def withdraw(self, rid: str, wait_s: float = 10.0) -> None:
        with self.changed:
            found = self.assignments.get(rid)
            if found is not None:
                found.withdrawn = True
        self.publish()
        super().withdraw(rid, wait_s)
        self.publish()

    def snapshot(self) -> dict[str, Any]:
        with self.changed:
            live = [a for a in self.assignments.values() if not a.withdrawn]
        return {
            "replicas": {
                a.id: {
                    "node": a.node_id,
                    "spec": a.spec,
                    "archives": {part: str(path) for part, path in a.archives.items()},
                    "log": str(a.log_path),
                }
                for a in live
            }
        }

    def publish(self) -> None:
        text = json.dumps(self.snapshot(), sort_keys=True)
        with self._writing:
            if text == self._written:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f"board.{threading.get_ident()}.tmp")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.replace(partial, self.path)
            self._written = text

    def reported_elsewhere(self, node_id: str, statuses: Mapping[str, Mapping[str, Any]]) -> None:
        """An agent's report that reached another worker (its log tail already written)."""
        self.report(node_id, statuses)


class MirroredBoard(ReplicaBoard):
    """Another worker's board: the owner's, read from the board file; reports go to the owner."""

    def __init__(self, path: Path, tell_owner: Callable[[str, dict[str, Any]], None]) -> None:
        super().__init__()
        self.path, self.tell_owner = path, tell_owner
        self._seen: tuple[int, int] | None = None
        self._replicas: dict[str, dict[str, Any]] = {}
        self._reading = threading.Lock()

    def _board(self) -> dict[str, dict[str, Any]]:
        with self._reading:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                return {}
            if self._seen != (stat.st_mtime_ns, stat.st_size):
                with contextlib.suppress(ValueError, OSError):  # the next look reads the next one
                    self._replicas = dict(json.loads(self.path.read_text())["replicas"])
                    self._seen = (stat.st_mtime_ns, stat.st_size)
            return self._replicas

    def desired(self, node_id: str) -> list[dict[str, Any]]:
        return [r["spec"] for r in self._board().values() if r["node"] == node_id]

    def report(self, node_id: str, statuses: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        board, passed = self._board(), {}
        for rid, status in statuses.items():
            found = board.get(rid)
            text = status.get("log")
            if found is not None and found["node"] == node_id and isinstance(text, str):
                with contextlib.suppress(OSError):
                    Path(found["log"]).write_text(text, encoding="utf-8")
            passed[rid] = {k: v for k, v in status.items() if k != "log"}
        with self.changed:
            self.reports[node_id] = self.reports.get(node_id, 0) + 1
            self.changed.notify_all()
        self.tell_owner(node_id, passed)
        return self.desired(node_id)

    def archive(self, node_id: str, rid: str, part: str) -> Path | None:
        found = self._board().get(rid)
        if found is None or found["node"] != node_id or part not in found["archives"]:
            return None
        return Path(found["archives"][part])
