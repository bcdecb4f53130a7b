"""Issue 31 over the real server: teams and their shares (REST and ``cloudlet team``), and a job's
``queue_settings`` end to end — YAML through the CLI, the native REST job PUT, and the unmodified
azure-ai-ml SDK through the ARM facade — stored in ``jobs.priority``/``jobs.job_tier`` and read back
in the SDK entity's shape. One server for the module; each test makes its own names."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import cli_json, create_compute, served, submit

TEAMS = "/api/v1/teams"
CLUSTER = "qs-cpu"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "teams")


@pytest.fixture(scope="module")
def cluster(api: httpx.Client, srv: RunningServer) -> str:
    body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
    create_compute(api, srv, CLUSTER, body)
    return CLUSTER


def users(api: httpx.Client, *names: str) -> None:
    for name in names:
        assert api.post("/api/v1/principals", json={"name": name}).status_code == 201


def error(response: httpx.Response, status: int, target: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert body["target"] == target, body
    return str(body["message"])


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "CLOUDLET_OUTPUT": "json"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def db_row(srv: RunningServer, sql: str, *args: Any) -> Any:
    with sqlite3.connect(srv.home / "cloudlet.db") as db:
        return db.execute(sql, args).fetchone()


# -- teams over REST ----------------------------------------------------------------------------
def test_teams_rest(api: httpx.Client, srv: RunningServer, cluster: str) -> None:
    users(api, "t-alice", "t-bob", "t-carol")
    body = {
        "description": "vision",
        "members": ["t-alice", "t-bob"],
        "shares": [
            {"location": "local", "share": 50, "borrow_limit": None},
            {"workspace": "default", "compute": cluster, "share": 50, "borrow_limit": 8},
        ],
    }
    created = api.put(f"{TEAMS}/t-vision", json=body)
    assert created.status_code == 201, created.text
    shown = created.json()
    assert shown["members"] == ["t-alice", "t-bob"] and shown["description"] == "vision"
    assert shown["shares"] == [
        {"location": "local", "share": 50, "borrow_limit": None},
        {
            "workspace": "default",
            "resource_group": "default",
            "compute": cluster,
            "share": 50,
            "borrow_limit": 8,
        },
    ]
    # The view is a document the PUT takes back as it is: 200, nothing changed.
    again = api.put(f"{TEAMS}/t-vision", json={k: shown[k] for k in ("description", "members", "shares")})
    assert again.status_code == 200 and again.json()["shares"] == shown["shares"]
    assert api.get(f"{TEAMS}/t-vision").json() == again.json()
    assert "t-vision" in [t["name"] for t in api.get(TEAMS).json()["value"]]

    # Refusals name the field and the fix, and leave the team as it was.
    put = lambda doc: api.put(f"{TEAMS}/t-other", json=doc)  # noqa: E731
    assert "t-bob" in error(put({"members": ["t-carol", "t-bob"]}), 409, "members[1]")
    assert "'t-vision'" in error(put({"members": ["t-carol", "t-bob"]}), 409, "members[1]")
    assert "no user 't-nobody'" in error(put({"members": ["t-nobody"]}), 400, "members[0]")
    error(put({"shares": [{"location": "local", "share": 0}]}), 400, "shares[0].share")
    error(
        put({"shares": [{"location": "local", "share": 1, "borrow_limit": -1}]}),
        400,
        "shares[0].borrow_limit",
    )
    error(put({"shares": [{"location": "mars", "share": 1}]}), 400, "shares[0].location")
    error(
        put({"shares": [{"workspace": "nope", "compute": cluster, "share": 1}]}), 400, "shares[0].workspace"
    )
    error(
        put({"shares": [{"workspace": "default", "compute": "nope", "share": 1}]}), 400, "shares[0].compute"
    )
    both = {"location": "local", "workspace": "default", "compute": cluster, "share": 1}
    error(put({"shares": [both]}), 400, "shares[0]")
    twice = [{"location": "local", "share": 1}, {"location": "local", "share": 2}]
    error(put({"shares": twice}), 400, "shares[1]")
    assert put({"shares": [{"location": "local", "share": "1"}]}).status_code == 400
    assert api.get(f"{TEAMS}/t-other").status_code == 404  # all or nothing

    # Writes are an administrator's; reads any user's.
    key = api.post("/api/v1/principals/t-carol/keys").json()["api_key"]
    with srv.client(key) as carol:
        assert carol.get(f"{TEAMS}/t-vision").status_code == 200
        assert carol.put(f"{TEAMS}/t-carols", json={"members": ["t-carol"]}).status_code == 403
        assert carol.delete(f"{TEAMS}/t-vision").status_code == 403
    audit = api.get("/api/v1/audit", params={"target": "/teams/t-vision"}).json()["value"]
    assert {e["action"] for e in audit} == {"team.create", "team.update"}
    assert api.delete(f"{TEAMS}/t-vision").status_code == 204
    assert api.delete(f"{TEAMS}/t-vision").status_code == 404


# -- teams through the CLI ---------------------------------------------------------------------
def test_teams_cli(api: httpx.Client, srv: RunningServer, cluster: str, tmp_path: Path) -> None:
    users(api, "c-ann", "c-ben", "c-cat")
    made = cli_json(
        srv,
        "team", "create", "-n", "c-nlp", "--member", "c-ann", "--member", "c-ben", "--description", "nlp",
        "--location-share", "local=30:4", "--compute-share", f"{cluster}=10", "-w", "default",
    )  # fmt: skip
    assert made["members"] == ["c-ann", "c-ben"]
    assert made["shares"] == [
        {"location": "local", "share": 30, "borrow_limit": 4},
        {
            "workspace": "default",
            "resource_group": "default",
            "compute": cluster,
            "share": 10,
            "borrow_limit": None,
        },
    ]
    # update replaces what its flags name and keeps the rest
    changed = cli_json(srv, "team", "update", "-n", "c-nlp", "--member", "c-cat")
    assert changed["members"] == ["c-cat"] and changed["shares"] == made["shares"]
    assert changed["description"] == "nlp"
    # a YAML file is the same document
    (tmp_path / "team.yml").write_text(
        "name: c-speech\ndescription: speech\nmembers: [c-ann]\n"
        "shares:\n  - {location: local, share: 70, borrow_limit: 0}\n"
    )
    speech = cli_json(srv, "team", "create", "--file", str(tmp_path / "team.yml"))
    assert speech["name"] == "c-speech" and speech["shares"][0]["borrow_limit"] == 0
    assert cli_json(srv, "team", "show", "-n", "c-speech")["members"] == ["c-ann"]
    table = cli(srv, "-o", "table", "team", "list")
    assert table.returncode == 0, table.stderr
    assert "SHARES" in table.stdout and "local=70:0" in table.stdout and "c-nlp" in table.stdout
    # errors exit != 0 with the server's message
    taken = cli(srv, "team", "create", "-n", "c-third", "--member", "c-ann")
    assert taken.returncode != 0 and "already in team 'c-speech'" in taken.stderr + taken.stdout
    exists = cli(srv, "team", "create", "-n", "c-speech")
    assert exists.returncode != 0 and "cloudlet team update" in exists.stderr + exists.stdout
    bad = cli(srv, "team", "update", "-n", "c-nlp", "--location-share", "local")
    assert bad.returncode != 0 and "NAME=SHARE[:BORROW]" in bad.stderr + bad.stdout
    assert cli(srv, "team", "delete", "-n", "c-speech").returncode == 0
    assert cli(srv, "team", "show", "-n", "c-speech").returncode != 0


# -- queue_settings -----------------------------------------------------------------------------
def test_queue_settings_from_yaml_through_the_cli(srv: RunningServer, cluster: str, tmp_path: Path) -> None:
    (tmp_path / "job.yml").write_text(
        f"command: 'true'\ncompute: azureml:{cluster}\nqueue_settings:\n  job_tier: Basic\n  priority: High\n"
    )
    created = cli_json(srv, "job", "create", "--file", str(tmp_path / "job.yml"), "-n", "qs-yaml")
    assert created["queue_settings"] == {"job_tier": "basic", "priority": "high"}
    shown = cli_json(srv, "job", "show", "-n", "qs-yaml")
    assert shown["queue_settings"] == {"job_tier": "basic", "priority": "high"}
    assert db_row(srv, "SELECT priority, job_tier FROM jobs WHERE name = 'qs-yaml'") == (3, "basic")
    listed = cli(srv, "-o", "table", "job", "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert "PRIORITY" in header
    assert any("qs-yaml" in row and "high" in row for row in rows), listed.stdout
    bad_yaml = tmp_path / "bad.yml"
    bad_yaml.write_text(
        f"command: 'true'\ncompute: azureml:{cluster}\nqueue_settings: {{priority: urgent}}\n"
    )
    bad = cli(srv, "job", "create", "--file", str(bad_yaml))
    assert bad.returncode != 0 and "queue_settings.priority" in bad.stderr + bad.stdout


def test_queue_settings_over_rest(api: httpx.Client, srv: RunningServer, cluster: str) -> None:
    job = submit(
        api, srv, "qs-rest", {"command": "true", "compute": cluster, "queue_settings": {"priority": 1}}
    )
    assert job["queue_settings"] == {"priority": "low"}
    assert db_row(srv, "SELECT priority, job_tier FROM jobs WHERE name = 'qs-rest'") == (1, None)
    plain = submit(api, srv, "qs-plain", {"command": "true", "compute": cluster})
    assert plain["queue_settings"] == {"priority": "medium"}
    refused = api.put(
        f"{srv.ws_path}/jobs/qs-bad", json={"command": "true", "queue_settings": {"job_tier": "gold"}}
    )
    assert "spot, basic, standard, premium" in error(refused, 400, "queue_settings.job_tier")


SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient, command
from azure.ai.ml.entities import QueueSettings
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
job = command(command="true", compute="qs-cpu", environment="azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
              queue_settings=QueueSettings(job_tier="spot", priority="high"))
created = ml.jobs.create_or_update(job)
got = ml.jobs.get(created.name)
plain = ml.jobs.get(ml.jobs.create_or_update(command(command="true", compute="qs-cpu",
    environment="azureml://registries/azureml/environments/sklearn-1.5/labels/latest")).name)
for step, j in (("created", created), ("got", got), ("plain", plain)):
    qs = j.queue_settings
    print("RESULT " + json.dumps({"step": step, "name": j.name, "job_tier": qs and qs.job_tier,
                                  "priority": qs and qs.priority}), flush=True)
"""


def test_the_sdk_sets_and_reads_back_queue_settings(srv: RunningServer, cluster: str, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=300)}
    for step in ("created", "got"):
        assert (steps[step]["job_tier"], steps[step]["priority"]) == ("spot", "high"), steps
    name = steps["got"]["name"]
    assert db_row(srv, "SELECT priority, job_tier FROM jobs WHERE name = ?", name) == (3, "spot")
    assert (steps["plain"]["job_tier"], steps["plain"]["priority"]) == (None, "medium"), steps
