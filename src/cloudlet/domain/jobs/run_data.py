"""What a run may read and write over the agent's data routes (pure; docs/agent-protocol.md).

A node that does not share the server's disk moves a run's data over HTTP: it downloads what the
run reads before its process starts and uploads what it wrote. What the run may touch is exactly
its own spec's ``mounts`` (dispatch lists them: path inputs read-only, or read-write for
``rw_mount``; outputs, the checkpoint dir and the default artifacts folders read-write). A request
names one by its index in that list and a path inside it: ``2/sub/file.txt``; nothing else of the
server's disk (another run's folders, an absolute path, a climb out with ``..``) can be named.
Symbolic links below a mount are refused where the path is opened (``services/jobs/run_data.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.paths import relative_parts

FIELD = "path"
WHAT = "a mount's index and a path in it, such as 0 or 1/sub/file.txt"


@dataclass(frozen=True)
class RunMount:
    index: int  # its place in the run spec's ``mounts``
    path: str  # absolute, on the server
    writable: bool


@dataclass(frozen=True)
class DataTarget:
    mount: RunMount
    parts: tuple[str, ...]  # beneath the mount's path; empty: the mount itself


def run_mounts(spec: Mapping[str, Any]) -> list[RunMount]:
    """The run's mounts, by their index in the spec (an entry without a path keeps its index)."""
    found = []
    for index, mount in enumerate(spec.get("mounts") or []):
        if isinstance(mount, Mapping) and isinstance(mount.get("path"), str) and mount["path"]:
            path = str(mount["path"])
            if path.startswith("/"):
                found.append(RunMount(index, path, mount.get("mode") == "rw"))
    return found


def locate(spec: Mapping[str, Any], path: str, *, write: bool) -> DataTarget:
    """Where ``path`` (from a request) points among the run's mounts, or the error to answer:
    400 for a malformed path, 404 for a mount the run does not have, 409 for a write to a
    read-only one (never 401/403: those tell an agent its token is gone)."""
    parts = relative_parts(path, FIELD, WHAT)
    mounts = run_mounts(spec)
    if not parts or not parts[0].isdigit() or len(parts[0]) > 6:
        raise CloudletError(
            "ValidationError",
            f"{FIELD} must start with the index of one of the run's mounts (0 to {len(mounts) - 1}), "
            f"then the path inside it; got '{path}'",
            FIELD,
        )
    index = int(parts[0])
    mount = next((m for m in mounts if m.index == index), None)
    if mount is None:
        raise CloudletError(
            "RunDataNotFound",
            f"the run has no mount {index} (its mounts are {[m.index for m in mounts]})",
            FIELD,
            status=404,
        )
    if write and not mount.writable:
        raise CloudletError(
            "ReadOnlyMount",
            f"mount {index} of the run is one of its read-only inputs: upload only into its outputs, "
            "checkpoint dir or default artifacts (the mounts with mode rw)",
            FIELD,
            status=409,
        )
    return DataTarget(mount, parts[1:])
