"""Command jobs' models and pure rules (the Azure ML CLI v2 ``commandJob`` YAML shape): the input,
output, resources and distribution models and :class:`CommandJobSpec`, placeholder substitution
(``render_command``), the per-process environment of distributed jobs (``distribution_envs``) and
queue priority (``priority_value``).

``domain/jobs/job_spec.py`` parses a job document into these (``parse_job``, with the rules that build
on them: process limits, environment and asset names) and re-exports them; import them from
there. Pure (no I/O).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cloudlet.domain.bounds import MAX_CLUSTER_NODES, MAX_JOB_TIMEOUT_S, MAX_PROCESSES_PER_NODE
from cloudlet.domain.compute.sizes import DEFAULT_SIZE
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs import queue_settings
from cloudlet.domain.jobs.job_paths import PATH_TYPES
from cloudlet.domain.jobs.notifications import NotificationSetting
from cloudlet.domain.validation import FieldProblem, translate

JOB_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$")
IO_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# ``${{inputs.x}}`` / ``${{outputs.y}}`` (any other ``${{…}}`` is rejected by validation).
PLACEHOLDER = re.compile(r"\$\{\{\s*([^{}]*?)\s*\}\}")
# Azure's optional part of a command: ``$[[--lr ${{inputs.lr}}]]`` is dropped when ``lr`` is absent.
OPTIONAL_PART = re.compile(r"\$\[\[(.*?)\]\]", re.DOTALL)
PRIORITIES = {"low": 1, "medium": 2, "high": 3}
DEFAULT_PRIORITY = "medium"
LITERAL_TYPES = ("string", "integer", "number", "boolean")
DISTRIBUTION_TYPES = ("pytorch", "mpi", "tensorflow")
# The size a job without ``compute`` runs serverless on unless its workspace sets another.
DEFAULT_INSTANCE_TYPE = DEFAULT_SIZE

Literal_ = str | int | float | bool
InputType = Literal[
    "uri_file",
    "uri_folder",
    "mltable",
    "custom_model",
    "mlflow_model",
    "triton_model",
    "string",
    "integer",
    "number",
    "boolean",
]
OutputType = Literal["uri_folder", "uri_file", "mltable", "custom_model", "mlflow_model", "triton_model"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, populate_by_name=True, allow_inf_nan=False)


# ----------------------------------------------------------------------------------------------
# Models.


class InputSpec(_Strict):
    """A declared input: a data path (``uri_file``/``uri_folder``) or a typed literal."""

    type: InputType | None = None
    path: str | None = None
    mode: Literal["ro_mount", "download", "rw_mount", "direct"] | None = None
    default: Literal_ | None = None
    value: Literal_ | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _check(self) -> InputSpec:
        if self.type is None:
            if self.path is not None:
                self.type = "uri_folder"
            elif self.value is not None or self.default is not None:
                self.type = literal_type(self.value if self.value is not None else self.default)
            else:
                raise ValueError(
                    "an input needs 'path' (data) or 'value' (a literal), e.g. "
                    "{type: uri_folder, path: ./data} or {type: number, value: 0.01}"
                )
        if self.type in PATH_TYPES:
            if not self.path:
                raise FieldProblem(
                    "path", f"a {self.type} input needs 'path' (a local path or azureml:// URI)"
                )
            if self.value is not None or self.default is not None:
                raise FieldProblem("value", f"a {self.type} input takes 'path', not 'value'/'default'")
        else:
            if self.path is not None:
                raise FieldProblem("path", f"a {self.type} input takes 'value', not 'path'")
            if self.mode is not None:
                raise FieldProblem("mode", f"'mode' applies to uri_file/uri_folder inputs, not {self.type}")
            if self.value is None and self.default is None:
                raise FieldProblem("value", f"a {self.type} input needs 'value' (or 'default')")
            for key in ("value", "default"):
                literal = getattr(self, key)
                if literal is not None and not _fits(str(self.type), literal):
                    raise FieldProblem(key, f"'{key}' {literal!r} is not a valid {self.type}")
        return self

    @property
    def literal(self) -> Literal_ | None:
        return self.value if self.value is not None else self.default


class OutputSpec(_Strict):
    """A job output; with a ``name`` (and optional ``version``) it is registered as a model (model
    types) or data asset version when the job completes, as in Azure ML."""

    type: OutputType = "uri_folder"
    path: str | None = None
    mode: Literal["rw_mount", "upload"] = "rw_mount"
    description: str | None = None
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
    version: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _named(self) -> OutputSpec:
        if self.version is not None and self.name is None:
            raise FieldProblem("version", "an output's 'version' needs its 'name' (the asset to register)")
        return self


class InlineEnvironment(_Strict):
    name: str | None = None
    version: str | None = None
    description: str | None = None
    image: str | None = None
    conda_file: dict[str, Any] | str | None = None
    pip: list[str] | None = None
    build: dict[str, Any] | None = None  # a Docker build context (domain/assets/environments.py says where)

    @model_validator(mode="after")
    def _something(self) -> InlineEnvironment:
        if not (self.image or self.conda_file or self.pip or self.build):
            raise ValueError(
                "an inline environment needs 'image', 'conda_file', 'build' or 'pip' "
                "(or omit 'environment' to use the node's Python)"
            )
        return self


class ResourcesSpec(_Strict):
    instance_count: int = Field(default=1, ge=1, le=MAX_CLUSTER_NODES)
    instance_type: str | None = None
    shm_size: str | None = None
    properties: dict[str, Any] | None = None

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\d+[bkmgBKMG]?", value):
            raise ValueError(f"shm_size {value!r} must be a size such as '2g', '512m' or '1024k'")
        return value


class PyTorchDistribution(_Strict):
    type: Literal["pytorch"]
    process_count_per_instance: int = Field(default=1, ge=1, le=MAX_PROCESSES_PER_NODE)


class MpiDistribution(_Strict):
    type: Literal["mpi"]
    process_count_per_instance: int = Field(default=1, ge=1, le=MAX_PROCESSES_PER_NODE)


class TensorFlowDistribution(_Strict):
    type: Literal["tensorflow"]
    worker_count: int | None = Field(default=None, ge=1, le=MAX_CLUSTER_NODES)
    parameter_server_count: int = Field(default=0, ge=0, le=MAX_CLUSTER_NODES)


Distribution = PyTorchDistribution | MpiDistribution | TensorFlowDistribution
_DISTRIBUTION_BY_TYPE: dict[str, type[_Strict]] = {
    "pytorch": PyTorchDistribution,
    "mpi": MpiDistribution,
    "tensorflow": TensorFlowDistribution,
}


class LimitsSpec(_Strict):
    timeout: int | None = Field(default=None, ge=1, le=MAX_JOB_TIMEOUT_S)


class QueueSettings(_Strict):
    """Azure ML's ``queue_settings`` as every door sends it, read by the one parser
    (``queue_settings.parse_queue_settings``'s rules): ``priority`` low/medium/high in any case or the
    wire's 1/2/3, ``job_tier`` spot/basic/standard/premium/null in any case (``jobTier`` too). Stored
    in the SDK entity's shape: lower-case names; an unset or ``null`` tier is omitted (Azure's
    default tier)."""

    job_tier: Literal["spot", "basic", "standard", "premium"] | None = None
    priority: Literal["low", "medium", "high"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _wire_names(cls, value: Any) -> Any:
        if isinstance(value, dict) and "jobTier" in value and "job_tier" not in value:
            value = {**value, "job_tier": value["jobTier"]}
            del value["jobTier"]
        return value

    @field_validator("job_tier", mode="before")
    @classmethod
    def _tier(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null")):
            return None
        try:
            return queue_settings.parse_job_tier(value, "job_tier").value
        except queue_settings.QueueSettingsError as exc:
            raise ValueError(str(exc).removeprefix("job_tier: ")) from None

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return queue_settings.PRIORITY_NAMES[queue_settings.parse_priority(value, "priority")]
        except queue_settings.QueueSettingsError as exc:
            raise ValueError(str(exc).removeprefix("priority: ")) from None


class JobIdentity(_Strict):
    type: Literal["managed", "user_identity", "aml_token"]
    client_id: str | None = None
    object_id: str | None = None
    resource_id: str | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class CommandJobSpec(_Strict):
    schema_: str | None = Field(default=None, alias="$schema")
    type: Literal["command"] = "command"
    name: str | None = None
    display_name: str | None = None
    experiment_name: str | None = None
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    # Azure's job properties (set once, read-only after): e.g. azureml.scheduleName on a job a
    # schedule made (services/jobs/schedules.py).
    properties: dict[str, str] | None = None
    command: str = Field(json_schema_extra={"pattern": r"\S"})  # not only white space
    code: str | None = None
    environment: str | InlineEnvironment | None = None
    inputs: dict[str, InputSpec | str | int | float | bool] = Field(default_factory=dict)
    outputs: dict[str, OutputSpec] = Field(default_factory=dict)
    environment_variables: dict[str, str] = Field(default_factory=dict)
    compute: str | None = None
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    distribution: Annotated[Distribution, Field(discriminator="type")] | None = None
    limits: LimitsSpec | None = None
    queue_settings: QueueSettings | None = None
    identity: JobIdentity | None = None
    services: dict[str, Any] | None = None
    notification_setting: NotificationSetting | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not JOB_NAME_PATTERN.fullmatch(value):
            raise ValueError(
                "name must be 1–255 characters, start with a letter or digit, and contain only "
                "letters, digits, '_' and '-'"
            )
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("'command' must not be empty; give the shell command to run")
        return value

    @field_validator("compute")
    @classmethod
    def _compute(cls, value: str | None) -> str | None:
        return None if value is None else normalise_compute(value)

    @model_validator(mode="after")
    def _check(self) -> CommandJobSpec:
        check_command(self.command, list(self.inputs), list(self.outputs))
        return self

    @property
    def priority(self) -> int:
        return priority_value(self)


def literal_type(value: Any) -> InputType:
    """The input type of a literal value (a bool is not an integer here)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _fits(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool) or str(value).lower() in ("true", "false")
    if kind == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        return isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()) is not None
    if kind == "number":
        if isinstance(value, bool):
            return False
        try:
            float(value)
        except (TypeError, ValueError):
            return False
        return True
    return True


def normalise_compute(value: str) -> str:
    """``azureml:cpu-cluster`` / ``cpu-cluster`` / ARM id → ``cpu-cluster``; ``local`` stays."""
    text = value.strip()
    if text.lower().startswith("azureml:"):
        text = text[len("azureml:") :]
    if "/computes/" in text:
        text = text.rsplit("/computes/", 1)[1].split("/", 1)[0]
    if not text:
        raise ValueError("compute must name a compute, e.g. azureml:cpu-cluster (or local)")
    return "local" if text.lower() == "local" else text


# ----------------------------------------------------------------------------------------------
# Command placeholders.


def _placeholders(text: str) -> list[str]:
    return [m.group(1) for m in PLACEHOLDER.finditer(text)]


def _split_ref(ref: str) -> tuple[str, str] | None:
    match = re.fullmatch(r"(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)", ref)
    return (match.group(1), match.group(2)) if match else None


def check_command(command: str, inputs: list[str], outputs: list[str]) -> None:
    """Every placeholder names a declared input/output (inputs inside ``$[[…]]`` may be absent)."""
    optional_refs = {ref for part in OPTIONAL_PART.findall(command) for ref in _placeholders(part)}
    required_text = OPTIONAL_PART.sub(" ", command)
    declared = {"inputs": inputs, "outputs": outputs}
    for ref in [*_placeholders(required_text), *optional_refs]:
        split = _split_ref(ref)
        if split is None:
            raise FieldProblem(
                "command",
                f"'${{{{{ref}}}}}' is not supported in command; use ${{{{inputs.<name>}}}} or "
                "${{outputs.<name>}}",
            )
        kind, name = split
        if name in declared[kind]:
            continue
        if kind == "inputs" and ref in optional_refs and ref not in _placeholders(required_text):
            continue
        names = ", ".join(declared[kind]) or "none"
        raise FieldProblem(
            "command",
            f"command uses '${{{{{ref}}}}}' but '{name}' is not declared under '{kind}' "
            f"(declared {kind}: {names}); declare it or fix the name"
            + ("; wrap optional inputs as $[[ ... ]]" if kind == "inputs" else ""),
        )


def render_command(command: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """Substitute ``${{inputs.x}}``/``${{outputs.y}}``; drop ``$[[…]]`` parts whose input is absent.

    Values are inserted verbatim (as Azure does): quote them in the command if they may hold spaces.
    """

    def optional(match: re.Match[str]) -> str:
        part = match.group(1)
        for ref in _placeholders(part):
            split = _split_ref(ref)
            if split is not None and split[0] == "inputs" and inputs.get(split[1]) is None:
                return ""
        return part

    text = OPTIONAL_PART.sub(optional, command)

    def substitute(match: re.Match[str]) -> str:
        ref = match.group(1)
        split = _split_ref(ref)
        values = {"inputs": inputs, "outputs": outputs}
        if split is None or values[split[0]].get(split[1]) is None:
            raise validation_error("command", f"no value for '${{{{{ref}}}}}' in command")
        return str(values[split[0]][split[1]])

    return PLACEHOLDER.sub(substitute, text)


def literal_string(value: Any) -> str:
    """How a literal input appears in the command line (``True``/``False`` for booleans)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def literal_inputs(spec: CommandJobSpec) -> dict[str, str]:
    """The literal (non-data) inputs as the strings substituted into the command."""
    out: dict[str, str] = {}
    for name, item in spec.inputs.items():
        if isinstance(item, InputSpec):
            if item.type not in PATH_TYPES and item.literal is not None:
                out[name] = literal_string(item.literal)
        else:
            out[name] = literal_string(item)
    return out


def data_inputs(spec: CommandJobSpec) -> dict[str, InputSpec]:
    """The inputs that are paths: data (``uri_file``/``uri_folder``/``mltable``) and models."""
    return {n: i for n, i in spec.inputs.items() if isinstance(i, InputSpec) and i.type in PATH_TYPES}


# ----------------------------------------------------------------------------------------------
# Distribution and priority.


def distribution_env(
    spec: CommandJobSpec, world: list[str], node_rank: int, master_port: int
) -> list[dict[str, str]]:
    """The environment of each process to start on node ``node_rank`` (``distribution_envs``)."""
    if not 0 <= node_rank < len(world):
        raise ValueError(f"node_rank {node_rank} is outside the world of {len(world)} nodes")
    return distribution_envs(spec, world, master_port)[node_rank]


def distribution_envs(spec: CommandJobSpec, world: list[str], master_port: int) -> list[list[dict[str, str]]]:
    """The environment of each process to start, per node, in rank order: ``world`` holds the node
    addresses by rank (``world[0]`` is the master). Without a ``distribution`` one process runs per
    node with an empty extra environment. Linear in the processes (a TensorFlow cluster list is
    serialised once, not once per task: 20,000 tasks once took the server down)."""
    if not world:
        raise ValueError("world must list at least one node address")
    nodes, dist = len(world), spec.distribution
    if dist is None:
        return [[{}] for _ in world]
    if isinstance(dist, PyTorchDistribution | MpiDistribution):
        return [_per_process(dist, world, rank, master_port) for rank in range(nodes)]
    assert isinstance(dist, TensorFlowDistribution)
    workers = dist.worker_count or spec.resources.instance_count
    tasks = [("worker", i) for i in range(workers)] + [("ps", i) for i in range(dist.parameter_server_count)]
    # Round-robin over nodes; the k-th task on a node listens on master_port + k.
    placed = [(kind, index, g % nodes, g // nodes) for g, (kind, index) in enumerate(tasks)]
    cluster: dict[str, list[str]] = {"worker": [], **({"ps": []} if dist.parameter_server_count else {})}
    for kind, _index, node, local in placed:
        cluster[kind].append(f"{world[node]}:{master_port + local}")
    # What json.dumps({"cluster": …, "task": …}) writes, with the shared part written once.
    head = '{"cluster": ' + json.dumps(cluster) + ', "task": {"type": "'
    envs: list[list[dict[str, str]]] = [[] for _ in world]
    for kind, index, node, _local in placed:
        envs[node].append({"TF_CONFIG": f'{head}{kind}", "index": {index}}}}}'})
    return envs


def _per_process(
    dist: PyTorchDistribution | MpiDistribution, world: list[str], node_rank: int, master_port: int
) -> list[dict[str, str]]:
    nodes, per_node = len(world), dist.process_count_per_instance
    if isinstance(dist, PyTorchDistribution):
        return [
            {
                "MASTER_ADDR": world[0],
                "MASTER_PORT": str(master_port),
                "WORLD_SIZE": str(nodes * per_node),
                "RANK": str(node_rank * per_node + local),
                "LOCAL_RANK": str(local),
                "NODE_RANK": str(node_rank),
                "LOCAL_WORLD_SIZE": str(per_node),
            }
            for local in range(per_node)
        ]
    return [
        {
            "OMPI_COMM_WORLD_RANK": str(node_rank * per_node + local),
            "OMPI_COMM_WORLD_SIZE": str(nodes * per_node),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(per_node),
            "OMPI_COMM_WORLD_NODE_RANK": str(node_rank),
            "AZ_BATCH_MASTER_NODE": f"{world[0]}:{master_port}",
            "AZ_BATCHAI_MPI_MASTER_NODE": world[0],
        }
        for local in range(per_node)
    ]


def priority_value(spec: CommandJobSpec) -> int:
    """``queue_settings.priority`` low/medium/high → 1/2/3 (medium when unset)."""
    name = (spec.queue_settings.priority if spec.queue_settings else None) or DEFAULT_PRIORITY
    return PRIORITIES[name]


def job_tier_value(spec: CommandJobSpec) -> str | None:
    """``queue_settings.job_tier`` as ``jobs.job_tier`` stores it: None for Azure's default tier."""
    return spec.queue_settings.job_tier if spec.queue_settings else None


def translate_error(exc: ValidationError, model: type[BaseModel], prefix: str, what: str) -> CloudletError:
    return translate(exc, model, what, prefix, _TAGGED)


_TAGGED = frozenset(("distribution", kind) for kind in DISTRIBUTION_TYPES)
