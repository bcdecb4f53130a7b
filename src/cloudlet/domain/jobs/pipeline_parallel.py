"""``type: parallel`` pipeline steps (Azure ML's CLI v2 parallel job shape), pure.

A parallel step runs its ``task``'s ``entry_script`` (``init()`` once per worker process,
``run(mini_batch)`` per mini-batch) over the files of ``input_data``, as a batch deployment's
scoring job does: the step becomes a command job running cloudlet's batch driver
(``nodekit/batch_driver.py``, added to the task's code snapshot at submission by
``services.jobs.pipelines``) with the step's ``mini_batch_size``, ``max_concurrency_per_instance``,
``retry_settings``, ``error_threshold`` and ``mini_batch_error_threshold``. The rows ``run()``
returns go to ``append_row_to`` (a file output: that file; a folder output: its
``parallel_run_step.txt``); ``program_arguments`` are the entry script's command line
(``sys.argv`` in ``init()``).

The same fields make a parallel *component* (``registered_component``): what azure-ai-ml's
``parallel_run_function`` registers (anonymously) before it submits the pipeline whose node runs it;
the node itself carries every field again, so a pipeline step never needs the component resolved.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Any

from cloudlet.domain.assets.components import NAME_PATTERN, NAME_RULE
from cloudlet.domain.endpoints.batch_endpoints import DRIVER_FILE
from cloudlet.domain.errors import CloudletError, document_for, validation_error
from cloudlet.domain.jobs.job_spec import normalise_compute

STEP_FIELDS = frozenset(
    {
        "type",
        "inputs",
        "outputs",
        "compute",
        "display_name",
        "description",
        "tags",
        "input_data",
        "mini_batch_size",
        "mini_batch_error_threshold",
        "error_threshold",
        "retry_settings",
        "logging_level",
        "resources",
        "max_concurrency_per_instance",
        "environment_variables",
        "task",
        "component_id",  # the SDK's record of the parallel component the node was built from
    }
)
TASK_FIELDS = frozenset({"type", "code", "entry_script", "environment", "program_arguments", "append_row_to"})
LOGGING_LEVELS = ("debug", "info", "warning", "error", "critical")
ROW_FILE = "parallel_run_step.txt"  # Azure's file for append_row when the output is a folder
_INPUT_REF = re.compile(r"^\$\{\{\s*inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_OUTPUT_REF = re.compile(r"^\$\{\{\s*outputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_SCRIPT = re.compile(r"^[A-Za-z0-9_./-]+\.py$")
# A parallel component's own fields, beside a parallel step's (its compute is the step's).
_COMPONENT_ONLY = ("name", "version", "$schema", "is_deterministic", "properties")


def parse_step(step: dict[str, Any], where: str) -> dict[str, Any]:
    """A parallel step checked; its stored form (numbers as numbers, defaults filled in)."""
    for key in step:
        if key not in STEP_FIELDS:
            hint = " (partitioned tabular input is not supported)" if key == "partition_keys" else ""
            raise validation_error(
                f"{where}.{key}",
                f"'{key}' cannot be set on a parallel step{hint}; allowed: {', '.join(sorted(STEP_FIELDS))}",
            )
    for field in ("inputs", "outputs", "environment_variables"):
        if step.get(field) is not None and not isinstance(step[field], dict):
            raise validation_error(f"{where}.{field}", f"'{field}' must be a mapping of names")
    inputs = step.get("inputs") or {}
    outputs = step.get("outputs") or {}
    out: dict[str, Any] = {k: v for k, v in step.items() if v is not None or k == "outputs"}
    out["type"] = "parallel"
    data = _reference(step.get("input_data"), _INPUT_REF, f"{where}.input_data", "inputs", inputs)
    given = inputs[data]
    kind = given.get("type") if isinstance(given, dict) else None
    if kind == "mltable":
        raise validation_error(
            f"{where}.inputs.{data}.type",
            "a parallel step's input_data is split into mini-batches of files: give it as uri_folder "
            "(or uri_file); mltable input (mini-batches of rows as DataFrames) is not supported",
        )
    out["mini_batch_size"] = _mini_batch_size(step.get("mini_batch_size", 10), f"{where}.mini_batch_size")
    for field, default in (("error_threshold", -1), ("mini_batch_error_threshold", -1)):
        out[field] = _integer(step.get(field, default), f"{where}.{field}", -1)
    out["max_concurrency_per_instance"] = _integer(
        step.get("max_concurrency_per_instance", 1), f"{where}.max_concurrency_per_instance", 1
    )
    out["retry_settings"] = _retry(step.get("retry_settings"), f"{where}.retry_settings")
    level = str(step.get("logging_level", "info")).lower()
    if level not in LOGGING_LEVELS:
        raise validation_error(
            f"{where}.logging_level", f"logging_level is one of {', '.join(LOGGING_LEVELS)}"
        )
    out["logging_level"] = level
    if step.get("component_id") is not None and not isinstance(step["component_id"], str):
        raise validation_error(
            f"{where}.component_id",
            "a parallel step runs its own task: 'component_id' is only the id of the component it "
            "was built from (a string)",
        )
    resources = step.get("resources")
    if resources is not None and not isinstance(resources, dict):
        raise validation_error(f"{where}.resources", "'resources' must be a mapping (instance_count)")
    out["task"] = _task(step.get("task"), f"{where}.task", outputs)
    if out.get("compute") is not None:
        if not isinstance(out["compute"], str):
            raise validation_error(
                f"{where}.compute", "'compute' must name a compute, e.g. azureml:cpu-cluster"
            )
        try:
            out["compute"] = normalise_compute(out["compute"])
        except ValueError as exc:
            raise validation_error(f"{where}.compute", str(exc)) from None
    return out


def _task(task: Any, where: str, outputs: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(task, dict):
        raise validation_error(
            where, "a parallel step needs 'task': {type: run_function, code, entry_script}"
        )
    for key in task:
        if key not in TASK_FIELDS:
            raise validation_error(
                f"{where}.{key}", f"'{key}' is not a task field; allowed: {', '.join(sorted(TASK_FIELDS))}"
            )
    if str(task.get("type", "run_function")).lower() != "run_function":
        raise validation_error(f"{where}.type", "a parallel step's task is type: run_function")
    code = task.get("code")
    if not isinstance(code, str) or not code.strip():
        raise validation_error(f"{where}.code", "the task needs 'code': the folder holding entry_script")
    script = task.get("entry_script")
    if not isinstance(script, str) or not _SCRIPT.fullmatch(script) or ".." in script.split("/"):
        raise validation_error(
            f"{where}.entry_script",
            "entry_script is a .py file inside the task's code (no '/' first, no '..')",
        )
    arguments = task.get("program_arguments")
    if arguments is not None and not isinstance(arguments, str):
        raise validation_error(
            f"{where}.program_arguments", "program_arguments is one string (a command line)"
        )
    out = {**task, "type": "run_function"}
    if task.get("append_row_to") is not None:
        _reference(task["append_row_to"], _OUTPUT_REF, f"{where}.append_row_to", "outputs", outputs)
    return out


def _reference(value: Any, pattern: re.Pattern[str], target: str, field: str, names: dict[str, Any]) -> str:
    match = pattern.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise validation_error(target, f"give '${{{{{field}.<name>}}}}', one of the step's {field}")
    if match.group(1) not in names:
        raise validation_error(
            target, f"the step has no {field[:-1]} '{match.group(1)}' ({field}: {', '.join(names) or 'none'})"
        )
    return match.group(1)


def _mini_batch_size(value: Any, target: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise validation_error(
            target,
            f"mini_batch_size {value!r}: give a number of files per mini-batch, at least 1 (sizes such as "
            "'10kb' split mltable input, which cloudlet does not support)",
        )
    return int(text)


def _integer(value: Any, target: str, least: int) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"-?\d+", text) or int(text) < least:
        raise validation_error(
            target, f"{target.rsplit('.', 1)[-1]} must be a whole number, at least {least}"
        )
    return int(text)


def _retry(value: Any, target: str) -> dict[str, int]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise validation_error(target, "retry_settings is a mapping: {max_retries, timeout}")
    for key in value:
        if key not in ("max_retries", "timeout"):
            raise validation_error(f"{target}.{key}", "retry_settings has max_retries and timeout")
    return {
        "max_retries": _integer(value.get("max_retries", 3), f"{target}.max_retries", 0),
        "timeout": _integer(value.get("timeout", 60), f"{target}.timeout", 1),
    }


def command(step: dict[str, Any]) -> str:
    """The command that runs a (parsed) parallel step: cloudlet's batch driver."""
    task = step["task"]
    retry = step["retry_settings"]
    args = ["python", DRIVER_FILE, "--input", str(step["input_data"]).strip()]
    args += ["--scoring-script", shlex.quote(task["entry_script"])]
    args += ["--mini-batch-size", str(step["mini_batch_size"])]
    args += ["--max-concurrency", str(step["max_concurrency_per_instance"])]
    args += ["--max-retries", str(retry["max_retries"]), "--timeout", str(retry["timeout"])]
    args += ["--error-threshold", str(step["error_threshold"])]
    args += ["--mini-batch-error-threshold", str(step["mini_batch_error_threshold"])]
    args += ["--logging-level", step["logging_level"], "--output-file-name", ROW_FILE]
    if task.get("append_row_to"):
        args += ["--output-action", "append_row", "--append-row-to", str(task["append_row_to"]).strip()]
    else:
        args += ["--output-action", "summary_only"]
    if task.get("program_arguments"):
        args += ["--", " ".join(str(task["program_arguments"]).split())]
    return " ".join(args)


def command_job(step: dict[str, Any]) -> dict[str, Any]:
    """The command job fields of a parallel step (its inputs and outputs are the caller's)."""
    task = step["task"]
    out: dict[str, Any] = {"command": command(step), "code": task["code"]}
    for key in ("environment_variables", "description", "tags"):
        if step.get(key) is not None:
            out[key] = step[key]
    if task.get("environment") is not None:
        out["environment"] = task["environment"]
    # One node runs the mini-batches, as a batch deployment's scoring job does.
    out["resources"] = {"instance_count": 1}
    return out


def registered_component(
    doc: Any, name: str | None, version: str | None
) -> tuple[str, str | None, dict[str, Any]]:
    """A ``type: parallel`` component to register: its name, version and stored form (checked as
    the parallel step it describes, its inputs and outputs declared)."""
    doc = document_for(doc, name, "component")
    given = doc.get("version")
    if version is not None and given is not None and str(given) != version:
        raise validation_error(
            "version", f"the body says version '{given}' but the request is for '{version}'; make them match"
        )
    wanted = version if version is not None else (str(given) if given is not None else None)
    named = doc.get("name")
    if not isinstance(named, str) or not NAME_PATTERN.fullmatch(named):
        raise validation_error("name", f"a component needs a name to be registered: {NAME_RULE}")
    if doc.get("compute") is not None:
        raise validation_error(
            "compute", "a component does not choose its compute; set it on the pipeline step that runs it"
        )
    body = {k: v for k, v in doc.items() if k not in _COMPONENT_ONLY}
    try:
        stored = parse_step(body, "")
    except CloudletError as exc:
        raise dataclasses.replace(exc, target=(exc.target or "").lstrip(".") or None) from None
    for key in ("is_deterministic", "properties"):
        if doc.get(key) is not None:
            stored[key] = doc[key]
    return named, wanted, stored
