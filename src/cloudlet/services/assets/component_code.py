"""What a component's ``code`` is stored as: the uploaded snapshot it runs (``codes/<sha256>``).

Both the asset service (registering a component version) and ``services/assets/components.py``
(anonymous components, pipeline steps) check it here, so neither has to import the other for it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.job_spec import CODE_SNAPSHOT_PATTERN, is_remote_path
from cloudlet.services.assets import codes as code_service
from cloudlet.store.schema import CodeAsset, Workspace

# ``azureml:name:version`` of a code asset (``code: azureml:my-code:1``).
_CODE_REF = re.compile(r"^azureml:(?P<name>[^:/@]+):(?P<version>[^:/@]+)$")


def checked_code(session: Session, workspace: Workspace, doc: dict[str, Any]) -> dict[str, Any]:
    """DOC (a component to register) with its ``code`` as the snapshot it runs (``codes/<sha256>``):
    an uploaded snapshot, a code version (its ARM id or ``azureml:name:version``). A local folder
    is refused: the CLI and client upload it first. A parallel component's code is its ``task``'s."""
    task = doc.get("task")
    if str(doc.get("type", "")).lower() == "parallel" and isinstance(task, dict):
        try:
            checked = checked_code(session, workspace, {"code": task.get("code")})
        except CloudletError as exc:
            raise dataclasses.replace(exc, target="task.code") from None
        return {**doc, "task": {**task, "code": checked["code"]}}
    if doc.get("additional_includes"):
        raise validation_error(
            "additional_includes",
            "additional_includes are local files and folders: create the component (or submit the "
            "pipeline) with the cloudlet CLI or client, which copies them into its code snapshot",
        )
    code = doc.get("code")
    if code is None:
        return doc
    if not isinstance(code, str) or not code.strip():
        raise validation_error("code", "code must name the component's code folder")
    text = code.strip()
    if CODE_SNAPSHOT_PATTERN.fullmatch(text):
        digest = text.split("/", 1)[1]
        query = select(CodeAsset.id).where(CodeAsset.workspace_id == workspace.id, CodeAsset.hash == digest)
        if session.scalar(query) is None:
            raise validation_error(
                "code",
                f"code snapshot {text} is not in this workspace; upload it first (PUT …/codes/{digest})",
            )
        return doc
    if "/codes/" in text and "/versions/" in text:
        try:
            return {**doc, "code": code_service.snapshot_for(session, workspace, text)}
        except CloudletError as exc:
            raise validation_error("code", exc.message) from None
    found = _CODE_REF.fullmatch(text)
    if found is not None:
        try:
            row = code_service.get(session, workspace, found["name"], found["version"])
        except CloudletError as exc:
            raise validation_error(
                "code", f"{exc.message.rstrip('.')}: fix the code's name or version"
            ) from None
        return {**doc, "code": f"codes/{row.snapshot}"}
    if is_remote_path(text):
        raise validation_error(
            "code",
            f"code {text!r}: a component's code is an uploaded snapshot (codes/<sha256>) or a code "
            "version (azureml:<name>:<version>); git and URL sources are not fetched here",
        )
    raise validation_error(
        "code",
        f"code {text!r} is a local folder; create the component with the cloudlet CLI or client "
        "(cloudlet component create --file F), which uploads it once (content-hashed)",
    )
