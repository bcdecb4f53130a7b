"""A pipeline's parallel node in the ARM wire shape azure-ai-ml speaks, to and from cloudlet's
``type: parallel`` step (``domain.jobs.pipeline_parallel``). Pure.

``parallel_run_function(...)`` used in a ``@dsl.pipeline`` arrives as a step ``{"type": "parallel",
"componentId", "input_data", "mini_batch_size", "mini_batch_error_threshold", "error_threshold",
"retry_settings", "logging_level", "max_concurrency_per_instance", "resources", "task": {"type":
"run_function", "code", "entry_script", "program_arguments", "append_row_to", "environment"},
"inputs", "outputs", …}`` (snake_case): the node carries every field of the parallel component the
SDK registered just before (``componentId``, anonymous), its task's code and environment as ARM ids,
so the step is built from the node alone; ``componentId`` is kept as the step's record of it
(``component_id``) and given back on read (the SDK's ``Parallel`` node needs it). The shape is
azure-ai-ml 1.35.2's (``Parallel._to_rest_object``); tests/integration/test_arm_sdk_parallel.py
runs it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from cloudlet.api.arm.wire import arm_jobs
from cloudlet.domain.errors import CloudletError, validation_error

# Node fields that are the step's as they are (the SDK sends them snake_case, as the YAML has them).
_SAME = (
    "display_name",
    "description",
    "tags",
    "environment_variables",
    "input_data",
    "mini_batch_size",
    "mini_batch_error_threshold",
    "error_threshold",
    "retry_settings",
    "logging_level",
    "max_concurrency_per_instance",
    "partition_keys",  # refused by the step's rules, naming it
)
_TASK = ("type", "entry_script", "program_arguments", "append_row_to")


def step_from_arm(step: Mapping[str, Any], where: str, code: Callable[[str], str] | None) -> dict[str, Any]:
    """The ``type: parallel`` step for the SDK's parallel node STEP (its inputs, outputs and compute
    are the caller's). CODE maps a code version's ARM id to its snapshot (None: no store to ask)."""
    out: dict[str, Any] = {"type": "parallel"}
    for field in _SAME:
        if step.get(field) is not None:
            out[field] = step[field]
    resources = step.get("resources")
    if isinstance(resources, Mapping) and resources.get("instance_count") is not None:
        out["resources"] = {"instance_count": resources["instance_count"]}
    task = step.get("task")
    if not isinstance(task, Mapping):
        raise validation_error(
            f"{where}.task", "a parallel node needs 'task' (RunFunction: code, entry_script, environment)"
        )
    out_task: dict[str, Any] = {k: task[k] for k in _TASK if task.get(k) is not None}
    given = task.get("code")
    if isinstance(given, str) and "/codes/" in given and "/versions/" in given and code is not None:
        try:
            out_task["code"] = code(given.removeprefix("azureml:"))
        except CloudletError as exc:  # the store names no node: this one's field
            raise dataclasses.replace(exc, target=f"{where}.task.code") from None
    elif given is not None:
        out_task["code"] = given
    env = task.get("environment")
    if isinstance(env, str) and env:
        out_task["environment"] = arm_jobs._environment(env)
    out["task"] = out_task
    component = step.get("componentId") or step.get("component_id")
    if isinstance(component, str) and "/components/" in component:
        out["component_id"] = component.removeprefix("azureml:")
    return out


def step_to_arm(step: Mapping[str, Any], workspace_id: str) -> dict[str, Any]:
    """A stored parallel step's own fields as the SDK's ``Parallel`` node reads them back (its name,
    inputs, outputs and compute are the caller's)."""
    out: dict[str, Any] = {"type": "parallel"}
    for field in _SAME:
        if step.get(field) is not None:
            out[field] = step[field]
    if isinstance(out.get("logging_level"), str):
        out["logging_level"] = out["logging_level"].upper()  # the SDK's schema: DEBUG, INFO, WARNING
    if isinstance(step.get("resources"), Mapping):
        out["resources"] = dict(step["resources"])
    task = dict(step.get("task") or {})
    env = task.get("environment")
    if isinstance(env, str) and env.startswith("azureml:") and "/" not in env:
        task["environment"] = arm_jobs._arm_environment(env, workspace_id)
    out["task"] = task
    if isinstance(step.get("component_id"), str):
        out["componentId"] = step["component_id"]
    return out


def component_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A stored parallel component's spec as the SDK's ``ParallelComponent`` schema reads it
    (``logging_level`` upper case, ``mini_batch_size`` a string)."""
    out = dict(spec)
    if isinstance(out.get("logging_level"), str):
        out["logging_level"] = out["logging_level"].upper()
    if out.get("mini_batch_size") is not None:
        out["mini_batch_size"] = str(out["mini_batch_size"])
    return out


def has_task_code(body: Any) -> bool:
    """Whether a pipeline body has a parallel node whose task's code is a code version's ARM id
    (which only the store can turn into its snapshot)."""
    props = body.get("properties") if isinstance(body, Mapping) else None
    jobs = props.get("jobs") if isinstance(props, Mapping) else None
    if not isinstance(jobs, Mapping):
        return False
    for step in jobs.values():
        task = step.get("task") if isinstance(step, Mapping) else None
        code = task.get("code") if isinstance(task, Mapping) else None
        if isinstance(code, str) and "/codes/" in code:
            return True
    return False
