"""Schemathesis hooks for tests/integration/test_openapi_fuzz.py (loaded by ``st run`` through
SCHEMATHESIS_HOOKS): a job body always names the cluster that cannot grow (never ``local``, which
makes a node), an events stream is asked as one page (it never ends), upload bodies (tar.gz) go
as the bytes generated (refused as no archive), a body
field that names a run, an experiment, a job or data names a real one and an integer generation is
the deployment's first (``values.json``, written by the test beside ``schemathesis.toml``); a lock
the fuzzing makes is removed at once and the doomed lock made just before its DELETE; every
answer's status is logged for the test to read."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import requests
import schemathesis

CLUSTER, DOOMED = "fuzz-cluster", "fuzz-doomed"
VALUES = "values.json"  # {"run_id", "experiment_id", …, "endpoint", "key"}: test_openapi_fuzz
STATUSES = "statuses.txt"

schemathesis.serializer.alias("application/gzip", "application/octet-stream")


@cache
def _values() -> dict[str, str]:
    try:
        with open(VALUES, encoding="utf-8") as handle:
            loaded: dict[str, str] = json.load(handle)
            return loaded
    except FileNotFoundError:
        return {}


def _real(path: str) -> dict[str, str]:
    """Body field → the real value it should name on PATH (only where the generated value is a
    string: a value of the wrong type is the negative case under test and stays)."""
    values = _values()
    if not values:
        return {}
    if path.endswith(
        "/history/v1.0/subscriptions/{sub}/resourceGroups/{rg}/providers/"
        "Microsoft.MachineLearningServices/workspaces/{ws}/rundata"
    ):
        return {"runId": values["job"]}
    if path.startswith("/api/v1/") and path.endswith("/batchEndpoints/{endpoint}/invoke"):
        return {"input": values["data"], "deployment_name": values["deployment"]}
    if "/api/2.0/mlflow/" not in path:
        return {}
    doomed = path.endswith(("/runs/delete", "/runs/restore"))
    run = values["doomed_run_id" if doomed else "run_id"]
    changed = path.endswith(("/experiments/delete", "/experiments/update", "/experiments/restore"))
    experiment = values["doomed_experiment_id" if changed else "experiment_id"]
    return {"run_id": run, "run_uuid": run, "source_run_id": run, "experiment_id": experiment}


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {_values()['key']}"}


def _lock_to_remove(case: Any) -> None:
    """A DELETE of the doomed lock finds one: made just now (a lock made any earlier would lock
    the workspace, or the cluster, for the operations between)."""
    if case.path_parameters.get("lock") != DOOMED:
        return
    url = _values()["endpoint"] + case.formatted_path
    made = requests.put(url, json={"level": "CanNotDelete"}, headers=_auth(), timeout=30)
    assert made.status_code in (201, 403), made.text  # 403: an administrators' scope


TRUE_WORDS = {"1", "on", "t", "true", "y", "yes"}  # what the server reads as true (pydantic)


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: Any) -> None:
    query = case.query if isinstance(case.query, dict) else {}
    if case.path.endswith("/events") and str(query.get("watch")).lower() in TRUE_WORDS:
        query["watch"] = "false"  # an endless stream (tests/integration/test_events.py covers it)
    if case.method == "PUT" and case.path.endswith("/jobs/{name}") and isinstance(case.body, dict):
        case.body = {k: v for k, v in case.body.items() if k != "resources"}
        case.body["compute"] = f"azureml:{CLUSTER}"
    if case.method == "DELETE" and case.path.endswith("/locks/{lock}") and case.path_parameters:
        _lock_to_remove(case)
    if isinstance(case.path_parameters, dict) and type(case.path_parameters.get("generation")) is int:
        case.path_parameters["generation"] = 1  # the deployment's first (a string stays: invalid)
    if isinstance(case.body, dict):
        for field, value in _real(case.path).items():
            if isinstance(case.body.get(field), str):
                case.body[field] = value


@schemathesis.hook
def after_call(ctx: Any, case: Any, response: Any) -> None:
    """One line per call, ``METHOD path-template status path``: the test finds from it the operations
    that never got past their 404s."""
    if case.method == "PUT" and case.operation.path.endswith("/locks/{lock}") and response.status_code < 300:
        # A lock the fuzzing made would lock the workspace (or the cluster) for the rest of the
        # run, and what a later operation gets would depend on the order: it goes at once.
        assert requests.delete(response.request.url, headers=_auth(), timeout=30).status_code == 204
    with open(STATUSES, "a", encoding="utf-8") as log:
        log.write(f"{case.method} {case.operation.path} {response.status_code} {case.formatted_path}\n")
