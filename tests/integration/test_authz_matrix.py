"""The authorization matrix (issue 10): every route × every kind of caller, table-driven.

Callers: an administrator, the workspace's Owner, Contributor and Reader, a user with no role, the
Owner of another workspace, a node agent's token, and nobody. Each route is one row saying what it
needs; the expected answer for each caller follows from that. The table must name every operation
of the served OpenAPI document, so a new route without a row fails here. Path-taking routes appear
with traversal attempts too. Writes that would change the world target resources that do not
exist, so a caller allowed through gets the route's own 404 (or 400/409), never 401/403.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import (
    _environ,
    agent_pids,
    create_compute,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

CLUSTER = "mx-cluster"
CALLERS = ("admin", "owner", "contributor", "reader", "norole", "other", "node", "anonymous")


@dataclass(frozen=True)
class Row:
    method: str
    # Under /api/v1 unless it starts with /agent, /instances, /history or /discovery, or is an ARM
    # path; {ws} = the workspace's native path, {arm} its ARM path.
    path: str
    # read | write | manage | admin | user | pool | rg-read | agent | owner-app | others-keys |
    # public (anyone, credentials or not) | signed (anyone, but the URL's own signature decides)
    needs: str
    kwargs: dict[str, Any] | None = None
    operation: str | None = None  # the OpenAPI path it exercises, when the path differs

    def url(self, ctx: Context) -> str:
        path = self.path.format(
            ws=ctx.ws, arm=ctx.arm, sub=ctx.sub, rg=ctx.rg, node=ctx.node_id, op=ctx.op_id, wsid=ctx.ws_id
        )
        return path if rooted(path) else "/api/v1" + path


ROOTED = ("/agent", "/instances", "/history", "/discovery")
ARM_PROVIDER = "/providers/Microsoft.MachineLearningServices"


def rooted(path: str) -> bool:
    """A path served at the root (agents, instances, azure-ai-ml's ARM and run-history routes)."""
    return path.startswith(ROOTED) or ARM_PROVIDER + "/" in path


@dataclass
class Context:
    srv: RunningServer
    keys: dict[str, str | None]
    sub: str
    rg: str = "default"
    node_id: str = ""
    op_id: str = ""
    ws_id: int = 0

    @property
    def ws(self) -> str:
        return f"/subscriptions/{self.sub}/resourceGroups/{self.rg}/workspaces/default"

    @property
    def arm(self) -> str:
        return f"/subscriptions/{self.sub}/resourceGroups/{self.rg}{ARM_PROVIDER}/workspaces/default"


ALLOWED = {
    "read": {"admin", "owner", "contributor", "reader"},
    "write": {"admin", "owner", "contributor"},
    "manage": {"admin", "owner"},
    "admin": {"admin"},
    "user": {"admin", "owner", "contributor", "reader", "norole", "other"},
    "pool": {
        "admin",
        "owner",
        "contributor",
        "reader",
        "other",
    },  # 'other' has a workspace in the subscription
    "rg-read": {"admin", "owner", "contributor", "reader"},
    "agent": {"node"},
    "others-keys": {"admin"},
}
# A user the route may not serve: hidden (404) when they have no role on the workspace, else 403.
HIDDEN_FROM = {"norole", "other"}
TRAVERSAL = ("..%2F..%2F..%2Fcredentials", "%2Fetc%2Fshadow")
SHA = "0" * 64
JOB = {"command": "echo hi", "compute": f"azureml:{CLUSTER}"}
ARM_JOB = {"properties": {"jobType": "Command", "command": "echo hi", "computeId": CLUSTER}}
LOCK = {"json": {"level": "CanNotDelete", "notes": "the authorization matrix"}}
TAR = {"content": b"not a tarball", "headers": {"Content-Type": "application/gzip"}}

ROWS: list[Row] = [
    # identity
    Row("POST", "/auth/token", "user"),
    Row("GET", "/whoami", "user"),
    Row("POST", "/studio/signin-links", "user"),  # a one-time studio sign-in link for the caller
    Row("POST", "/principals", "admin", {"json": {"name": "mx-new-user"}}),
    Row("GET", "/principals", "admin"),
    Row("PATCH", "/principals/nobody-here", "admin", {"json": {"enabled": True}}),
    # Another user's keys: an administrator's business; hidden (404) from everyone else.
    Row("GET", "/principals/nobody-here/keys", "others-keys"),
    Row("POST", "/principals/nobody-here/keys", "others-keys"),
    Row("DELETE", "/principals/nobody-here/keys/no-key", "others-keys"),
    Row("POST", "/principals/nobody-here/keys/no-key/rotate", "others-keys"),
    Row("GET", "{ws}/roleAssignments", "manage"),
    Row("PUT", "{ws}/roleAssignments/nobody-here", "manage", {"json": {"role": "Reader"}}),
    Row("DELETE", "{ws}/roleAssignments/nobody-here", "manage"),
    Row("GET", "{ws}/webhookSecret", "manage"),
    # An allowed caller rotates the matrix workspace's webhook secret: it signs nothing here.
    Row("POST", "{ws}/webhookSecret/rotate", "manage", {"json": {"grace_hours": 0}}),
    Row("GET", "/audit", "admin"),
    Row("GET", "/events", "admin"),
    Row("GET", "/system/reconcilers", "admin"),
    # teams and their shares (issue 31): read by any user, written by administrators
    Row("GET", "/teams", "user"),
    Row("GET", "/teams/no-such-team", "user"),
    Row("PUT", "/teams/mx-team", "admin", {"json": {"members": ["nobody-here"]}}),
    Row("DELETE", "/teams/no-such-team", "admin"),
    # workspaces, sizes, locations, quotas
    Row("GET", "/workspaces", "user"),
    Row("PUT", "{ws}", "admin", {"json": {"description": "the matrix was here"}}),
    Row("GET", "{ws}", "read"),
    Row("GET", "/sizes", "user"),
    Row("POST", "/sizes", "admin", {"json": {"name": "Standard_DS3_v2", "vcpus": 1, "memory_gb": 1}}),
    Row("GET", "/locations", "user"),
    Row("GET", "/providers", "user"),
    Row("GET", "/locations/local", "user"),
    Row("DELETE", "/locations/no-such-location", "admin"),
    Row("PUT", "/locations/local", "admin", {"json": {"capacity": {"vcpus": 4096}}}),
    Row("GET", "/subscriptions/{sub}/locations/local/usages", "pool"),
    Row("GET", "/subscriptions/{sub}/locations/local/quotas", "pool"),
    Row("PUT", "/subscriptions/{sub}/locations/local/quotas/noSuchFamily", "admin", {"json": {"limit": 1}}),
    # locks (resource group, workspace, compute)
    # (each lock a caller may put is deleted by the next row but one)
    Row("PUT", "/subscriptions/{sub}/resourceGroups/{rg}/locks/mx", "admin", LOCK),
    Row("GET", "/subscriptions/{sub}/resourceGroups/{rg}/locks", "rg-read"),
    Row("DELETE", "/subscriptions/{sub}/resourceGroups/{rg}/locks/mx", "admin"),
    Row("PUT", "{ws}/locks/mx", "manage", LOCK),
    Row("GET", "{ws}/locks", "read"),
    Row("DELETE", "{ws}/locks/mx", "manage"),
    Row("PUT", "{ws}/computes/" + CLUSTER + "/locks/mx", "manage", LOCK),
    Row("GET", "{ws}/computes/" + CLUSTER + "/locks", "read"),
    Row("DELETE", "{ws}/computes/" + CLUSTER + "/locks/mx", "manage"),
    # computes and operations
    Row("GET", "{ws}/computes", "read"),
    Row("GET", "{ws}/computes/" + CLUSTER, "read"),
    Row("PUT", "{ws}/computes/mx-new", "write", {"json": {"type": "amlcompute", "size": "No_Such_Size"}}),
    Row("PATCH", "{ws}/computes/ghost", "write", {"json": {"max_instances": 2}}),
    Row("DELETE", "{ws}/computes/ghost", "write"),
    Row("POST", "{ws}/computes/ghost/start", "write"),
    Row("GET", "{ws}/computes/" + CLUSTER + "/nodes", "read"),
    Row("GET", "{ws}/computes/" + CLUSTER + "/fairShare", "read"),  # issue 31: the pool view
    Row("POST", "{ws}/computes/" + CLUSTER + "/evict", "manage", {"json": {"node_id": "n-ghost"}}),
    Row("GET", "{ws}/computes/ghost/setup-logs", "read"),
    Row("GET", "/operations/{op}", "read"),
    Row("GET", "{ws}/operations", "read"),
    # jobs
    Row("PUT", "{ws}/jobs/mx-job-new", "write", {"json": {**JOB, "compute": "azureml:no-such-cluster"}}),
    Row("GET", "{ws}/jobs/mx-job", "read"),
    Row("GET", "{ws}/jobs", "read"),
    Row("GET", "{ws}/events", "read"),
    Row("POST", "{ws}/jobs/mx-job/cancel", "write"),
    Row("GET", "{ws}/jobs/mx-job/logs", "read"),
    Row("GET", "{ws}/jobs/mx-job/monitoring", "read"),
    Row("GET", "{ws}/jobs/mx-job/deliveries", "read"),
    Row("GET", "{ws}/usage/idle", "read"),
    # job schedules (az ml schedule): read by Readers, written by Contributors; the writes name a
    # schedule that does not exist or send no trigger, so an allowed caller gets a 404 or a 400
    Row("GET", "{ws}/schedules", "read"),
    Row("GET", "{ws}/schedules/mx-no-schedule", "read"),
    Row("PUT", "{ws}/schedules/mx-no-schedule", "write", {"json": {}}),
    Row("DELETE", "{ws}/schedules/mx-no-schedule", "write"),
    Row("POST", "{ws}/schedules/mx-no-schedule/enable", "write"),
    Row("POST", "{ws}/schedules/mx-no-schedule/disable", "write"),
    Row("GET", "{arm}/schedules", "read"),
    Row("GET", "{arm}/schedules/mx-no-schedule", "read"),
    Row("PUT", "{arm}/schedules/mx-no-schedule", "write", {"json": {"properties": {}}}),
    Row("DELETE", "{arm}/schedules/mx-no-schedule", "write"),
    # azure-ai-ml's ARM facade and run history
    Row("PUT", "{arm}/jobs/mx-arm-job", "write", {"json": ARM_JOB}),
    Row("GET", "{arm}/jobs/mx-job", "read"),
    Row("GET", "{arm}/jobs", "read"),
    Row("POST", "{arm}/jobs/mx-job/cancel", "write"),
    Row("GET", "{arm}/jobs/mx-job/cancelStatus", "read"),
    Row("GET", "{arm}/codes/mx-code/versions?hash=" + SHA + "&hashVersion=202208", "read"),
    Row("GET", "{arm}/codes/mx-code", "read"),
    Row("GET", "{arm}/codes/mx-code/versions/1", "read"),
    Row(
        "PUT",
        "{arm}/codes/mx-code/versions/1",
        "write",
        {"json": {"properties": {"codeUri": "azureml://datastores/workspaceblobstore/paths/mx-none"}}},
    ),
    Row("POST", "{arm}/codes/mx-code/versions/1/startPendingUpload", "write", {"json": {}}),
    Row("GET", "{arm}/datastores", "read"),
    Row("GET", "{arm}/datastores/workspaceblobstore", "read"),
    Row("POST", "{arm}/datastores/workspaceblobstore/listSecrets", "read"),
    Row("GET", "/history/v1.0{arm}/runs/mx-job/details", "read"),
    Row("POST", "/history/v1.0{arm}/rundata", "read", {"json": {"runId": "mx-job"}}),
    Row("GET", "/history/v1.0{arm}/runs/mx-job/children", "read"),
    Row(
        "POST",
        "/data/v1.0{arm}/dataversion/batchGetResolvedUris",
        "read",
        {
            "json": {
                "values": ["azureml://locations/l/workspaces/w/data/azureml_mx-job_output_data_o/versions/1"]
            }
        },
    ),
    Row("GET", "/history/logs/not-a-signed-reference", "signed"),
    Row("GET", "/discovery/workspaces/any", "public"),
    *(Row("GET", "{ws}/jobs/mx-job/logs?file=" + t, "read") for t in TRAVERSAL),
    Row("GET", "{ws}/jobs/mx-job/outputs/none", "read"),
    Row("GET", "{ws}/jobs/mx-job/artifacts", "read"),
    # data
    Row("GET", "{ws}/codes/" + SHA, "read"),
    Row("HEAD", "{ws}/codes/" + SHA, "read"),
    Row("PUT", "{ws}/codes/" + SHA, "write", TAR),
    Row("GET", "{ws}/datastores/workspaceblobstore/paths/none", "read"),
    Row("HEAD", "{ws}/datastores/workspaceblobstore/paths/none", "read"),
    *(Row("GET", "{ws}/datastores/workspaceblobstore/paths/" + t, "read") for t in TRAVERSAL),
    Row("PUT", "{ws}/datastores/workspaceblobstore/paths/mx/upload", "write", TAR),
    Row("GET", "{ws}/datastores/workspaceblobstore/download/none", "read"),
    *(Row("GET", "{ws}/datastores/workspaceblobstore/download/" + t, "read") for t in TRAVERSAL),
    # the Azure ML (ARM) facade: the same rules through the SDK's paths (JWTs: test_arm_sdk.py)
    Row("GET", "{arm}", "read"),
    Row("GET", "/subscriptions/{sub}/resourceGroups/{rg}" + ARM_PROVIDER + "/workspaces", "user"),
    Row("GET", "/subscriptions/{sub}" + ARM_PROVIDER + "/workspaces", "user"),
    Row("GET", "{arm}/computes", "read"),
    Row("GET", "{arm}/computes/" + CLUSTER, "read"),
    Row(
        "PUT",
        "{arm}/computes/mx-new",
        "write",
        {"json": {"properties": {"computeType": "AmlCompute", "properties": {"vmSize": "No_Such_Size"}}}},
    ),
    Row(
        "PATCH",
        "{arm}/computes/ghost",
        "write",
        {"json": {"properties": {"scaleSettings": {"maxNodeCount": 2}}}},
    ),
    Row("DELETE", "{arm}/computes/ghost", "write"),
    Row("POST", "{arm}/computes/ghost/start", "write"),
    Row("POST", "{arm}/computes/" + CLUSTER + "/listNodes", "read"),
    Row("GET", "/subscriptions/{sub}" + ARM_PROVIDER + "/locations/local/vmSizes", "user"),
    Row("GET", "/subscriptions/{sub}" + ARM_PROVIDER + "/locations/local/usages", "pool"),
    Row(
        "GET", "/subscriptions/{sub}" + ARM_PROVIDER + "/locations/local/computeOperationsStatus/{op}", "read"
    ),
    # data, model and environment assets (a caller let through gets 404 or 400: nothing exists)
    *(
        row
        for collection in ("data", "models", "environments", "components")
        for row in (
            Row("GET", "{ws}/" + collection, "read"),
            Row("GET", "{ws}/" + collection + "/ghost", "read"),
            Row("GET", "{ws}/" + collection + "/ghost/versions", "read"),
            Row("GET", "{ws}/" + collection + "/ghost/versions/1", "read"),
            Row("POST", "{ws}/" + collection + "/ghost/versions", "write", {"json": {}}),
            Row("PUT", "{ws}/" + collection + "/ghost/versions/1", "write", {"json": {}}),
            Row("DELETE", "{ws}/" + collection + "/ghost/versions/1", "write"),
            Row("POST", "{ws}/" + collection + "/ghost/archive", "write"),
            Row("POST", "{ws}/" + collection + "/ghost/versions/1/restore", "write"),
        )
    ),
    # the same assets through the ARM facade (azure-ai-ml's environments, data, models)
    *(
        row
        for collection in ("data", "models", "environments", "components")
        for row in (
            Row("GET", "{arm}/" + collection, "read"),
            Row("GET", "{arm}/" + collection + "/ghost", "read"),
            Row("PUT", "{arm}/" + collection + "/ghost", "write", {"json": {}}),
            Row("GET", "{arm}/" + collection + "/ghost/versions?$orderBy=createdtime%20desc&$top=1", "read"),
            Row("GET", "{arm}/" + collection + "/ghost/versions/1", "read"),
            Row("PUT", "{arm}/" + collection + "/ghost/versions/1", "write", {"json": {}}),
            Row("DELETE", "{arm}/" + collection + "/ghost/versions/1", "write"),
        )
    ),
    # the agents' protocol
    Row("POST", "/agent/v1/nodes/{node}/register", "agent", {"json": {}}),
    Row("POST", "/agent/v1/nodes/{node}/poll?timeout=0", "agent", {"json": {}}),
    Row("POST", "/agent/v1/nodes/{node}/apps", "agent", {"json": {"apps": {}}}),
    Row("POST", "/agent/v1/nodes/{node}/replicas", "agent", {"json": {"replicas": {}}}),
    Row("GET", "/agent/v1/nodes/{node}/replicas/r-000000000000/code", "agent"),
    Row("POST", "/agent/v1/runs/r-ghost/logs", "agent", {"json": {"offset": 0, "data": "x"}}),
    Row("POST", "/agent/v1/runs/r-ghost/running", "agent", {"json": {}}),
    Row("POST", "/agent/v1/runs/r-ghost/exit", "agent", {"json": {}}),
    Row("GET", "/agent/v1/codes/{wsid}/" + SHA, "agent"),
    Row("GET", "/agent/v1/runs/r-ghost/data?path=0", "agent"),
    Row("GET", "/agent/v1/runs/r-ghost/data?path=0%2F..%2F..%2Fcredentials", "agent"),
    Row("PUT", "/agent/v1/runs/r-ghost/data?path=1", "agent", TAR),
    # the instance proxy (not in the OpenAPI document: an app's own API lives behind it)
    Row("GET", "/instances/ghost/jupyterlab/api/status", "owner-app"),
]
# MLflow's tracking API (api/mlflow/; a job's own token: test_mlflow_tracking.py). Writes name a
# run or experiment that does not exist, so an allowed caller gets the route's own 404 (or 400).
MLFLOW = "/mlflow/v1.0{arm}/api/2.0/mlflow"
MLFLOW_ARTIFACTS = "/mlflow/v1.0{arm}/api/2.0/mlflow-artifacts/artifacts"
GHOST_RUN = {"run_id": "ghost-run"}
ROWS += [
    Row("POST", MLFLOW + "/experiments/create", "write", {"json": {"name": "mx-experiment"}}),
    Row("GET", MLFLOW + "/experiments/get?experiment_id=0", "read"),
    Row("GET", MLFLOW + "/experiments/get-by-name?experiment_name=Default", "read"),
    Row("POST", MLFLOW + "/experiments/search", "read", {"json": {}}),
    Row("GET", MLFLOW + "/experiments/search", "read"),
    Row(
        "POST", MLFLOW + "/experiments/update", "write", {"json": {"experiment_id": "99999", "new_name": "x"}}
    ),
    Row("POST", MLFLOW + "/experiments/delete", "write", {"json": {"experiment_id": "99999"}}),
    Row("POST", MLFLOW + "/experiments/restore", "write", {"json": {"experiment_id": "99999"}}),
    Row(
        "POST",
        MLFLOW + "/experiments/set-experiment-tag",
        "write",
        {"json": {"experiment_id": "99999", "key": "k", "value": "v"}},
    ),
    Row("POST", MLFLOW + "/runs/create", "write", {"json": {"experiment_id": "99999"}}),
    Row("GET", MLFLOW + "/runs/get?run_id=mx-job", "read"),
    Row("POST", MLFLOW + "/runs/update", "write", {"json": {**GHOST_RUN, "status": "FINISHED"}}),
    Row("POST", MLFLOW + "/runs/delete", "write", {"json": GHOST_RUN}),
    Row("POST", MLFLOW + "/runs/restore", "write", {"json": GHOST_RUN}),
    Row("POST", MLFLOW + "/runs/search", "read", {"json": {"experiment_ids": ["0"]}}),
    Row(
        "POST",
        MLFLOW + "/runs/log-metric",
        "write",
        {"json": {**GHOST_RUN, "key": "k", "value": 1, "timestamp": 1}},
    ),
    Row("POST", MLFLOW + "/runs/log-parameter", "write", {"json": {**GHOST_RUN, "key": "k", "value": "v"}}),
    Row("POST", MLFLOW + "/runs/set-tag", "write", {"json": {**GHOST_RUN, "key": "k", "value": "v"}}),
    Row("POST", MLFLOW + "/runs/delete-tag", "write", {"json": {**GHOST_RUN, "key": "k"}}),
    Row("POST", MLFLOW + "/runs/log-batch", "write", {"json": GHOST_RUN}),
    Row("POST", MLFLOW + "/runs/log-inputs", "write", {"json": GHOST_RUN}),
    Row("GET", MLFLOW + "/metrics/get-history?run_id=mx-job&metric_key=loss", "read"),
    Row("POST", MLFLOW + "/logged-models/search", "read", {"json": {}}),
    Row("POST", MLFLOW + "/logged-models", "write", {"json": {"source_run_id": "ghost-run"}}),
    Row("GET", MLFLOW + "/logged-models/m-ghost", "read"),
    Row("PATCH", MLFLOW + "/logged-models/m-ghost", "write", {"json": {"status": "LOGGED_MODEL_READY"}}),
    Row("DELETE", MLFLOW + "/logged-models/m-ghost", "write"),
    Row("PATCH", MLFLOW + "/logged-models/m-ghost/tags", "write", {"json": {"tags": []}}),
    Row("DELETE", MLFLOW + "/logged-models/m-ghost/tags/k", "write"),
    Row("POST", MLFLOW + "/logged-models/m-ghost/params", "write", {"json": {"params": []}}),
    Row("POST", MLFLOW + "/runs/outputs", "write", {"json": {**GHOST_RUN, "models": []}}),
    Row("GET", MLFLOW_ARTIFACTS + "?path=mx-job", "read"),
    Row("GET", MLFLOW_ARTIFACTS + "/mx-job/none.txt", "read"),
    *(Row("GET", MLFLOW_ARTIFACTS + "/mx-job/" + t, "read") for t in TRAVERSAL),
    Row("PUT", MLFLOW_ARTIFACTS + "/ghost-run/x.txt", "write", {"content": b"x"}),
    *(Row("PUT", MLFLOW_ARTIFACTS + "/ghost-run/" + t, "write", {"content": b"x"}) for t in TRAVERSAL),
]

# online endpoints and deployments (issue 14); their scoring path is the gateway's (endpoint keys,
# not user credentials: tests/integration/test_online_endpoints.py)
OE = "{ws}/onlineEndpoints"
ROWS += [
    Row("GET", OE, "read"),
    Row("PUT", OE + "/mx-ep", "write", {"json": {"auth_mode": "aad_token"}}),
    Row("GET", OE + "/mx-ep", "read"),
    Row("DELETE", OE + "/mx-ep", "write"),
    Row("POST", OE + "/mx-ep/listKeys", "write"),
    Row("POST", OE + "/mx-ep/token", "write"),
    Row("POST", OE + "/mx-ep/regenerateKeys", "write", {"json": {"keyType": "Primary"}}),
    Row("GET", OE + "/mx-ep/deployments", "read"),
    Row("PUT", OE + "/mx-ep/deployments/mx-d", "write", {"json": {"instance_type": "Standard_DS3_v2"}}),
    Row("GET", OE + "/mx-ep/deployments/mx-d", "read"),
    Row("DELETE", OE + "/mx-ep/deployments/mx-d", "write"),
    Row("POST", OE + "/mx-ep/deployments/mx-d/getLogs", "read", {"json": {"tail": 10}}),
]
# batch endpoints (issue 14 item 4): writes name an endpoint that does not exist, or are invalid
BATCH = "{ws}/batchEndpoints"
ROWS += [
    Row("GET", BATCH, "read"),
    Row("GET", BATCH + "/ghost", "read"),
    Row("PUT", BATCH + "/ghost", "write", {"json": {"auth_mode": "key"}}),
    Row("DELETE", BATCH + "/ghost", "write"),
    Row("GET", BATCH + "/ghost/deployments", "read"),
    Row("GET", BATCH + "/ghost/deployments/blue", "read"),
    Row("PUT", BATCH + "/ghost/deployments/blue", "write", {"json": {}}),
    Row("DELETE", BATCH + "/ghost/deployments/blue", "write"),
    Row("POST", BATCH + "/ghost/invoke", "write", {"json": {"input": "azureml:rows:1"}}),
    Row("GET", BATCH + "/ghost/jobs", "read"),
    # and through the ARM facade (azure-ai-ml's batch_endpoints, batch_deployments, invoke)
    Row("GET", "{arm}/batchEndpoints", "read"),
    Row("GET", "{arm}/batchEndpoints/ghost", "read"),
    Row(
        "PUT",
        "{arm}/batchEndpoints/ghost",
        "write",
        {"json": {"properties": {"defaults": {"deploymentName": "x"}}}},
    ),
    Row("DELETE", "{arm}/batchEndpoints/ghost", "write"),
    Row("GET", "{arm}/batchEndpoints/ghost/deployments", "read"),
    Row("GET", "{arm}/batchEndpoints/ghost/deployments/blue", "read"),
    Row("PUT", "{arm}/batchEndpoints/ghost/deployments/blue", "write", {"json": {"properties": {}}}),
    Row("DELETE", "{arm}/batchEndpoints/ghost/deployments/blue", "write"),
    Row("POST", "{arm}/batchEndpoints/ghost/invoke", "write", {"json": {"properties": {}}}),
    Row("GET", "/mferp/managementfrontend{arm}/batchEndpoints/ghost/jobs", "read"),
]

# their ARM facade (api/arm/online_endpoints.py): bodies that fail validation or name no endpoint
AOE = "{arm}/onlineEndpoints"
ROWS += [
    Row("GET", AOE, "read"),
    Row("PUT", AOE + "/mx-ep", "write", {"json": {"properties": {"authMode": "AADToken"}}}),
    Row("GET", AOE + "/mx-ep", "read"),
    Row("PATCH", AOE + "/mx-ep", "write", {"json": {"tags": {"a": "b"}}}),
    Row("DELETE", AOE + "/mx-ep", "write"),
    Row("POST", AOE + "/mx-ep/listKeys", "write"),
    Row("POST", AOE + "/mx-ep/token", "write"),
    Row("POST", AOE + "/mx-ep/regenerateKeys", "write", {"json": {"keyType": "Primary"}}),
    Row("GET", AOE + "/mx-ep/deployments", "read"),
    Row("PUT", AOE + "/mx-ep/deployments/mx-d", "write", {"json": {"properties": {}}}),
    Row("GET", AOE + "/mx-ep/deployments/mx-d", "read"),
    Row("DELETE", AOE + "/mx-ep/deployments/mx-d", "write"),
    Row("POST", AOE + "/mx-ep/deployments/mx-d/getLogs", "read", {"json": {"tail": 10}}),
    Row("GET", AOE + "/mx-ep/deployments/mx-d/operations/1", "read"),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "authz")


@pytest.fixture(scope="module")
def ctx(srv: RunningServer) -> Iterator[Context]:
    with srv.client() as api:
        response = api.put(
            f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/research/workspaces/team-b", json={}
        )
        assert response.status_code in (200, 201), response.text
        keys: dict[str, str | None] = {"admin": srv.api_key, "anonymous": None}
        for caller, role in (("owner", "Owner"), ("contributor", "Contributor"), ("reader", "Reader")):
            keys[caller] = new_user(api, srv, f"mx-{caller}", role)
        keys["norole"] = new_user(api, srv, "mx-norole", None)
        keys["other"] = new_user(api, srv, "mx-other", None)
        team_b = f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/research/workspaces/team-b"
        assert api.put(f"{team_b}/roleAssignments/mx-other", json={"role": "Owner"}).status_code == 200
        create_compute(
            api,
            srv,
            CLUSTER,
            {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 1, "max_instances": 1},
        )
        submit(api, srv, "mx-job", JOB)
        wait_job(api, srv, "mx-job", ("Completed",))
        node = wait_until(
            lambda: [n for n in nodes(api, srv, CLUSTER) if n["state"] == "idle"], 60, "a node"
        )[0]
        installation = httpx.get(srv.endpoint + "/healthz").json()["installation"]
        pid = wait_until(lambda: agent_pids(installation, node["nodeId"]), 30, "its agent")[0]
        keys["node"] = _environ(pid)["CLOUDLET_NODE_TOKEN"]
        op_id = api.get(f"{srv.ws_path}/operations").json()["value"][0]["id"]
        yield Context(
            srv, keys, srv.subscription_id, node_id=node["nodeId"], op_id=op_id, ws_id=_workspace_id(srv)
        )


def _workspace_id(srv: RunningServer) -> int:
    import sqlite3

    with sqlite3.connect(srv.home / "cloudlet.db") as db:
        row = db.execute("SELECT id FROM workspaces WHERE name = 'default'").fetchone()
    return int(row[0])


def _hidden(response: httpx.Response, ctx: Context) -> bool:
    """A 404 that hides the workspace (or its operation or subscription) from this caller."""
    if response.status_code != 404 or not response.content:
        return False
    target = (response.json().get("error") or {}).get("target")
    return (
        target in ("default", ctx.op_id, ctx.sub, "ghost")
        and "was not found" in response.text
        and (target != "ghost" or "Workspace" in response.text)
    )


def expected(row: Row, caller: str) -> str:
    """allow | 401 | 403 | hidden."""
    if row.needs == "public":
        return "allow"
    if row.needs == "signed":
        return "403"  # the matrix's URLs carry no valid signature, whoever asks
    if caller == "anonymous":
        return "401"
    if row.needs == "agent":
        return "allow" if caller == "node" else "401"
    if caller == "node":
        return "401"  # a node's token is no user credential
    if row.needs == "owner-app":
        return "app-404"
    if caller in ALLOWED[row.needs]:
        return "allow"
    if row.needs in ("read", "write", "manage", "pool", "rg-read") and caller in HIDDEN_FROM:
        return "hidden"
    if row.needs == "others-keys":
        return "hidden"  # another user's keys are not disclosed (docs/access.md)
    return "403"


def _check(row: Row, caller: str, response: httpx.Response, ctx: Context) -> str | None:
    want, got = expected(row, caller), response.status_code
    what = f"{row.method} {row.path} as {caller}: want {want}, got {got} {response.text[:200]}"
    if got >= 500:
        return what
    if want == "401":
        return None if got == 401 else what
    if want == "403":
        return None if got == 403 else what
    if want == "hidden":
        return None if got == 404 else what
    if want == "app-404":
        return None if got == 404 else what
    # allowed through: whatever the route itself answers, but never an authorization refusal
    if got in (401, 403) or _hidden(response, ctx):
        return what
    return None


def test_every_route_is_in_the_matrix(srv: RunningServer) -> None:
    doc = httpx.get(srv.endpoint + "/openapi.json").json()
    operations = {
        (method, template)
        for template, item in doc["paths"].items()
        for method in item
        if template.startswith(("/api/", "/agent/", "/history", "/discovery")) or ARM_PROVIDER in template
    }
    patterns = {
        (method, template): re.compile(
            "^" + re.sub(r"\{[^}]+\}", "[^/]+", template.replace("{path}", "(.+)")) + "$"
        )
        for method, template in operations
    }
    covered = set()
    for row in ROWS:
        path = row.path.split("?", 1)[0].format(
            ws="/subscriptions/s/resourceGroups/r/workspaces/w",
            arm=f"/subscriptions/s/resourceGroups/r{ARM_PROVIDER}/workspaces/w",
            sub="s",
            rg="r",
            node="n",
            op="o",
            wsid=1,
        )
        path = path if rooted(path) else "/api/v1" + path
        for key, pattern in patterns.items():
            if key[0] == row.method.lower() and pattern.match(path.replace("%2F", "_")):
                covered.add(key)
    missing = sorted(operations - covered)
    assert not missing, f"routes without a row in the authorization matrix: {missing}"


@pytest.mark.parametrize("caller", CALLERS)
def test_the_matrix(ctx: Context, caller: str) -> None:
    key = ctx.keys[caller]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    problems: list[str] = []
    with httpx.Client(base_url=ctx.srv.endpoint, headers=headers, timeout=30) as client:
        for row in ROWS:
            kwargs = dict(row.kwargs or {})
            response = client.request(row.method, row.url(ctx), **kwargs)
            problem = _check(row, caller, response, ctx)
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(problems)
