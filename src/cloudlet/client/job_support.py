"""What ``client/jobs.py`` shares with ``client/pipelines.py`` and ``client/sweep_stream.py``
(which ``jobs`` calls for pipeline and sweep jobs, so they cannot import it): a job's summary line,
its local paths and inline environments, and ``JobFollower``, the part of ``JobOperations`` that
following a pipeline's steps or a sweep's trials uses."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Protocol, TextIO

from cloudlet.client.assets import AssetValidationError, inline_environment
from cloudlet.client.job_entities import Job, JobValidationError
from cloudlet.domain.jobs.job_status import JobStatus


class JobFollower(Protocol):
    """``JobOperations`` as the pipeline and sweep log followers use it."""

    stream_poll_interval: float

    def get(self, name: str) -> Job: ...

    def stream(self, name: str, out: TextIO | None = None, *, timeout: float | None = None) -> Job: ...


def job_summary(job: dict[str, Any]) -> str:
    """One line: ``Job <name> Completed in 12s (exit code 0)`` (+ the error of a failed job)."""
    name, status = job.get("name"), job.get("status")
    text = f"Job {name} {status}"
    duration = _duration(job.get("start_time"), job.get("end_time"))
    if duration is not None:
        text += f" in {duration}"
    if job.get("exit_code") is not None:
        text += f" (exit code {job['exit_code']})"
    error = job.get("error")
    if isinstance(error, dict) and error.get("message"):
        text += f": {error['message']}"
    elif status != JobStatus.COMPLETED and job.get("status_message"):
        text += f": {job['status_message']}"
    return text


def _duration(start: Any, end: Any) -> str | None:
    try:
        begin = _dt.datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        finish = _dt.datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    seconds = max(0, int((finish - begin).total_seconds()))
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def local_path(base: Path, value: str, target: str) -> Path:
    """VALUE (a job's local path, ``file:`` or not) relative to BASE; a JobValidationError at TARGET
    when it does not exist."""
    path = Path(value.removeprefix("file:")).expanduser()
    resolved = path if path.is_absolute() else (base / path)
    if not resolved.exists():
        raise JobValidationError.at(target, f"local path '{value}' does not exist (looked at {resolved})")
    return resolved.resolve()


def inline_conda_file(body: dict[str, Any], base: Path, prefix: str = "") -> None:
    """An inline environment's local ``conda_file`` and ``build.path`` read as environment assets'
    are (``client.assets.inline_environment``)."""
    env = body.get("environment")
    if not isinstance(env, dict) or not (isinstance(env.get("conda_file"), str) or "build" in env):
        return
    env = dict(env)
    try:
        inline_environment(env, base)
    except AssetValidationError as exc:
        message = str(exc).removeprefix(f"{exc.target}: ")
        raise JobValidationError.at(f"{prefix}environment.{exc.target}", message) from None
    body["environment"] = env
