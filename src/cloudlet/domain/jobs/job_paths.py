"""Which input types are paths, and which paths are remote: what a client needs of the job
documents' rules to know what to upload, without the models that validate them (importing
``job_models``' pydantic models was ~0.2 s of every ``cloudlet`` command's start;
docs/performance.md, "Start-up"). ``job_models`` and ``job_spec`` re-export these. Pure."""

from __future__ import annotations

import re

CODE_SNAPSHOT_PATTERN = re.compile(r"^codes/[0-9a-f]{64}$")
URI_TYPES = ("uri_file", "uri_folder")
MODEL_TYPES = ("custom_model", "mlflow_model", "triton_model")
# Inputs whose value is a path (mounted read-only like a uri_folder unless rw_mount): data and models.
PATH_TYPES = (*URI_TYPES, "mltable", *MODEL_TYPES)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def is_remote_path(value: str) -> bool:
    """True for URIs (``azureml://…``, ``azureml:name:1``, ``https://…``) and code snapshots."""
    if value.lower().startswith("file:"):  # file:./data is a local path
        return False
    return bool(CODE_SNAPSHOT_PATTERN.fullmatch(value) or _SCHEME.match(value))
