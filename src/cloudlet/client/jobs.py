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
"""

from __future__ import annotations

import builtins
import copy
import datetime as _dt
import secrets
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from cloudlet.client._rest import HttpResponseError, ODataV4Error, quote_segment
from cloudlet.client.artifacts import Upload, download_bytes, unpack, upload_code, upload_data
from cloudlet.client.entities import RestObject, _prune, _to_rest_value
from cloudlet.client.operations import LROPoller, _Operations
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.job_spec import PATH_TYPES, is_remote_path, parse_job
from cloudlet.domain.job_status import FINAL, JobStatus

# fmt: off
_ADJECTIVES = (
    "affable", "amiable", "bold", "brave", "busy", "calm", "clever", "cool", "crisp", "eager",
    "frosty", "gentle", "happy", "honest", "jolly", "keen", "kind", "lively", "lucid", "mellow",
    "modest", "nifty", "polite", "quiet", "shy", "sleepy", "stoic", "sunny", "tidy", "witty",
)
_NOUNS = (
    "apple", "basket", "boot", "camel", "carrot", "cup", "engine", "feather", "garden", "guitar",
    "island", "kettle", "lemon", "lion", "market", "night", "onion", "owl", "pencil", "pin", "plum",
    "river", "rocket", "sail", "spoon", "stick", "tomato", "tray", "whale", "yak",
)
# fmt: on


def generate_job_name() -> str:
    """An Azure-like job name: ``<adjective>_<noun>_<8 hex>``, e.g. ``frosty_kettle_3b9f0c1d``."""
    return f"{secrets.choice(_ADJECTIVES)}_{secrets.choice(_NOUNS)}_{secrets.token_hex(4)}"


class JobValidationError(HttpResponseError):
    """The job definition is invalid (checked locally before anything is uploaded or submitted)."""

    @classmethod
    def from_error(cls, exc: CloudletError) -> JobValidationError:
        error = ODataV4Error(code=exc.code, message=exc.message, target=exc.target, details=exc.details)
        return cls(str(error), status_code=None, error=error)

    @classmethod
    def at(cls, target: str, message: str) -> JobValidationError:
        return cls.from_error(CloudletError(code="ValidationError", message=message, target=target))


# ----------------------------------------------------------------------------------------------
# Entities.


class _Value:
    _kind: str = ""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def _to_rest(self) -> dict[str, Any]:
        data = {k: _to_rest_value(getattr(self, k)) for k in self._fields}
        if self._kind:
            data = {"type": self._kind, **data}
        return _prune(data)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._to_rest() == other._to_rest()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._to_rest().items())
        return f"{type(self).__name__}({args})"


class Input(_Value):
    """A job input: ``Input(type="uri_folder", path="./data")`` or a typed literal
    ``Input(type="number", default=0.01)``. ``mode``: ro_mount, download, rw_mount, direct."""

    def __init__(
        self,
        *,
        type: str = "uri_folder",
        path: str | None = None,
        mode: str | None = None,
        default: Any = None,
        value: Any = None,
        description: str | None = None,
    ) -> None:
        super().__init__(
            type=type, path=path, mode=mode, default=default, value=value, description=description
        )


class Output(_Value):
    """A job output: ``Output(type="uri_folder")``; ``mode``: rw_mount (default) or upload. With
    ``name`` (and optional ``version``) it registers a model (``type="mlflow_model"`` etc.) or data
    asset version when the job completes."""

    def __init__(
        self,
        *,
        type: str = "uri_folder",
        path: str | None = None,
        mode: str | None = None,
        description: str | None = None,
        name: str | None = None,
        version: str | None = None,
    ) -> None:
        super().__init__(type=type, path=path, mode=mode, description=description, name=name, version=version)


class PyTorchDistribution(_Value):
    _kind = "pytorch"

    def __init__(self, *, process_count_per_instance: int | None = None) -> None:
        super().__init__(process_count_per_instance=process_count_per_instance)


class MpiDistribution(_Value):
    _kind = "mpi"

    def __init__(self, *, process_count_per_instance: int | None = None) -> None:
        super().__init__(process_count_per_instance=process_count_per_instance)


class TensorFlowDistribution(_Value):
    _kind = "tensorflow"

    def __init__(self, *, worker_count: int | None = None, parameter_server_count: int | None = None) -> None:
        super().__init__(worker_count=worker_count, parameter_server_count=parameter_server_count)


_JOB_FIELDS = (
    "name",
    "display_name",
    "experiment_name",
    "description",
    "tags",
    "command",
    "code",
    "environment",
    "inputs",
    "outputs",
    "environment_variables",
    "compute",
    "resources",
    "distribution",
    "limits",
    "queue_settings",
    "identity",
    "services",
)


class CommandJob:
    """A command job to submit (``type: command``); attributes use the YAML field names.

    ``base_path`` is where relative local paths (``code``, input paths, ``conda_file``) resolve.
    """

    def __init__(
        self,
        *,
        command: str | None = None,
        name: str | None = None,
        display_name: str | None = None,
        experiment_name: str | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        code: str | Path | None = None,
        environment: Any = None,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        environment_variables: dict[str, str] | None = None,
        compute: str | None = None,
        resources: dict[str, Any] | None = None,
        distribution: Any = None,
        limits: dict[str, Any] | None = None,
        queue_settings: dict[str, Any] | None = None,
        identity: dict[str, Any] | None = None,
        services: dict[str, Any] | None = None,
        base_path: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        self.type = "command"
        self.command = command
        self.name = name
        self.display_name = display_name
        self.experiment_name = experiment_name
        self.description = description
        self.tags = tags
        self.code = str(code) if isinstance(code, Path) else code
        self.environment = environment
        self.inputs = inputs
        self.outputs = outputs
        self.environment_variables = environment_variables
        self.compute = compute
        self.resources = resources
        self.distribution = distribution
        self.limits = limits
        self.queue_settings = queue_settings
        self.identity = identity
        self.services = services
        self.base_path = Path(base_path) if base_path is not None else None
        kwargs.pop("type", None)
        kwargs.pop("$schema", None)
        self._extra = kwargs  # forwarded as-is (the server rejects unknown fields with a reason)

    def _to_rest(self) -> dict[str, Any]:
        """The JSON body of ``PUT {ws}/jobs/{name}`` (``None`` fields omitted), before uploads."""
        body: dict[str, Any] = {"type": "command"}
        for key in _JOB_FIELDS:
            body[key] = _to_rest_value(getattr(self, key))
        body.update({k: _to_rest_value(v) for k, v in self._extra.items()})
        return _prune(body)

    @classmethod
    def _from_dict(cls, doc: dict[str, Any], base_path: str | Path | None = None) -> CommandJob:
        kwargs = {k: v for k, v in doc.items() if k not in ("type", "$schema")}
        return cls(**kwargs, base_path=base_path)

    def __repr__(self) -> str:
        return f"CommandJob(name={self.name!r}, compute={self.compute!r}, command={self.command!r})"


class Job(RestObject):
    """A submitted job as the server reports it: ``name``, ``status``, ``attempt``, ``outputs`` …"""

    @property
    def studio_url(self) -> str | None:
        studio = (self._data.get("services") or {}).get("Studio") or {}
        return studio.get("endpoint") if isinstance(studio, dict) else None

    def __repr__(self) -> str:
        return f"Job(name={self._data.get('name')!r}, status={self._data.get('status')!r})"


def command(
    *,
    command: str,
    code: str | Path | None = None,
    environment: Any = None,
    inputs: dict[str, Any] | None = None,
    outputs: dict[str, Any] | None = None,
    compute: str | None = None,
    instance_count: int | None = None,
    instance_type: str | None = None,
    shm_size: str | None = None,
    distribution: Any = None,
    name: str | None = None,
    display_name: str | None = None,
    experiment_name: str | None = None,
    description: str | None = None,
    tags: dict[str, str] | None = None,
    environment_variables: dict[str, str] | None = None,
    timeout: int | None = None,
    job_tier: str | None = None,
    priority: str | None = None,
    identity: dict[str, Any] | None = None,
    services: dict[str, Any] | None = None,
    base_path: str | Path | None = None,
) -> CommandJob:
    """Build a :class:`CommandJob` the way ``azure.ai.ml.command(...)`` does."""
    resources = _prune(
        {"instance_count": instance_count, "instance_type": instance_type, "shm_size": shm_size}
    )
    queue = _prune({"job_tier": job_tier, "priority": priority})
    return CommandJob(
        command=command,
        code=code,
        environment=environment,
        inputs=inputs,
        outputs=outputs,
        compute=compute,
        resources=resources or None,
        distribution=distribution,
        name=name,
        display_name=display_name,
        experiment_name=experiment_name,
        description=description,
        tags=tags,
        environment_variables=environment_variables,
        limits={"timeout": timeout} if timeout is not None else None,
        queue_settings=queue or None,
        identity=identity,
        services=services,
        base_path=base_path,
    )


def load_job(source: str | Path, params_override: list[dict[str, Any]] | None = None) -> CommandJob:
    """Load a command job YAML file; relative paths in it resolve against the file's folder.

    ``params_override``: ``[{"inputs.learning_rate": 0.1}, {"compute": "local"}]`` (dotted keys).
    """
    path = Path(source)
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        raise JobValidationError.at("$", f"{path} must hold a YAML mapping of job fields")
    for override in params_override or []:
        for key, value in override.items():
            node = doc
            parts = key.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
    return CommandJob._from_dict(doc, base_path=path.resolve().parent)


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
        _inline_conda_file(body, base)
        try:
            parse_job(body)
        except CloudletError as exc:
            raise JobValidationError.from_error(exc) from None
        ws = self._scope.ws_path()
        self.last_uploads = []
        self.last_upload_skipped = None
        code = body.get("code")
        if isinstance(code, str) and not is_remote_path(code):
            local = _local(base, code, "code")
            upload = upload_code(self._rest, ws, local)
            self.last_uploads.append(upload)
            self.last_upload_skipped = upload.skipped
            body["code"] = upload.uri
        for key, item in (body.get("inputs") or {}).items():
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                continue
            if item.get("type", "uri_folder") not in PATH_TYPES or is_remote_path(item["path"]):
                continue
            local = _local(base, item["path"], f"inputs.{key}.path")
            if item.get("type", "uri_folder") == "uri_folder" and not local.is_dir():
                raise JobValidationError.at(f"inputs.{key}.path", f"{local} is not a folder (uri_folder)")
            if item.get("type") == "uri_file" and not local.is_file():
                raise JobValidationError.at(f"inputs.{key}.path", f"{local} is not a file (uri_file)")
            upload = upload_data(self._rest, ws, local)
            self.last_uploads.append(upload)
            body["inputs"][key] = {**item, "type": item.get("type", "uri_folder"), "path": upload.uri}
        return body

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

    def list(
        self, *, compute: str | None = None, status: str | None = None, max_results: int | None = None
    ) -> builtins.list[Job]:
        """Jobs newest first, optionally of one compute and/or status (every page, or the first
        ``max_results`` jobs)."""
        params = {"compute": compute, "status": status}
        path = f"{self._scope.ws_path()}/jobs"
        return [Job(j) for j in self._rest.list_values(path, params=params, limit=max_results)]

    def begin_cancel(self, name: str) -> LROPoller[Job]:
        """``POST …/cancel``; ``.result()`` is the job as returned (``Canceled`` once it stops)."""
        job = Job(self._rest.post(f"{self._path(name)}/cancel"))
        return LROPoller(self._rest, None, None, job)

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


def _local(base: Path, value: str, target: str) -> Path:
    path = Path(value.removeprefix("file:")).expanduser()
    resolved = path if path.is_absolute() else (base / path)
    if not resolved.exists():
        raise JobValidationError.at(target, f"local path '{value}' does not exist (looked at {resolved})")
    return resolved.resolve()


def _inline_conda_file(body: dict[str, Any], base: Path) -> None:
    env = body.get("environment")
    if not isinstance(env, dict) or not isinstance(env.get("conda_file"), str):
        return
    if is_remote_path(env["conda_file"]):
        raise JobValidationError.at(
            "environment.conda_file", "conda_file must be a local file or an inline mapping"
        )
    path = _local(base, env["conda_file"], "environment.conda_file")
    try:
        conda = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise JobValidationError.at("environment.conda_file", f"cannot read {path}: {exc}") from None
    if not isinstance(conda, dict):
        raise JobValidationError.at("environment.conda_file", f"{path} must hold a conda YAML mapping")
    body["environment"] = {**env, "conda_file": conda}


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
