"""Job traces from CSV: submit time, duration, and GPUs or nodes per job.

Columns are found by name (case-insensitive, first match wins):

- submit time: ``timestamp``, ``submit_time``, ``submitted_at``, ``submit`` — seconds (a number) or a
  date-time (``2017-10-09 07:01:55``, ISO 8601; read as UTC); replay starts at the earliest one;
- duration in seconds: ``duration``, ``duration_s``, ``runtime``, ``run_time``;
- size of the job: ``nodes``, ``num_nodes``, ``instance_count`` (nodes, used as is), else ``num_gpus``,
  ``gpus``, ``gpu`` (GPUs: ``ceil(gpus / GPUs per node of the size)`` nodes, at least one). With
  neither, every job takes one node;
- optionally the group a job belongs to: ``team``, ``cluster`` (Philly's virtual clusters), ``vc``,
  ``user`` — the policy comparison maps groups to teams.

Rows with an empty or unreadable value, or a negative duration, are skipped and counted. Philly's
trace has no job status column: failed and killed jobs held their GPUs for their recorded duration,
so they are replayed like the others.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

SUBMIT_COLUMNS = ("timestamp", "submit_time", "submitted_at", "submit")
DURATION_COLUMNS = ("duration", "duration_s", "runtime", "run_time")
NODE_COLUMNS = ("nodes", "num_nodes", "instance_count")
GPU_COLUMNS = ("num_gpus", "gpus", "gpu")
GROUP_COLUMNS = ("team", "cluster", "vc", "virtual_cluster", "user")


class TraceError(ValueError):
    """The trace cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class TraceJob:
    row: int  # line number in the file (the header is line 1)
    submit_s: float  # seconds after the earliest submission
    duration_s: float
    gpus: int | None
    nodes: int | None
    group: str | None = None  # the team, virtual cluster or user (GROUP_COLUMNS), when given


@dataclass
class Trace:
    path: Path
    jobs: list[TraceJob]  # in submit order
    columns: dict[str, str]  # role -> the column used
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows
    group_column: str | None = None  # the column read as each job's group (GROUP_COLUMNS)

    @property
    def gives_gpus(self) -> bool:
        return "gpus" in self.columns and "nodes" not in self.columns

    def nodes_per_job(self, gpus_per_node: int) -> list[int]:
        """Nodes each job needs on a size with ``gpus_per_node`` GPUs."""
        if not self.gives_gpus:
            return [job.nodes or 1 for job in self.jobs]
        if gpus_per_node < 1:
            raise TraceError("the trace gives GPU counts but the size has no GPUs")
        return [max(1, math.ceil((job.gpus or 0) / gpus_per_node)) for job in self.jobs]


def _pick(header: list[str], names: tuple[str, ...]) -> str | None:
    lowered = {h.strip().lower(): h for h in header}
    return next((lowered[n] for n in names if n in lowered), None)


def _submit_seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        stamp = datetime.fromisoformat(text.strip())
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _columns(path: Path, header: list[str] | None) -> dict[str, str]:
    if not header:
        raise TraceError(f"--trace {path}: the file is empty; it needs a header row")
    found = {
        "submit": _pick(header, SUBMIT_COLUMNS),
        "duration": _pick(header, DURATION_COLUMNS),
        "nodes": _pick(header, NODE_COLUMNS),
        "gpus": _pick(header, GPU_COLUMNS),
    }
    for role, names in (("submit", SUBMIT_COLUMNS), ("duration", DURATION_COLUMNS)):
        if found[role] is None:
            raise TraceError(
                f"--trace {path}: no {role} column; name one of {', '.join(names)} "
                f"(the header has: {', '.join(header)})"
            )
    return {role: col for role, col in found.items() if col is not None}


def load_trace(path: str | Path) -> Trace:
    """Read a trace CSV; raises ``TraceError`` naming the flag and the fix."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"--trace {path}: cannot read it ({exc.strerror or exc}); give a CSV file") from exc
    with handle:
        reader = csv.DictReader(handle)
        columns = _columns(path, list(reader.fieldnames or []))
        group_column = _pick(list(reader.fieldnames or []), GROUP_COLUMNS)
        read = {**columns, "group": group_column} if group_column else columns
        raw, skipped = _read_rows(reader, read)
    if not raw:
        raise TraceError(f"--trace {path}: no usable rows (skipped: {skipped or 'none'})")
    raw.sort(key=lambda job: (job.submit_s, job.row))
    start = raw[0].submit_s
    jobs = [TraceJob(j.row, j.submit_s - start, j.duration_s, j.gpus, j.nodes, j.group) for j in raw]
    return Trace(path, jobs, columns, skipped, group_column)


def _read_rows(reader: csv.DictReader[str], columns: dict[str, str]) -> tuple[list[TraceJob], dict[str, int]]:
    jobs: list[TraceJob] = []
    skipped: dict[str, int] = {}
    for line, row in enumerate(reader, start=2):
        try:
            job = _parse_row(line, row, columns)
        except (ValueError, TypeError, AttributeError) as exc:
            reason = str(exc).split(":")[0] if isinstance(exc, ValueError) else "unreadable value"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        jobs.append(job)
    return jobs, skipped


def _parse_row(line: int, row: dict[str, str], columns: dict[str, str]) -> TraceJob:
    values = {role: (row.get(col) or "").strip() for role, col in columns.items()}
    group = values.pop("group", "") or None  # optional: an empty group is no group
    missing = [role for role, value in values.items() if not value]
    if missing:
        raise ValueError(f"empty {missing[0]}: line {line}")
    try:
        submit = _submit_seconds(values["submit"])
        duration = float(values["duration"])
        nodes = int(float(values["nodes"])) if "nodes" in values else None
        gpus = int(float(values["gpus"])) if "gpus" in values else None
    except ValueError:
        raise ValueError(f"unreadable value: line {line}") from None
    if not math.isfinite(duration) or duration < 0:
        raise ValueError(f"negative or infinite duration: line {line}")
    if (nodes is not None and nodes < 1) or (gpus is not None and gpus < 0):
        raise ValueError(f"bad node or GPU count: line {line}")
    return TraceJob(line, submit, duration, gpus, nodes, group)
