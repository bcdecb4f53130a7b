"""Pipeline jobs from the client: what is local in a ``type: pipeline`` YAML is sent with it.

``prepare_pipeline`` (``JobOperations.prepare`` calls it for ``type: pipeline``) makes the body the
server takes: each step's ``component: ./train.yml`` (or ``file:./train.yml``) is read, relative
to the pipeline's folder, and inlined; a step's or component's local ``code`` is uploaded (a
component's relative to the component file's folder) and becomes ``codes/<sha256>``; local
``conda_file`` files are inlined (a ``parallel`` step's, under its ``task``, too); local
``uri_file``/``uri_folder`` inputs (the pipeline's and each step's) are uploaded to
``LocalUpload/<hash>/<name>``. Registered components (``azureml:train:1``, ``azureml:train@latest``,
``train:1``) are left for the server to resolve.

``stream_pipeline`` (``JobOperations.stream`` of a pipeline) follows its steps' logs.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from cloudlet.client._rest import RestClient
from cloudlet.client.artifacts import Upload, upload_code, upload_data
from cloudlet.client.assets import AssetValidationError
from cloudlet.client.component_code import upload_component_code
from cloudlet.client.job_entities import Job, JobValidationError
from cloudlet.client.job_support import JobFollower, inline_conda_file, job_summary, local_path
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_paths import PATH_TYPES, is_remote_path
from cloudlet.domain.jobs.job_status import FINAL
from cloudlet.domain.jobs.pipeline_bindings import binding_of


def prepare_pipeline(
    rest: RestClient, ws: str, body: dict[str, Any], base: Path, uploads: list[Upload], check: bool = True
) -> dict[str, Any]:
    """BODY with its local files inlined or uploaded (UPLOADS gets each upload), checked locally
    when every component is inline (``domain.jobs.pipeline_jobs``) and CHECK. A pipeline step's
    component file (``type: pipeline``) is prepared the same way, relative to its own folder."""
    # The pipeline rules and the models they build on: here, not at import (every CLI command's start).
    from cloudlet.domain.jobs.pipeline_dag import is_reference
    from cloudlet.domain.jobs.pipeline_jobs import PIPELINE

    body = copy.deepcopy(body)
    jobs = body.get("jobs")
    if not isinstance(jobs, dict):
        raise JobValidationError.at("jobs", "a pipeline needs 'jobs': a mapping of step names to steps")
    for key, step in jobs.items():
        if not isinstance(step, dict):
            continue
        where = f"jobs.{key}"
        component = step.get("component")
        if isinstance(component, str) and not is_reference(component):  # a local file
            path = local_path(base, component, f"{where}.component")
            try:
                loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise JobValidationError.at(f"{where}.component", f"cannot read {path}: {exc}") from None
            if not isinstance(loaded, dict):
                raise JobValidationError.at(f"{where}.component", f"{path} must hold a component mapping")
            loaded.pop("$schema", None)
            if str(step.get("type", "command")).lower() == "pipeline":  # a pipeline component
                step["component"] = prepare_pipeline(rest, ws, loaded, path.parent, uploads, check=False)
            else:
                step["component"] = _local_parts(rest, ws, loaded, path.parent, f"{where}.component", uploads)
        elif isinstance(component, dict) and str(step.get("type", "command")).lower() == "pipeline":
            step["component"] = prepare_pipeline(rest, ws, component, base, uploads, check=False)
        elif isinstance(component, dict):
            step["component"] = _local_parts(rest, ws, component, base, f"{where}.component", uploads)
        inline_conda_file(step, base)
        _upload_code(rest, ws, step, base, where, uploads)
        task = step.get("task")
        if str(step.get("type", "")).lower() == "parallel" and isinstance(task, dict):
            step["task"] = task = dict(task)  # a parallel step's code and environment are its task's
            inline_conda_file(task, base, f"{where}.task.")
            _upload_code(rest, ws, task, base, f"{where}.task", uploads)
        _upload_inputs(rest, ws, step, base, where, uploads)
    _upload_inputs(rest, ws, body, base, "", uploads)
    if check and all(
        not isinstance(s, dict) or not isinstance(s.get("component"), str) for s in jobs.values()
    ):
        try:
            PIPELINE.parse(body, str(body.get("name") or "pipeline"))
        except CloudletError as exc:
            raise JobValidationError.from_error(exc) from None
    return body


def _local_parts(
    rest: RestClient, ws: str, doc: dict[str, Any], base: Path, where: str, uploads: list[Upload]
) -> dict[str, Any]:
    doc = dict(doc)
    inline_conda_file(doc, base)
    try:  # its code with its additional_includes
        upload_component_code(rest, ws, doc, base, uploads)
    except AssetValidationError as exc:
        raise JobValidationError.at(f"{where}.{exc.target}", str(exc).split(": ", 1)[-1]) from None
    return doc


def _upload_code(
    rest: RestClient, ws: str, doc: dict[str, Any], base: Path, where: str, uploads: list[Upload]
) -> None:
    code = doc.get("code")
    if isinstance(code, str) and not is_remote_path(code):
        upload = upload_code(rest, ws, local_path(base, code, f"{where}.code".lstrip(".")))
        uploads.append(upload)
        doc["code"] = upload.uri


def _upload_inputs(
    rest: RestClient, ws: str, doc: dict[str, Any], base: Path, where: str, uploads: list[Upload]
) -> None:
    inputs = doc.get("inputs")
    if not isinstance(inputs, dict):
        return
    for name, item in inputs.items():
        target = f"{where}.inputs.{name}.path".lstrip(".")
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            continue
        path = item["path"]
        if item.get("type", "uri_folder") not in PATH_TYPES or is_remote_path(path):
            continue
        try:
            if binding_of(path, target) is not None:
                continue
        except CloudletError as exc:
            raise JobValidationError.from_error(exc) from None
        local = local_path(base, path, target)
        upload = upload_data(rest, ws, local)
        uploads.append(upload)
        inputs[name] = {**item, "type": item.get("type", "uri_folder"), "path": upload.uri}


def stream_pipeline(ops: JobFollower, name: str, out: TextIO, timeout: float | None) -> Job:
    """Follow a pipeline: each step's log in the order the steps started (``--- step a (job
    p-a) ---``, then its log and summary line; a reused step says which job it reused), until
    the pipeline has ended; then the pipeline's summary line."""
    deadline = None if timeout is None else time.monotonic() + timeout
    followed: set[str] = set()
    while True:
        parent = ops.get(name)._to_dict()
        pending = [c for c in parent.get("children") or [] if c.get("name") not in followed]
        if not pending:
            if parent.get("status") in FINAL:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"pipeline {name} still {parent.get('status')} after {timeout}s")
            time.sleep(ops.stream_poll_interval)
            continue
        step = pending[0]
        followed.add(str(step["name"]))
        out.write(f"--- step {step.get('key')} (job {step['name']}) ---\n")
        if step.get("reused_from"):
            out.write(f"reused the outputs of job {step['reused_from']}\n")
            out.flush()
            continue
        left = None if deadline is None else max(1.0, deadline - time.monotonic())
        ops.stream(str(step["name"]), out, timeout=left)
    job = ops.get(name)
    out.write(job_summary(job._to_dict()) + "\n")
    out.flush()
    return job


def prepare_pipeline_component(
    rest: RestClient, ws: str, body: dict[str, Any], base: Path, uploads: list[Upload]
) -> dict[str, Any]:
    """A pipeline component's steps prepared as a pipeline's are (their component files inlined,
    code and local inputs uploaded), then checked as the pipeline it runs."""
    from cloudlet.domain.jobs.pipeline_jobs import registered_pipeline_component

    try:
        body = prepare_pipeline(rest, ws, body, base, uploads, check=False)
        if all(
            not isinstance(s, dict) or not isinstance(s.get("component"), str) for s in body["jobs"].values()
        ):
            registered_pipeline_component(body, None, None)
    except JobValidationError as exc:
        error = exc.error
        target = getattr(error, "target", None) or "$"
        raise AssetValidationError(target, str(getattr(error, "message", exc))) from None
    except CloudletError as exc:
        raise AssetValidationError(exc.target or "$", exc.message) from None
    return body
