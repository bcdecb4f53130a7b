"""Job documents as people write them: the CLI v2 YAML of a stored job (to read, clone or resubmit)
and a pasted YAML text made into the document the job services take (the studio's submit form).

Parsing is bounded: at most ``MAX_YAML_BYTES``, safe types only and no aliases (an alias bomb
expands when the document is copied or dumped). A problem names the field it concerns, and
``line_of`` finds that field's line in the text, so a form can show it beside the editor.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml

from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_names import generate_job_name
from cloudlet.domain.jobs.job_paths import is_remote_path
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN
from cloudlet.store.schema import Job

MAX_YAML_BYTES = 256 << 10
YAML_FIELD = "yaml"  # the target of an error in the text itself (not one of its fields)
SCHEMAS = {
    JobKind.COMMAND.value: "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json",
    JobKind.PIPELINE.value: "https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json",
    JobKind.SWEEP.value: "https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json",
}
_INDEX = re.compile(r"^(.*)\[(\d+)\]$")


def parse_yaml(text: str) -> dict[str, Any]:
    """The job document in TEXT (a mapping), or a ValidationError at ``yaml`` whose message says
    the line."""
    if len(text.encode("utf-8")) > MAX_YAML_BYTES:
        raise validation_error(YAML_FIELD, f"the YAML is over {MAX_YAML_BYTES // 1024} KiB")
    if not text.strip():
        raise validation_error(YAML_FIELD, "the YAML is empty: paste a job definition or choose a .yml file")
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise validation_error(
                    YAML_FIELD, f"line {_line(event)}: YAML aliases (*name) are not accepted"
                )
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise validation_error(YAML_FIELD, f"{where}not valid YAML ({problem})") from None
    if not isinstance(doc, dict):
        raise validation_error(YAML_FIELD, "the YAML must be a mapping, such as `command: echo hello`")
    return doc


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return int(mark.line) + 1 if mark is not None else 0


def line_of(text: str, field: str | None) -> int | None:
    """The 1-based line of the key FIELD (a dotted path such as ``distribution.worker_count`` or
    ``inputs.data.path``; ``a[0]`` for a list's item) in TEXT; the deepest key found on the way when
    the last is missing; None when nothing matches or the text does not parse."""
    if not field or field in (YAML_FIELD, "$"):
        return None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    found: int | None = None
    for part in field.split("."):
        index = _INDEX.match(part)
        key, item = (index.group(1), int(index.group(2))) if index else (part, None)
        if not isinstance(node, yaml.MappingNode):
            break
        match = next((pair for pair in node.value if pair[0].value == key), None)
        if match is None:
            break
        found, node = match[0].start_mark.line + 1, match[1]
        if item is not None:
            if not isinstance(node, yaml.SequenceNode) or item >= len(node.value):
                break
            node = node.value[item]
            found = node.start_mark.line + 1
    return found


def as_yaml(job: Job, *, with_name: bool = True) -> str:
    """JOB's stored document as the CLI v2 YAML a user would write (``$schema`` first). Without
    WITH_NAME it leaves the name out: a clone gets a new one."""
    doc = copy.deepcopy(job.spec or {})
    doc.pop("$schema", None)
    if not with_name:
        doc.pop("name", None)
    else:
        doc["name"] = job.name
    head: dict[str, Any] = {}
    schema = SCHEMAS.get(job.kind)
    if schema is not None:
        head["$schema"] = schema
    first: dict[str, Any] = {k: doc.pop(k) for k in ("name", "display_name", "type") if k in doc}
    rest = {k: v for k, v in doc.items() if v not in ({}, [], None)}  # what a user would not write
    ordered = {**head, **first, **rest}
    return yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def resubmission(job: Job) -> dict[str, Any]:
    """JOB's document for a new job of the same spec (its name is the new job's)."""
    doc = copy.deepcopy(job.spec or {})
    doc.pop("name", None)
    return doc


def new_name() -> str:
    return generate_job_name()


def named(doc: dict[str, Any], chosen: str | None) -> tuple[dict[str, Any], str]:
    """DOC under its job name: CHOSEN (a form's name field) wins, then the document's own, else a
    generated one. A name that is not a job name is refused at ``name``."""
    name = (chosen or "").strip() or doc.get("name") or new_name()
    if not isinstance(name, str) or not JOB_NAME_PATTERN.fullmatch(name):
        raise validation_error(
            "name", "a job name is letters, digits, '-' and '_', starting with a letter or digit, at most 255"
        )
    return {**doc, "name": name}, name


def with_code(doc: dict[str, Any], snapshot: str | None) -> dict[str, Any]:
    """DOC with a local ``code:`` path replaced by SNAPSHOT (``codes/<sha256>``, an archive the
    form uploaded). A local path without an archive cannot run here: refused at ``code``."""
    holder = doc.get("trial") if str(doc.get("type", "")).lower() == JobKind.SWEEP.value else doc
    field = "trial.code" if holder is not doc else "code"
    if not isinstance(holder, dict):
        return doc
    code = holder.get("code")
    if not isinstance(code, str) or is_remote_path(code):
        return doc
    if not snapshot:
        raise CloudletError(
            "ValidationError",
            f"code '{code}' is a local path: choose its folder as a .zip or .tar.gz archive to upload it",
            field,
        )
    holder = {**holder, "code": snapshot}
    return {**doc, "trial": holder} if field == "trial.code" else holder
