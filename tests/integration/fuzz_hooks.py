"""Schemathesis hooks for tests/integration/test_openapi_fuzz.py (loaded by ``st run`` through
SCHEMATHESIS_HOOKS): a job body always names the cluster that cannot grow (never ``local``, which
makes a node), and upload bodies (tar.gz) go as the bytes generated (refused as no archive)."""

from __future__ import annotations

from typing import Any

import schemathesis

CLUSTER = "fuzz-cluster"

schemathesis.serializer.alias("application/gzip", "application/octet-stream")


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: Any) -> None:
    if case.method == "PUT" and case.path.endswith("/jobs/{name}") and isinstance(case.body, dict):
        case.body = {k: v for k, v in case.body.items() if k != "resources"}
        case.body["compute"] = f"azureml:{CLUSTER}"
