"""C13: a cluster with a managed identity gives its jobs a short-lived token of the cluster's own
principal (Reader on the workspace), never the submitter's key."""

from __future__ import annotations

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, log_text, submit, wait_job

# The job uses its token against the real API: reading works, creating a compute does not.
PROBE = (
    'python -c "'
    "import json, os, urllib.request, urllib.error\n"
    "tok = os.environ['CLOUDLET_IDENTITY_TOKEN']; base = os.environ['CLOUDLET_ENDPOINT']\n"
    "ws = os.environ['WS_PATH']\n"
    "def call(method, path, body=None):\n"
    "    req = urllib.request.Request(base + path, method=method, headers={'Authorization': 'Bearer ' + tok,"
    " 'Content-Type': 'application/json'}, data=json.dumps(body).encode() if body else None)\n"
    "    try:\n"
    "        return urllib.request.urlopen(req).status\n"
    "    except urllib.error.HTTPError as e:\n"
    "        return e.code\n"
    "print('token', tok[:4], 'read', call('GET', ws), 'write', call('PUT', ws + '/computes/sneaky',"
    " {'type': 'amlcompute', 'size': 'Standard_DS3_v2'}))\n"
    "print('who', json.load(urllib.request.urlopen(urllib.request.Request(base + '/api/v1/whoami',"
    " headers={'Authorization': 'Bearer ' + tok})))['principal'])\n"
    '"'
)


def test_cluster_identity_token_reaches_jobs_with_the_clusters_own_rights(server: RunningServer) -> None:
    with server.client() as api:
        create_compute(
            api,
            server,
            "idc",
            {
                "type": "amlcompute",
                "size": "Standard_DS3_v2",
                "min_instances": 0,
                "max_instances": 1,
                "identity": {"type": "system_assigned"},
            },
        )
        create_compute(
            api,
            server,
            "plain",
            {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1},
        )
        submit(
            api,
            server,
            "with-id",
            {
                "command": PROBE,
                "compute": "azureml:idc",
                "environment_variables": {"WS_PATH": server.ws_path},
            },
        )
        submit(
            api,
            server,
            "without-id",
            {"command": "echo token=${CLOUDLET_IDENTITY_TOKEN:-none}", "compute": "azureml:plain"},
        )
        assert wait_job(api, server, "with-id", timeout=90)["status"] == "Completed"
        assert wait_job(api, server, "without-id", timeout=90)["status"] == "Completed"
        text = log_text(api, server, "with-id")
        assert "token clt_ read 200 write 403" in text, text
        assert "who idc." in text and "@identity" in text, text
        assert log_text(api, server, "without-id").strip() == "token=none"
        assert api.get(server.ws_path + "/computes/sneaky").status_code == 404
