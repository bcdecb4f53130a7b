"""The job entities of the Python client, shaped like ``azure.ai.ml``'s: ``command()``, ``Input``,
``Output``, the distributions, ``CommandJob``, ``Job`` and ``load_job``. ``client.jobs`` submits them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cloudlet.client._rest import HttpResponseError, ODataV4Error
from cloudlet.client.entities import RestObject, _prune, _to_rest_value
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_names import generate_job_name as generate_job_name  # client.jobs uses it


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
