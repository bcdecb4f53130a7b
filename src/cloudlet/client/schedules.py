"""Job schedules from Python (``ml_client.schedules``-like) and for ``cloudlet schedule``.

A schedule's ``create_job`` is resolved here, as ``cloudlet job create --file`` resolves a job: a
local file (``create_job: ./job.yml``, relative to the schedule's folder) is read, and a job
document's local code and inputs are uploaded (``client.jobs.JobOperations.prepare``), so the
server stores a full job document. ``create_job: azureml:<job name>`` is sent as is: the server
copies that job's definition.
"""

from __future__ import annotations

import builtins
import copy
from pathlib import Path
from typing import Any

import yaml

from cloudlet.client._rest import quote_segment
from cloudlet.client.entities import RestObject
from cloudlet.client.jobs import JobOperations
from cloudlet.client.operations import _Operations

AZUREML_PREFIX = "azureml:"
# az's --list-view-type values and the SDK's ScheduleListViewType, to the server's views.
LIST_VIEWS = {
    "enabled_only": "enabled",
    "enabledonly": "enabled",
    "enabled": "enabled",
    "disabled_only": "disabled",
    "disabledonly": "disabled",
    "disabled": "disabled",
    "all": "all",
}


class Schedule(RestObject):
    """A job schedule as the server shows it (``trigger``, ``create_job``, ``is_enabled``,
    ``next_fire_time``, ``last_job_name``, ``last_error``)."""


class ScheduleOperations(_Operations):
    """``client.schedules``: create_or_update, get, list, enable, disable, delete."""

    def _path(self, name: str = "") -> str:
        base = f"{self._scope.ws_path()}/schedules"
        return f"{base}/{quote_segment(name)}" if name else base

    def prepare(self, schedule: dict[str, Any], base_path: str | Path | None = None) -> dict[str, Any]:
        """The body to ``PUT``: ``create_job`` read (a local file) and its local files uploaded."""
        body = {k: v for k, v in copy.deepcopy(schedule).items() if k != "$schema"}
        base = Path(base_path or Path.cwd())
        job = body.get("create_job")
        if isinstance(job, str) and not job.startswith(AZUREML_PREFIX):
            path = Path(job).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                raise ValueError(
                    f"create_job: {path} is not a file; give a job YAML file or 'azureml:<job name>'"
                )
            job = yaml.safe_load(path.read_text())
            base = path.parent  # the job file's own paths are relative to it
        if isinstance(job, dict):
            jobs = JobOperations(self._rest, self._scope)
            body["create_job"] = {k: v for k, v in jobs.prepare(job, base).items() if k != "$schema"}
        return body

    def create_or_update(self, schedule: dict[str, Any], *, base_path: str | Path | None = None) -> Schedule:
        body = self.prepare(schedule, base_path)
        return Schedule(self._rest.put(self._path(str(body["name"])), body))

    def get(self, name: str) -> Schedule:
        return Schedule(self._rest.get(self._path(name)))

    def list(self, list_view_type: str = "enabled") -> builtins.list[Schedule]:
        view = LIST_VIEWS.get(list_view_type.lower().replace("-", "_"), list_view_type)
        return [
            Schedule(item) for item in self._rest.list_values(self._path(), params={"list_view_type": view})
        ]

    def enable(self, name: str) -> Schedule:
        return Schedule(self._rest.post(self._path(name) + "/enable", {}))

    def disable(self, name: str) -> Schedule:
        return Schedule(self._rest.post(self._path(name) + "/disable", {}))

    def delete(self, name: str) -> None:
        self._rest.delete(self._path(name))
