"""``cloudlet location …`` as an administrator runs it (a subprocess per command) against a real
server: create with a provider and a YAML or JSON settings file, list, show, update, delete, and
the refusals (an unknown provider, a setting it does not take) with the field they name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningServer
from tests.e2e.test_cli import cli, ok_json
from tests.jobs_helpers import served


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "location-cli")


def test_location_lifecycle_through_the_cli(srv: RunningServer, tmp_path: Path) -> None:
    settings = tmp_path / "lab.yaml"
    settings.write_text(f"nodes_dir: {tmp_path / 'lab-nodes'}\ncgroups: false\n")
    made = ok_json(
        cli(srv, "location", "create", "-n", "lab", "--provider", "local", "--config", str(settings))
    )
    assert made["provider"] == "local"
    assert made["config"] == {"nodes_dir": str(tmp_path / "lab-nodes"), "cgroups": False}

    shown = ok_json(cli(srv, "location", "show", "-n", "lab"))
    assert shown == made
    listed = {loc["name"]: loc for loc in ok_json(cli(srv, "location", "list"))}
    assert set(listed) >= {"lab", "local"} and listed["lab"]["config"] == made["config"]
    table = cli(srv, "-o", "table", "location", "list")
    assert table.returncode == 0 and "PROVIDER" in table.stdout and "lab" in table.stdout

    as_json = tmp_path / "lab.json"
    as_json.write_text(json.dumps({"env_cache": str(tmp_path / "envs")}))
    updated = ok_json(cli(srv, "location", "update", "-n", "lab", "--config", str(as_json), "--vcpus", "12"))
    assert updated["config"] == {"env_cache": str(tmp_path / "envs")} and updated["capacity"]["vcpus"] == 12
    assert ok_json(cli(srv, "location", "update", "-n", "lab", "--gpus", "1"))["config"] == updated["config"]

    providers = ok_json(cli(srv, "location", "providers"))
    assert "local" in {p["name"] for p in providers}

    ok_json(cli(srv, "location", "delete", "-n", "lab"))
    gone = cli(srv, "location", "show", "-n", "lab")
    assert gone.returncode != 0 and "lab" in gone.stderr


def test_the_cli_shows_the_field_a_refusal_names(srv: RunningServer, tmp_path: Path) -> None:
    unknown = cli(srv, "location", "create", "-n", "hpc", "--provider", "nosuch")
    assert unknown.returncode != 0 and "provider" in unknown.stderr and "local" in unknown.stderr
    settings = tmp_path / "bad.yaml"
    settings.write_text("nodes_directory: /srv\n")
    bad = cli(srv, "location", "create", "-n", "hpc", "--config", str(settings))
    assert bad.returncode != 0 and "config.nodes_directory" in bad.stderr
    missing = cli(srv, "location", "update", "-n", "nowhere", "--vcpus", "4")
    assert missing.returncode != 0 and "nowhere" in missing.stderr
    not_a_file = cli(srv, "location", "create", "-n", "hpc", "--config", str(tmp_path / "absent.yaml"))
    assert not_a_file.returncode != 0 and "absent.yaml" in not_a_file.stderr
