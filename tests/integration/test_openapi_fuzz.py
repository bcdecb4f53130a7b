"""Schemathesis against the served OpenAPI document (issues 10 and 24): every operation, with
real resources for its path parameters (so requests get past the 404s), authenticated, under
schemathesis' default checks (server errors, status codes, content types, response schemas and
headers, valid data accepted, invalid data rejected, undeclared methods answered 405 with
``Allow``, auth not ignored): the document says what the server does.

Every path value that names a resource names a real one (``fuzz_resources``: deployments, keys,
role assignments, logged models, code, …; body fields that name a run or a job, ``fuzz_hooks``),
and a DELETE removes one made for it, never what another operation names; a lock the fuzzing
makes is removed at once (it would lock the workspace for what follows). The test then asserts,
from every answer's status, that no operation outside ``UNREACHED`` only ever got 404.

Run as the CLI runs (``st run``: examples, coverage and fuzzing phases), bounded so the module
stays within a few minutes. The fuzzing user is the workspace's Owner, in a subscription whose
core quota is 0 and whose jobs are steered to a cluster that can never grow (``fuzz_hooks``), so
a generated document cannot start machines or run commands (an Owner cannot lift quota). The
administrators' own routes are fuzzed with the admin key, less the two that could give that
capacity back (quota and location writes), which the bad-input tests cover.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudlet.client.artifacts import pack_path
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.integration import fuzz_resources
from tests.integration.fuzz_resources import DEPLOYMENT, DOOMED, DOOMED_ARM, TAG
from tests.jobs_helpers import create_compute, quota_url, served, submit

MAX_EXAMPLES = 3
SEED = 24
CLUSTER = "fuzz-cluster"
JOB = "fuzz-job"
ENVIRONMENT = "fuzz-env"
DATA, MODEL, COMPONENT = "fuzz-data", "fuzz-model", "fuzz_component"
ONLINE, BATCH, TOKEN_ONLINE = "fuzz-online", "fuzz-batch", "fuzz-online-token"
FUZZER, OUTPUT, DOOMED_VERSION, DOOMED_ARM_VERSION = "fuzzer", "out", "2", "3"
RG_LOCK = "fuzz-lock"
VALUES, STATUSES = "values.json", "statuses.txt"  # fuzz_hooks reads the one and writes the other
DATASTORE, FILE = "workspaceblobstore", "fuzz/rows.csv"
ADMIN_ONLY_WRITES = ("/principals", "/sizes", "/locks", "/teams")
PROVIDER = "/providers/Microsoft.MachineLearningServices"
ARM = "/subscriptions/{sub}/resourceGroups/default" + PROVIDER + "/workspaces/default"
ARM_PATH = "/subscriptions/{sub}/resourceGroups/{rg}" + PROVIDER + "/workspaces/{ws}"
MLFLOW = "/mlflow/v1.0" + ARM + "/api/2.0/mlflow"

# positive_data_acceptance (a schema-valid request is answered 2xx) cannot hold where the rule
# relates a value to another field, to the URL or to stored state: JSON Schema cannot say it, and
# the server rightly answers 400 naming the field. Narrow: (method, path) → why.
NAME_IN_URL = "the body's name (or version) must equal the URL's"
NOT_POSITIVE: dict[tuple[str, str], str] = {
    ("GET", r"/jobs$"): "$skipToken must be a continuation token this server issued (nextLink)",
    ("GET", r"/mlflow/experiments/search$"): "filter is MLflow's search grammar, not a pattern",
    ("POST", r"/mlflow/(runs|logged-models)/search$"): "page_token must be one this server issued",
    ("GET", r"/mlflow/(runs/get|metrics/get-history)$"): "run_id or run_uuid: one of two parameters",
    ("POST", r"/mlflow/experiments/(create|delete|update)$"): "names must be free; Default can't change",
    ("PUT", r"/mlflow-artifacts/artifacts/"): "the path's first segment must be a run of the workspace",
    ("PUT", r"^/api/v1/.*/computes/\{name\}$"): NAME_IN_URL,
    ("PUT|POST", r"/(data|environments|models|components)/\{name\}/versions"): NAME_IN_URL,
    ("PUT", r"/onlineEndpoints/\{name\}"): NAME_IN_URL,
    ("PUT", r"/locks/\{lock\}$"): NAME_IN_URL,
    ("PATCH", r"/computes/\{name\}$"): "min nodes ≤ max nodes",
    ("DELETE", r"/computes/\{name\}$"): "Delete or Detach depends on what the compute is",
    ("GET", r"/setup-logs$"): "setup scripts exist for compute instances only",
    ("POST", r"/computes/\{name\}/\{action\}$"): "start, stop and restart apply to instances only",
    ("GET", r"/jobs/\{name\}/(logs|artifacts)$"): "attempt must be one the job has had",
    ("POST", r"^/api/v1/sizes$"): "gpu_architecture needs gpus > 0",
    ("PUT", r"^/api/v1/.*/codes/\{digest\}$"): "the digest must be the SHA-256 of the body",
    ("PUT", r"/datastores/\{datastore\}/paths/"): "the body must be a tar.gz archive",
    ("PUT", r"/codes/\{name\}/versions/"): "codeUri must name a folder of the workspace's storage",
    ("PUT", r"/batchEndpoints/\{endpoint\}/deployments/"): "code, model and compute must exist",
    ("POST", r"/batchEndpoints/\{endpoint\}/invoke$"): "the input must name data that exists",
    ("POST", r"/batchGetResolvedUris$"): "the values must name data assets that exist",
    ("PUT", r"^/subscriptions/.*/jobs/\{name\}$"): "a job type's own fields (trial for a sweep)",
    ("PUT", r"^/api/v1/.*/jobs/\{name\}$"): "worker_count + parameter_server_count ≤ 256: a sum",
    ("PUT", r"^/subscriptions/.*/computes/\{name\}$"): "what a compute needs depends on computeType",
    ("PUT", r"/batchEndpoints/\{endpoint\}$"): NAME_IN_URL,
    ("PUT", r"^/subscriptions/.*/onlineEndpoints/\{endpoint\}$"): "an endpoint's authMode cannot change",
    ("PUT", r"/onlineEndpoints/\{endpoint\}/deployments/"): "model, code and environment must exist",
    ("POST", r"/mlflow/experiments/search$"): "order_by is MLflow's grammar; page_token one issued here",
    ("POST", r"/mlflow/runs/(log-parameter|log-batch)$"): "a run's param, once logged, keeps its value",
    ("POST", r"^/api/v1/principals/\{name\}/keys"): "expires_on in the future; it or expires_in_days",
    ("PUT", r"^/api/v1/teams/\{team\}$"): "members must be users in no other team; a share's pool must exist",
    ("POST", r"^/api/v1/studio/signin-links$"): "next must be a studio page's path: no '..' or '//'",
    ("PUT", r"/schedules/\{name\}$"): "create_job must be a job that validates; a trigger's fields relate",
}


# Operations the workspace owner's run may leave at 404 (never answered 2xx): (method path) → why.
V1 = "/api/v1/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
INSTANCES_ONLY = "a compute instance's: making one starts a machine, which the fuzzing must not"
ADMINS_ONLY = "the administrators' (403 here): test_the_document_holds_on_the_administrators_routes"
UNREACHED: dict[str, str] = {
    "PUT /api/v1/subscriptions/{sub}/resourceGroups/{rg}/locks/{lock}": ADMINS_ONLY,
    "DELETE /api/v1/subscriptions/{sub}/resourceGroups/{rg}/locks/{lock}": ADMINS_ONLY,
    f"GET {V1}/computes/{{name}}/setup-logs": INSTANCES_ONLY,
    f"POST {V1}/computes/{{name}}/{{action}}": INSTANCES_ONLY,
    f"POST {ARM_PATH}/computes/{{name}}/{{action}}": INSTANCES_ONLY,
    f"POST {V1}/computes/{{name}}/evict": "a low-priority node's: the fuzz cluster can never have one",
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "fuzz")


@pytest.fixture(scope="module")
def owner_key(srv: RunningServer) -> str:
    with srv.client() as api:
        for quota in ("totalDedicatedCores", "totalLowPriorityCores"):
            assert api.put(quota_url(srv, quota), json={"limit": 0}).status_code == 200
        for name in (CLUSTER, DOOMED, DOOMED_ARM):
            cluster = {"type": "amlcompute", "size": "Standard_DS3_v2", "max_instances": 1}
            create_compute(api, srv, name, cluster)
        return new_user(api, srv, FUZZER, "Owner")


@pytest.fixture(scope="module")
def resources(srv: RunningServer, owner_key: str) -> dict[str, str]:
    """Real values for the path parameters, queries and body fields that name a resource."""
    with srv.client() as api:
        job = {
            "command": "true",
            "compute": f"azureml:{CLUSTER}",
            "outputs": {OUTPUT: {"type": "uri_folder"}},
        }
        submit(api, srv, JOB, job)
        env = api.put(
            f"{_arm(srv)}/environments/{ENVIRONMENT}/versions/1",
            json={"properties": {"image": "python:3.11-slim"}},
        )
        assert env.status_code in (200, 201), env.text
        found = {"op_id": _assets_and_endpoints(srv, api), "job": JOB, "data": f"azureml:{DATA}:1"}
        found |= fuzz_resources.tracking(srv, api)
        found |= fuzz_resources.code_and_deployments(srv, api, CLUSTER, MODEL, ONLINE, BATCH)
        found |= fuzz_resources.access(srv, api, FUZZER)
        found |= fuzz_resources.teams(api)
        found |= fuzz_resources.schedules(srv, api, CLUSTER)
    return found


def _arm(srv: RunningServer) -> str:
    return ARM.format(sub=srv.subscription_id)


def _assets_and_endpoints(srv: RunningServer, api: Any) -> str:
    """A data asset, a model and a component (versions 1, and 2 for DELETE to remove), an online
    and a batch endpoint (and one of each to delete) and a file in the datastore, so the operations
    that name them get past their 404s; the id of an operation (the fuzz cluster's update)."""
    folder, name = FILE.rsplit("/", 1)
    packed, _ = pack_path(_file(name, b"a,b\n1,2\n"), name)
    put = api.put(f"{srv.ws_path}/datastores/{DATASTORE}/paths/{folder}", content=packed)
    assert put.status_code == 201, put.text
    uri = f"azureml://datastores/{DATASTORE}/paths/{FILE}"
    made: dict[str, dict[str, Any]] = {}
    for version in ("1", DOOMED_VERSION, DOOMED_ARM_VERSION):
        made |= {
            f"data/{DATA}/versions/{version}": {"name": DATA, "type": "uri_file", "path": uri},
            f"models/{MODEL}/versions/{version}": {"name": MODEL, "type": "custom_model", "path": uri},
            f"components/{COMPONENT}/versions/{version}": {"name": COMPONENT, "command": "echo fuzz"},
        }
    made |= {
        f"onlineEndpoints/{ONLINE}": {"name": ONLINE, "auth_mode": "key"},
        f"onlineEndpoints/{TOKEN_ONLINE}": {"name": TOKEN_ONLINE, "auth_mode": "aml_token"},
        f"batchEndpoints/{BATCH}": {"name": BATCH},
        f"batchEndpoints/{DOOMED}": {"name": DOOMED},
    }
    for path, body in made.items():
        answer = api.put(f"{srv.ws_path}/{path}", json=body)
        assert answer.status_code in (200, 201, 202), f"{path}: {answer.text}"
    for version in (DOOMED_VERSION, DOOMED_ARM_VERSION):
        doomed_env = api.put(
            f"{_arm(srv)}/environments/{ENVIRONMENT}/versions/{version}",
            json={"properties": {"image": "python:3.11-slim"}},
        )
        assert doomed_env.status_code in (200, 201), doomed_env.text
    updated = api.patch(f"{srv.ws_path}/computes/{CLUSTER}", json={"description": "fuzzed"})
    assert updated.status_code in (200, 202), updated.text
    return str(updated.headers["Operation-Location"]).rstrip("/").rsplit("/", 1)[1]


def _file(name: str, content: bytes) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="fuzz-")) / name
    path.write_bytes(content)
    return path


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, numbers and booleans: TOML's basic forms are JSON's


def _config(srv: RunningServer, resources: dict[str, str]) -> str:
    """schemathesis.toml: the workspace everywhere; a resource's name where a path names one
    (never on DELETE: the run must not remove what later operations need); the exclusions."""
    lines = [
        "[parameters]",
        f'"path.sub" = {_toml(srv.subscription_id)}',
        '"path.rg" = "default"',
        '"path.ws" = "default"',
    ]

    def operations(regex: str, **settings: Any) -> None:
        lines.extend(["", "[[operations]]", f"include-path-regex = {_toml(regex)}"])
        for key, value in settings.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}")
            else:
                lines.append(f"{key} = {_toml(value)}")

    for regex, params in _doomed(resources).items():
        operations(regex, **{"exclude-method-regex": _all_but("DELETE"), "parameters": params})
    for regex, params in _named(resources).items():
        operations(regex, **{"exclude-method": "DELETE", "parameters": params})
    for (methods, regex), reason in NOT_POSITIVE.items():
        assert reason
        off = {"exclude-method-regex": _all_but(methods), "checks.positive_data_acceptance.enabled": False}
        operations(regex, **off)
    return "\n".join(lines) + "\n"


def _all_but(methods: str) -> str:
    """An exclude-method-regex that keeps only METHODS ("PUT|POST"): in schemathesis.toml an
    include-method-regex beside include-path-regex is a second, alternative filter (either one
    selects an operation), where an exclusion narrows the path's."""
    return f"^(?!({methods})$)"


def _named(found: dict[str, str]) -> dict[str, dict[str, str]]:
    """Path regex → the real values its parameters take (the first regex that matches wins)."""
    online = {"path.name": ONLINE, "path.endpoint": ONLINE, "path.deployment": DEPLOYMENT}
    return {
        r"/resourceGroups/\{rg\}/locks/\{lock\}$": {"path.lock": RG_LOCK},
        r"/computes/\{name\}": {"path.name": CLUSTER},
        r"/(jobs|runs)/\{name\}": {"path.name": JOB, "path.output": OUTPUT},
        r"/environments/\{name\}": {"path.name": ENVIRONMENT, "path.version": "1"},
        r"/data/\{name\}": {"path.name": DATA, "path.version": "1"},
        r"/models/\{name\}": {"path.name": MODEL, "path.version": "1"},
        r"/components/\{name\}": {"path.name": COMPONENT, "path.version": "1"},
        r"/onlineEndpoints/\{(name|endpoint)\}/token$": {
            "path.name": TOKEN_ONLINE,
            "path.endpoint": TOKEN_ONLINE,
        },
        r"/onlineEndpoints/\{(name|endpoint)\}": online,  # a generation: fuzz_hooks
        r"/batchEndpoints/\{endpoint\}": {"path.endpoint": BATCH, "path.deployment": DEPLOYMENT},
        r"/datastores/\{(datastore|name)\}": {
            "path.datastore": DATASTORE,
            "path.name": DATASTORE,
            "path.path": FILE,
        },
        r"/(operations|computeOperationsStatus)/\{op_id\}": {
            "path.op_id": found["op_id"],
            "path.location": "local",
        },
        r"/codes/\{(name|digest)\}": {
            "path.name": found["code"],
            "path.version": "1",
            "path.digest": found["digest"],
        },
        r"^/api/v1/principals/\{name\}/keys": {"path.name": FUZZER, "path.key_id": found["key_id"]},
        r"/roleAssignments/\{principal\}$": {"path.principal": found["principal"]},
        r"^/api/v1/locations/\{name\}$": {"path.name": "local"},
        r"^/api/v1/teams/\{team\}$": {"path.team": found["team"]},
        r"/schedules/\{name\}": {"path.name": found["schedule"]},
        r"/mlflow-artifacts/artifacts/\{path\}$": {"path.path": found["artifact"]},
        r"/mlflow/logged-models/\{model_id\}": {"path.model_id": found["model_id"], "path.tag_key": TAG},
        r"/mlflow/experiments/get$": {"query.experiment_id": found["experiment_id"]},
        r"/mlflow/experiments/get-by-name$": {"query.experiment_name": found["experiment_name"]},
        r"/mlflow/(runs/get|metrics/get-history)$": {"query.run_id": found["run_id"]},
    }


def _doomed(found: dict[str, str]) -> dict[str, dict[str, str]]:
    """What a DELETE removes: never a resource another operation names (``_named``)."""
    deployment = {"path.deployment": DOOMED}
    removed = {
        r"^/api/v1/principals/\{name\}/keys/": {"path.name": FUZZER, "path.key_id": found["doomed_key_id"]},
        r"/locks/\{lock\}$": {"path.lock": DOOMED, "path.name": CLUSTER},  # made just before: fuzz_hooks
        r"/roleAssignments/\{principal\}$": {"path.principal": DOOMED},
        r"^/api/v1/teams/\{team\}$": {"path.team": DOOMED},
        r"^/api/.*/schedules/\{name\}$": {"path.name": DOOMED},
        r"^/subscriptions/.*/schedules/\{name\}$": {"path.name": DOOMED_ARM},
        r"^/api/.*/onlineEndpoints/\{name\}/deployments/": {"path.name": ONLINE, **deployment},
        r"/onlineEndpoints/\{endpoint\}/deployments/": {
            "path.endpoint": ONLINE,
            "path.deployment": DOOMED_ARM,
        },
        r"^/api/.*/batchEndpoints/\{endpoint\}/deployments/": {"path.endpoint": BATCH, **deployment},
        r"/batchEndpoints/\{endpoint\}/deployments/": {"path.endpoint": BATCH, "path.deployment": DOOMED_ARM},
        r"^/api/.*/batchEndpoints/\{endpoint\}$": {"path.endpoint": DOOMED},
        r"^/api/.*/computes/\{name\}$": {"path.name": DOOMED},
        r"/computes/\{name\}$": {"path.name": DOOMED_ARM},
        r"/logged-models/\{model_id\}/tags/": {"path.model_id": found["model_id"], "path.tag_key": TAG},
        r"/logged-models/\{model_id\}$": {"path.model_id": found["doomed_model_id"]},
    }
    for kind, name in (
        ("environments", ENVIRONMENT),
        ("data", DATA),
        ("models", MODEL),
        ("components", COMPONENT),
    ):
        versions = rf"/{kind}/\{{name\}}/versions/\{{version\}}$"
        removed[f"^/api/.*{versions}"] = {"path.name": name, "path.version": DOOMED_VERSION}
        removed[versions] = {"path.name": name, "path.version": DOOMED_ARM_VERSION}
    return removed


def _unreached(statuses: Path) -> set[str]:
    """The operations that answered 404 and never 2xx: their path values name nothing real."""
    seen: dict[str, set[int]] = {}
    for line in statuses.read_text().splitlines():
        method, path, status = line.split()[:3]
        seen.setdefault(f"{method} {path}", set()).add(int(status))
    return {op for op, codes in seen.items() if 404 in codes and not any(200 <= c < 300 for c in codes)}


def _run(srv: RunningServer, resources: dict[str, str], tmp: Path, key: str, *select: str) -> set[str]:
    """``st run`` over the selected operations with the default checks; fails with its report;
    the operations that never got past their 404s."""
    (tmp / "schemathesis.toml").write_text(_config(srv, resources))
    (tmp / VALUES).write_text(json.dumps({**resources, "endpoint": srv.endpoint, "key": key}))
    argv = [
        str(Path(sys.executable).with_name("st")),
        "run",
        srv.endpoint + "/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--phases",
        "examples,coverage,fuzzing",
        # One worker: hypothesis describes strategies with ast.parse, which is not thread-safe on
        # Python 3.11 (a run with two saw "AST constructor recursion depth mismatch").
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--no-shrink",
        "--no-color",
        *select,
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "SCHEMATHESIS_HOOKS": "fuzz_hooks"}
    done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    (tmp / "report.txt").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-5000:]
    return _unreached(tmp / STATUSES)


def test_the_document_holds_for_the_workspace_owner(
    srv: RunningServer, owner_key: str, resources: dict[str, str], tmp_path: Path
) -> None:
    unreached = _run(srv, resources, tmp_path, owner_key, "--exclude-path-regex", "^/agent/")
    assert unreached <= set(UNREACHED), sorted(unreached - set(UNREACHED))
    assert all(UNREACHED.values())


def test_the_document_holds_on_the_administrators_routes(
    srv: RunningServer, resources: dict[str, str], tmp_path: Path
) -> None:
    writes = "|".join(ADMIN_ONLY_WRITES)
    select = ["--include-method-regex", "POST|PUT|DELETE", "--include-path-regex", writes]
    unreached = _run(srv, resources, tmp_path, srv.api_key, *select, "--exclude-path-regex", "/computes/")
    assert not unreached, sorted(unreached)
