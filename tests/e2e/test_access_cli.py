"""Acceptance: revoking access from the ``cloudlet`` CLI (a subprocess per command, as a user runs
it): key-create/list/rotate/revoke, role assign/list/remove, user disable/enable and audit list,
with table, JSON and YAML output and exit code 1 with the server's message on errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import RunningServer
from tests.jobs_helpers import served


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "access-cli")


def cli(srv: RunningServer, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = srv.cli_env()
    if key is not None:
        env["CLOUDLET_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args], env=env, capture_output=True, text=True, timeout=120
    )


def cli_many(srv: RunningServer, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands side by side (Python start-up dominates their cost)."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(lambda args: cli(srv, *args), commands))


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result).stdout)


def failed(result: subprocess.CompletedProcess[str], code: str) -> str:
    assert result.returncode == 1, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    assert f"({code})" in result.stderr, result.stderr
    return result.stderr


def whoami(srv: RunningServer, key: str) -> int:
    with srv.client(key) as client:
        return client.get("/api/v1/whoami").status_code


def test_keys_are_created_listed_rotated_and_revoked(srv: RunningServer) -> None:
    ok(cli(srv, "user", "create", "cli-alice"))
    created = ok(cli(srv, "user", "key-create", "cli-alice", "--expires-in-days", "30", "-o", "table"))
    [key] = created.stdout.split()  # the bare key: `KEY=$(cloudlet user key-create …)`
    assert key.startswith("clk_") and "store this key now" in created.stderr and "expires" in created.stderr
    assert whoami(srv, key) == 200

    [listed] = ok_json(cli(srv, "user", "key-list", "cli-alice"))
    assert listed["state"] == "Active" and listed["expires_on"] and key.startswith(listed["prefix"])
    assert "api_key" not in listed and key not in json.dumps(listed)

    rotated = ok(cli(srv, "user", "key-rotate", "cli-alice", "--id", listed["id"], "-o", "table"))
    [new_key] = rotated.stdout.split()
    assert new_key.startswith("clk_") and new_key != key and f"replaces key {listed['id']}" in rotated.stderr
    assert (whoami(srv, key), whoami(srv, new_key)) == (401, 200)

    table, as_json = cli_many(
        srv, ["user", "key-list", "cli-alice", "-o", "table"], ["user", "key-list", "cli-alice"]
    )
    assert ok(table).stdout.splitlines()[0].split()[:3] == ["ID", "PREFIX", "STATE"], table.stdout
    new_id = next(k["id"] for k in ok_json(as_json) if k["state"] == "Active")
    revoked = ok(cli(srv, "user", "key-revoke", "cli-alice", "--id", new_id))
    assert "revoked" in revoked.stderr and whoami(srv, new_key) == 401
    assert {k["state"] for k in ok_json(cli(srv, "user", "key-list", "cli-alice"))} == {"Revoked"}

    missing, past_rotation = cli_many(
        srv,
        ["user", "key-revoke", "cli-alice", "--id", "no-such-key"],
        ["user", "key-rotate", "cli-alice", "--id", new_id],
    )
    failed(missing, "ResourceNotFound")
    assert "key-create" in failed(past_rotation, "KeyRevoked")


def test_users_are_disabled_and_keys_are_self_service(srv: RunningServer) -> None:
    ok(cli(srv, "user", "create", "cli-bob"))
    key = ok(cli(srv, "user", "key-create", "cli-bob", "-o", "table")).stdout.strip()
    mine, create_own, users = (
        cli(srv, "user", "key-list", "cli-bob", key=key),
        cli(srv, "user", "key-create", "cli-bob", key=key),
        cli(srv, "user", "list", key=key),
    )
    assert len(ok_json(mine)) == 1
    assert "key-rotate" in failed(create_own, "AuthorizationFailed")
    failed(users, "AuthorizationFailed")

    disabled = ok_json(cli(srv, "user", "disable", "cli-bob"))
    assert disabled["enabled"] is False and whoami(srv, key) == 401
    assert "user enable cli-bob" in failed(cli(srv, "auth", "whoami", key=key), "AuthenticationFailed")
    assert ok_json(cli(srv, "user", "enable", "cli-bob"))["enabled"] is True and whoami(srv, key) == 200
    table = ok(cli(srv, "user", "list", "-o", "table")).stdout.splitlines()
    assert table[0].split() == ["NAME", "ADMIN", "ENABLED", "CREATED"], table


def test_roles_are_assigned_listed_and_removed(api: httpx.Client, srv: RunningServer) -> None:
    assert api.post("/api/v1/principals", json={"name": "cli-carol"}).status_code == 201
    key = api.post("/api/v1/principals/cli-carol/keys").json()["api_key"]
    assert api.post("/api/v1/principals", json={"name": "cli-erin"}).status_code == 201
    assert api.put(f"{srv.ws_path}/roleAssignments/cli-erin", json={"role": "Owner"}).status_code == 200
    assigned = ok_json(cli(srv, "role", "assign", "--user", "cli-carol", "--role", "Reader"))
    assert (assigned["principal"], assigned["role"]) == ("cli-carol", "Reader")
    roles = {r["principal"]: r["role"] for r in ok_json(cli(srv, "role", "list"))}
    assert roles["cli-carol"] == "Reader"
    with srv.client(key) as carol:
        assert carol.get(srv.ws_path).status_code == 200

    removed = ok(cli(srv, "role", "remove", "--user", "cli-carol", "-w", "default"))
    assert "removed" in removed.stderr
    with srv.client(key) as carol:
        assert carol.get(srv.ws_path).status_code == 404
    again, listed = cli_many(srv, ["role", "remove", "--user", "cli-carol"], ["role", "list", "-o", "table"])
    failed(again, "ResourceNotFound")
    header, *rows = ok(listed).stdout.splitlines()
    assert header.split() == ["PRINCIPAL", "ROLE", "WORKSPACE"]
    assert [row.split() for row in rows] == [["cli-erin", "Owner", "default"]]


def test_the_audit_log_from_the_cli(api: httpx.Client, srv: RunningServer) -> None:
    assert api.post("/api/v1/principals", json={"name": "cli-dave"}).status_code == 201
    for _ in range(3):
        assert api.post("/api/v1/principals/cli-dave/keys").status_code == 201
    key = api.post("/api/v1/principals/cli-dave/keys").json()["api_key"]
    as_json, as_yaml, table, everything, bad_time = cli_many(
        srv,
        ["audit", "list", "--actor", "admin", "--action", "apiKey", "--since", "1h", "--top", "3"],
        ["audit", "list", "--target", "/principals/cli-dave", "-o", "yaml"],
        ["audit", "list", "--action", "principal.create", "-o", "table"],
        ["audit", "list"],
        ["audit", "list", "--since", "last tuesday"],
    )
    found = ok_json(as_json)
    assert len(found) == 3 and all(e["action"].startswith("apiKey.") and e["actor"] == "admin" for e in found)
    assert [e["id"] for e in found] == sorted((e["id"] for e in found), reverse=True)  # newest first
    assert found[0]["target"].startswith("/principals/cli-dave/keys/")
    about_dave = yaml.safe_load(ok(as_yaml).stdout)
    assert {e["action"] for e in about_dave} == {"principal.create", "apiKey.create"} and len(about_dave) == 5
    assert ok(table).stdout.splitlines()[0].split() == [
        "TIME",
        "ACTOR",
        "ACTION",
        "TARGET",
        "CHANNEL",
        "DETAILS",
    ]
    assert "/principals/cli-dave" in table.stdout
    assert ok(everything).returncode == 0  # the admin's own key reads it …
    failed(cli(srv, "audit", "list", key=key), "AuthorizationFailed")  # … a user's does not
    assert bad_time.returncode == 1 and "2h, 30m, 7d" in bad_time.stderr
