"""Acceptance: the ``cloudlet`` CLI as a user runs it (a subprocess per command) against a real server.

Each CLI start costs about a second of Python start-up, so the CLI is used for what is about the CLI
(commands, output formats, exit codes, the example files) and the HTTP API sets the scene. The
server's env from ``cli_env()`` selects JSON output unless a test passes ``-o``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RunningServer
from tests.jobs_helpers import served

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "compute"
CLUSTER: dict[str, Any] = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 0,
    "max_instances": 2,
}
INSTANCE: dict[str, Any] = {"type": "computeinstance", "size": "Standard_DS3_v2"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "cli")


def cli(srv: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def cli_many(srv: RunningServer, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands run side by side (start-up dominates their cost)."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(lambda args: cli(srv, *args), commands))


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return json.loads(result.stdout)


def compute_url(srv: RunningServer, name: str) -> str:
    return f"{srv.ws_path}/computes/{name}"


def create(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any]) -> None:
    response = api.put(compute_url(srv, name), json=body)
    assert response.status_code == 201, response.text
    assert srv.wait_operation(api, response.headers["Operation-Location"])["status"] == "Succeeded"


def names(api: httpx.Client, srv: RunningServer) -> list[str]:
    return sorted(c["name"] for c in api.get(f"{srv.ws_path}/computes").json()["value"])


# -- item 1: the example files --------------------------------------------------------------

EXAMPLE_FILES = [
    "cluster.yml",
    "cluster-low-priority.yml",
    "cluster-location.yml",
    "instance.yml",
    "vm-attach.yml",
    "cluster-minimal.yml",  # Azure ML's own minimal files: a name and a type (issue 12 item 6)
    "instance-minimal.yml",
]


def test_example_files_are_azure_ml_v2_yaml() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yml")) == sorted(EXAMPLE_FILES)
    for name in EXAMPLE_FILES:
        doc = yaml.safe_load((EXAMPLES / name).read_text())
        assert doc["$schema"].startswith("https://azuremlschemas.azureedge.net/latest/"), name
        assert doc["$schema"].endswith(".schema.json"), name
        assert doc["type"] in ("amlcompute", "computeinstance", "virtualmachine"), name


def test_every_example_is_accepted_as_is(api: httpx.Client, srv: RunningServer) -> None:
    results = cli_many(srv, *(["compute", "create", "--file", str(EXAMPLES / f)] for f in EXAMPLE_FILES))
    shown: dict[str, dict[str, Any]] = {}
    for file, result in zip(EXAMPLE_FILES, results, strict=True):
        body = ok_json(result)
        doc = yaml.safe_load((EXAMPLES / file).read_text())
        assert body["name"] == doc["name"], file
        assert body["provisioning_state"] == "Succeeded", (file, body)
        assert "Succeeded" in result.stderr, (file, result.stderr)
        server_view = api.get(compute_url(srv, doc["name"])).json()
        assert server_view["provisioning_state"] == "Succeeded", (file, server_view)
        shown[file] = server_view

    cluster = shown["cluster.yml"]
    assert (cluster["type"], cluster["size"], cluster["tier"]) == (
        "amlcompute",
        "Standard_DS3_v2",
        "dedicated",
    )
    assert (cluster["min_instances"], cluster["max_instances"], cluster["idle_time_before_scale_down"]) == (
        0,
        2,
        120,
    )
    assert shown["cluster-low-priority.yml"]["tier"] == "low_priority"
    located = shown["cluster-location.yml"]
    assert (located["location"], located["warnings"]) == (
        "local",
        [],
    )  # same location as the workspace: no C4

    instance = shown["instance.yml"]
    assert (instance["type"], instance["state"], instance["owner"]) == ("computeinstance", "Running", "admin")
    assert instance["idle_time_before_shutdown_minutes"] == 30
    [schedule] = instance["schedules"]["compute_start_stop"]
    assert schedule["action"] == "stop"
    assert schedule["trigger"] == {
        "type": "cron",
        "expression": "0 18 * * *",
        "start_time": "2026-01-01T00:00:00",
        "time_zone": "Pacific Standard Time",
    }

    for minimal in ("cluster-minimal.yml", "instance-minimal.yml"):
        assert shown[minimal]["size"] == "Standard_DS3_v2", shown[minimal]
    assert shown["instance-minimal.yml"]["state"] == "Running"

    vm = shown["vm-attach.yml"]
    assert vm["type"] == "virtualmachine"
    assert vm["resource_id"].endswith("/virtualMachines/vm1")
    assert vm["ssh_settings"] == {
        "admin_username": "azureuser",
        "ssh_port": 22,
        "ssh_private_key_file": "~/.ssh/id_rsa",
    }


# -- item 3: usage and sizes ------------------------------------------------------------------


def test_list_usage_counts_a_stopped_instance(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "usage-ci", INSTANCE)
    stop = api.post(f"{compute_url(srv, 'usage-ci')}/stop")  # the CLI's stop is tested below
    assert srv.wait_operation(api, stop.headers["Operation-Location"])["status"] == "Succeeded"
    assert api.get(compute_url(srv, "usage-ci")).json()["state"] == "Stopped"

    lines = {line["name"]: line for line in ok_json(cli(srv, "compute", "list-usage"))}
    family = lines["standardDSv2Family"]
    holder = next(h for h in family["holders"] if h["compute"] == "usage-ci")
    assert (holder["cores"], holder["state"]) == (4, "Stopped")
    assert family["current_value"] >= 4
    assert family["current_value"] == sum(h["cores"] for h in family["holders"])
    assert lines["totalDedicatedCores"]["current_value"] >= 4


def test_list_sizes_by_compute_type(srv: RunningServer) -> None:
    instance_run, cluster_run = cli_many(
        srv,
        ["compute", "list-sizes", "--type", "computeinstance"],
        ["compute", "list-sizes", "--type", "amlcompute"],
    )
    instance_sizes, cluster_sizes = ok_json(instance_run), ok_json(cluster_run)
    fx = {s["name"] for s in cluster_sizes if s["series"] == "FX"}
    assert fx, "amlcompute sizes must include the FX series"
    assert not [
        s["name"] for s in instance_sizes if s["series"] == "FX" or s["name"].startswith("Standard_FX")
    ]
    assert all("computeinstance" in s["supported_compute_types"] for s in instance_sizes)
    assert "Standard_DS3_v2" in {s["name"] for s in instance_sizes}


# -- item 7: commands, output formats, errors ----------------------------------------------------


def test_show_list_update_delete(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "crud-cluster", CLUSTER)

    shown = cli(srv, "compute", "show", "-n", "crud-cluster", "-o", "yaml")
    assert shown.returncode == 0, shown.stderr
    doc = yaml.safe_load(shown.stdout)
    assert (doc["name"], doc["size"], doc["provisioning_state"]) == (
        "crud-cluster",
        "Standard_DS3_v2",
        "Succeeded",
    )

    table = cli(srv, "compute", "list", "-o", "table")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "TYPE", "SIZE", "LOCATION"], table.stdout
    row = next(line for line in lines if line.startswith("crud-cluster "))
    assert row.split()[1:4] == ["amlcompute", "Standard_DS3_v2", "local"], row
    with pytest.raises(json.JSONDecodeError):
        json.loads(table.stdout)

    updated = ok_json(
        cli(srv, "compute", "update", "-n", "crud-cluster", "--max-instances", "3", "--description", "bigger")
    )
    assert (updated["max_instances"], updated["description"]) == (3, "bigger")
    on_server = api.get(compute_url(srv, "crud-cluster")).json()
    assert (on_server["max_instances"], on_server["provisioning_state"]) == (3, "Succeeded")

    deleted = ok_json(cli(srv, "compute", "delete", "-n", "crud-cluster", "--yes"))
    assert (deleted["kind"], deleted["status"]) == ("delete", "Succeeded")
    assert api.get(compute_url(srv, "crud-cluster")).status_code == 404


def test_instance_start_stop_restart(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "power-ci", INSTANCE)
    for verb, state in (("stop", "Stopped"), ("start", "Running"), ("restart", "Running")):
        op = ok_json(cli(srv, "compute", verb, "-n", "power-ci"))
        assert (op["kind"], op["status"], op["target_name"]) == (verb, "Succeeded", "power-ci")
        assert api.get(compute_url(srv, "power-ci")).json()["state"] == state, verb


def test_no_wait_returns_before_completion(api: httpx.Client, srv: RunningServer) -> None:
    result = cli(
        srv, "compute", "create", "--file", str(EXAMPLES / "cluster.yml"), "-n", "quick-cluster", "--no-wait"
    )
    body = ok_json(result)
    # The answer is the accepted request, not the finished compute.
    assert (body["name"], body["provisioning_state"]) == ("quick-cluster", "Creating")
    assert "started operation" in result.stderr, result.stderr
    op_id = result.stderr.split("started operation", 1)[1].split()[0]
    op = srv.wait_operation(api, f"/api/v1/operations/{op_id}")
    assert (op["kind"], op["status"], op["target_name"]) == ("create", "Succeeded", "quick-cluster")
    assert api.get(compute_url(srv, "quick-cluster")).json()["provisioning_state"] == "Succeeded"


def test_errors_exit_1_with_the_server_message(api: httpx.Client, srv: RunningServer) -> None:
    before = names(api, srv)
    missing, retired = cli_many(
        srv,
        ["compute", "show", "-n", "no-such-compute"],
        [
            "compute",
            "create",
            "--file",
            str(EXAMPLES / "cluster.yml"),
            "-n",
            "old-gpu",
            "--set",
            "size=Standard_NC6s_v3",
        ],
    )
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert "ResourceNotFound" in missing.stderr and "'no-such-compute' was not found" in missing.stderr

    server_error = api.put(compute_url(srv, "old-gpu"), json={**CLUSTER, "size": "Standard_NC6s_v3"}).json()[
        "error"
    ]
    assert retired.returncode == 1
    assert "RetiredVmSeries" in retired.stderr
    flat = " ".join(retired.stderr.split())
    assert " ".join(server_error["message"].split()) in flat, (server_error["message"], retired.stderr)
    assert api.get(compute_url(srv, "old-gpu")).status_code == 404
    assert names(api, srv) == before


def test_read_only_lock_blocks_compute_update(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "locked-cluster", CLUSTER)
    scope = compute_url(srv, "locked-cluster")
    assert api.put(f"{scope}/locks/no-touch", json={"level": "ReadOnly"}).status_code == 201
    try:
        result = cli(srv, "compute", "update", "-n", "locked-cluster", "--max-instances", "4")
        assert result.returncode == 1
        assert "ScopeLocked" in result.stderr and "no-touch" in result.stderr, result.stderr
        assert api.get(scope).json()["max_instances"] == 2
    finally:
        assert api.delete(f"{scope}/locks/no-touch").status_code == 204


def test_auth_token_works_as_a_bearer(srv: RunningServer) -> None:
    result = cli(srv, "auth", "token", "-o", "table")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert token.startswith("clt_") and "\n" not in token
    with srv.client(token) as client:
        whoami = client.get("/api/v1/whoami")
        assert whoami.status_code == 200, whoami.text
        assert whoami.json()["principal"] == "admin"
        assert client.get(f"{srv.ws_path}/computes").status_code == 200
    with srv.client(token[:-2] + ("xx" if not token.endswith("xx") else "yy")) as tampered:
        assert tampered.get("/api/v1/whoami").status_code == 401


def test_workspace_ssh_policy_from_the_cli(srv: RunningServer) -> None:
    made = ok_json(cli(srv, "workspace", "create", "-n", "policy-ws", "--forbid-ssh-public-access"))
    assert made["name"] == "policy-ws" and made["allow_ssh_public_access"] is False
    again = ok_json(cli(srv, "workspace", "create", "-n", "policy-ws", "--allow-ssh-public-access"))
    assert again["allow_ssh_public_access"] is True
