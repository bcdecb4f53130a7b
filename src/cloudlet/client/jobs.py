"""Command jobs from Python, shaped like ``azure.ai.ml`` (``command()``, ``Input``, ``ml_client.jobs``).

>>> from cloudlet.client import MLClient, command, Input
>>> job = command(code="./src", command="python train.py --data ${{inputs.data}}",
...               inputs={"data": Input(type="uri_folder", path="./data")}, compute="cpu-cluster")
>>> returned = MLClient().jobs.create_or_update(job)  # doctest: +SKIP
>>> MLClient().jobs.stream(returned.name)  # doctest: +SKIP

Local ``code`` and local ``uri_file``/``uri_folder`` input paths are uploaded before the job is
submitted (``HEAD`` first, so an unchanged folder is not sent again) and replaced by
``codes/<sha256>`` / ``azureml://datastores/workspaceblobstore/paths/LocalUpload/<hash>/<name>``.
Relative paths resolve against the job YAML's folder (``load_job``) or the working directory.
A sweep job's document (``type: sweep``) is submitted the same way: its trial's local code and its
local inputs are uploaded.
"""

from __future__ import annotations

import builtins
import copy
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from cloudlet.client._rest import quote_segment
from cloudlet.client.artifacts import Upload, download_bytes, unpack, upload_code, upload_data
from cloudlet.client.job_entities import (
    CommandJob,
    Input,
    Job,
    JobValidationError,
    MpiDistribution,
    Output,
    PyTorchDistribution,
    TensorFlowDistribution,
    command,
    generate_job_name,
    load_job,
)
from cloudlet.client.job_support import inline_conda_file, job_summary, local_path
from cloudlet.client.operations import LROPoller, _Operations
from cloudlet.client.pipelines import prepare_pipeline, stream_pipeline
from cloudlet.client.sweep_stream import stream_sweep
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_paths import PATH_TYPES, is_remote_path
from cloudlet.domain.jobs.job_status import FINAL

# ----------------------------------------------------------------------------------------------
# Operations.


class JobOperations(_Operations):
    """``client.jobs``: submit (with code/data upload), read, list, cancel, stream, download."""

    stream_poll_interval = 0.2

    last_uploads: builtins.list[Upload]
    last_upload_skipped: bool | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_uploads = []
        self.last_upload_skipped = None  # code upload of the last create: True = already on server

    def _path(self, name: str) -> str:
        return f"{self._scope.ws_path()}/jobs/{quote_segment(name)}"

    def prepare(
        self, job: CommandJob | dict[str, Any], base_path: str | Path | None = None
    ) -> dict[str, Any]:
        """Validate, inline ``conda_file``, upload local code/inputs; return the body to ``PUT``."""
        if isinstance(job, CommandJob):
            body = job._to_rest()
            base = Path(base_path or job.base_path or Path.cwd())
        elif isinstance(job, dict):
            body = copy.deepcopy(job)
            base = Path(base_path or Path.cwd())
        else:
            raise TypeError(f"cannot submit a {type(job).__name__}; pass a CommandJob or a dict")
        if str(body.get("type", "")).lower() == "pipeline":  # its steps' local files: client.pipelines
            self.last_uploads = []
            return prepare_pipeline(self._rest, self._scope.ws_path(), body, base, self.last_uploads)
        sweep = str(body.get("type", "")).lower() == "sweep"
        trial = body.get("trial") if sweep else body  # a sweep's code and environment are its trial's
        if isinstance(trial, dict):
            inline_conda_file(trial, base, "trial." if sweep else "")
        # The documents' models, here rather than at import: ~0.2 s of every CLI command's start.
        from cloudlet.domain.jobs.job_spec import parse_job
        from cloudlet.domain.jobs.sweep_jobs import parse_sweep

        try:
            if sweep:
                parse_sweep(body)
            else:
                parse_job(body)
        except CloudletError as exc:
            raise JobValidationError.from_error(exc) from None
        self.last_uploads = []
        self.last_upload_skipped = None
        assert isinstance(trial, dict)  # validated
        self._upload_local(body, trial, base, "trial." if sweep else "")
        return body

    def _upload_local(self, body: dict[str, Any], holder: dict[str, Any], base: Path, prefix: str) -> None:
        """Upload HOLDER's local ``code`` (the job, or a sweep's trial) and BODY's local inputs."""
        ws = self._scope.ws_path()
        code = holder.get("code")
        if isinstance(code, str) and not is_remote_path(code):
            local = local_path(base, code, f"{prefix}code")
            upload = upload_code(self._rest, ws, local)
            self.last_uploads.append(upload)
            self.last_upload_skipped = upload.skipped
            holder["code"] = upload.uri
        for key, item in (body.get("inputs") or {}).items():
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                continue
            if item.get("type", "uri_folder") not in PATH_TYPES or is_remote_path(item["path"]):
                continue
            local = local_path(base, item["path"], f"inputs.{key}.path")
            if item.get("type", "uri_folder") == "uri_folder" and not local.is_dir():
                raise JobValidationError.at(f"inputs.{key}.path", f"{local} is not a folder (uri_folder)")
            if item.get("type") == "uri_file" and not local.is_file():
                raise JobValidationError.at(f"inputs.{key}.path", f"{local} is not a file (uri_file)")
            upload = upload_data(self._rest, ws, local)
            self.last_uploads.append(upload)
            body["inputs"][key] = {**item, "type": item.get("type", "uri_folder"), "path": upload.uri}

    def create_or_update(
        self, job: CommandJob | dict[str, Any], *, base_path: str | Path | None = None
    ) -> Job:
        """Upload what is local, then ``PUT {ws}/jobs/{name}`` (name generated when absent)."""
        body = self.prepare(job, base_path)
        name = body.get("name") or generate_job_name()
        body["name"] = name
        created = Job(self._rest.put(self._path(name), body))
        if isinstance(job, CommandJob) and job.name is None:
            job.name = name
        return created

    def get(self, name: str) -> Job:
        return Job(self._rest.get(self._path(name)))

    def deliveries(self, name: str) -> list[dict[str, Any]]:
        """The job's notification delivery log (an email or webhook each: event, state, attempts,
        last status or error, next try)."""
        return list(self._rest.get(f"{self._path(name)}/deliveries")["value"])

    def list(
        self,
        *,
        compute: str | None = None,
        status: str | None = None,
        max_results: int | None = None,
        parent_job_name: str | None = None,
    ) -> builtins.list[Job]:
        """Jobs newest first, optionally of one compute and/or status, or the child jobs of
        ``parent_job_name`` (a pipeline's steps, a sweep's trials), as azure-ai-ml's
        ``jobs.list(parent_job_name=…)`` (every page, or the first ``max_results`` jobs)."""
        params = {"compute": compute, "status": status, "parent": parent_job_name}
        path = f"{self._scope.ws_path()}/jobs"
        return [Job(j) for j in self._rest.list_values(path, params=params, limit=max_results)]

    def begin_cancel(self, name: str) -> LROPoller[Job]:
        """``POST …/cancel``; ``.result()`` is the job as returned (``Canceled`` once it stops)."""
        job = Job(self._rest.post(f"{self._path(name)}/cancel"))
        return LROPoller(self._rest, None, None, job)

    def monitoring(self, name: str) -> dict[str, Any]:
        """The job's resource samples per node (downsampled), latest values and idle flags."""
        return dict(self._rest.get(f"{self._path(name)}/monitoring") or {})

    def logs(
        self, name: str, offset: int = 0, file: str | None = None, attempt: int | None = None
    ) -> dict[str, Any]:
        """One ``GET …/logs`` page.

        ``{"files", "file", "offset", "data", "next_offset", "status", "attempt"}``.
        """
        params = {"offset": offset, "file": file, "attempt": attempt}
        return dict(self._rest.get(f"{self._path(name)}/logs", params=params) or {})

    def stream(
        self,
        name: str,
        out: TextIO | None = None,
        *,
        file: str | None = None,
        timeout: float | None = None,
        attempt: int | None = None,
    ) -> Job:
        """Print the job's log as it grows until the job ends, then a summary line; return the job.

        A new attempt (retry after preemption or node loss) restarts from the top of its log.
        With ``attempt``, that attempt's log only, until that attempt has ended.
        """
        stream = out if out is not None else sys.stdout
        kind = self.get(name)._to_dict().get("type") if attempt is None and file is None else None
        if kind == "pipeline":
            return stream_pipeline(self, name, stream, timeout)  # its steps' logs, in turn
        if kind == "sweep":
            return stream_sweep(self, name, stream, timeout)  # each trial as it starts and ends
        deadline = None if timeout is None else time.monotonic() + timeout
        offset = 0
        fixed = attempt
        while True:
            page = self.logs(name, offset, file, fixed)
            page_attempt = page.get("attempt")
            if fixed is None and attempt is not None and page_attempt is not None and page_attempt != attempt:
                attempt, offset = page_attempt, 0
                stream.write(f"\n--- attempt {page_attempt} ---\n")
                stream.flush()
                continue
            attempt = page_attempt
            data = str(page.get("data") or "")
            if data:
                stream.write(data)
                stream.flush()
            next_offset = page.get("next_offset")
            offset = int(next_offset) if next_offset is not None else offset + len(data.encode())
            if not data:
                later = fixed is not None and int(page.get("attempts") or 0) > fixed
                if page.get("status") in FINAL or later:  # the job, or the attempt asked for, ended
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"job {name} still {page.get('status')} after {timeout}s")
                time.sleep(self.stream_poll_interval)
        job = self.get(name)
        stream.write(job_summary(job._to_dict()) + "\n")
        stream.flush()
        return job

    def download(
        self,
        name: str,
        download_path: str | Path = ".",
        output_name: str | None = None,
        *,
        all: bool = False,  # azure-ai-ml's name (jobs.download(all=True))
        attempt: int | None = None,
    ) -> builtins.list[Path]:
        """Download outputs to ``<download_path>/named-outputs/<output>``. Without ``output_name``
        (or with ``all``, as ``az ml job download --all``): every named output, plus the default
        artifacts of the latest attempt (or ``attempt``): its ``./outputs`` and ``./logs`` as
        ``artifacts/outputs`` and ``artifacts/logs``, and its log as
        ``artifacts/user_logs/std_log.txt``."""
        if all:
            output_name = None
        root = Path(download_path)
        job = self.get(name)
        names = [output_name] if output_name else list((job._to_dict().get("outputs") or {}).keys())
        written: builtins.list[Path] = []
        for output in names:
            data = download_bytes(self._rest, f"{self._path(name)}/outputs/{quote_segment(output)}")
            dest = root / "named-outputs" / output
            unpack(data, dest)
            written.append(dest)
        if output_name is None:
            archive = download_bytes(
                self._rest,
                f"{self._path(name)}/artifacts",
                {"attempt": str(attempt)} if attempt is not None else None,
            )
            unpack(archive, root / "artifacts")
            written += [root / "artifacts" / folder for folder in ("outputs", "logs")]
            text, offset = [], 0
            while True:
                page = self.logs(name, offset, attempt=attempt)
                chunk = str(page.get("data") or "")
                if not chunk:
                    break
                text.append(chunk)
                offset = int(page.get("next_offset") or offset + len(chunk.encode()))
            log = root / "artifacts" / "user_logs" / "std_log.txt"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("".join(text), encoding="utf-8")
            written.append(log)
        return written


__all__ = [
    "CommandJob",
    "Input",
    "Job",
    "JobOperations",
    "JobValidationError",
    "MpiDistribution",
    "Output",
    "PyTorchDistribution",
    "TensorFlowDistribution",
    "command",
    "generate_job_name",
    "job_summary",
    "load_job",
]
