"""A component's local code uploaded as Azure ML does (its ``additional_includes`` copied in):
shared by component registration (``client/components``) and pipeline steps (``client/pipelines``)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

from cloudlet.client._rest import RestClient
from cloudlet.client.artifacts import Upload, upload_code
from cloudlet.client.assets import AssetValidationError, _local
from cloudlet.domain.jobs.job_paths import is_remote_path


def upload_component_code(
    rest: RestClient, ws: str, body: dict[str, Any], base: Path, uploads: builtins.list[Upload]
) -> None:
    """BODY's local ``code`` (relative to BASE) uploaded with its ``additional_includes`` copied in
    (each file or folder at the snapshot's top under its own name, as Azure ML does): BODY's
    ``code`` becomes ``codes/<sha256>`` and its ``additional_includes`` go (they are in it)."""
    includes = body.pop("additional_includes", None) or []
    if not isinstance(includes, builtins.list) or not all(isinstance(i, str) and i for i in includes):
        raise AssetValidationError(
            "additional_includes", "additional_includes must list local files or folders"
        )
    code = body.get("code")
    local = isinstance(code, str) and not is_remote_path(code)
    if code is not None and not local and includes:
        raise AssetValidationError(
            "additional_includes",
            f"additional_includes are copied into a local code folder, not into {code!r}",
        )
    if not local and not includes:
        return
    folder = _local(base, code, "code") if isinstance(code, str) and local else None
    paths = [_local(base, item, f"additional_includes[{n}]") for n, item in enumerate(includes)]
    try:
        upload = upload_code(rest, ws, folder, paths)
    except ValueError as exc:
        raise AssetValidationError("additional_includes", str(exc)) from None
    uploads.append(upload)
    body["code"] = upload.uri
