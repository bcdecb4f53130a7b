"""Acceptance: job schedules (``cloudlet schedule``, like ``az ml schedule``) over the real HTTP API.

A schedule YAML whose ``create_job: ./job.yml`` is read and its code uploaded by the CLI fires a
command job every minute that runs to completion on a real node (the one test that waits for a
real minute); disabled, it has no next fire time, leaves the default list and makes no job when
its next fire time passes; a bad trigger is a 400 naming the field; a Reader reads but cannot
create; ``create_job: azureml:<job>`` copies that job's definition; ``schedule update --set``
changes a field of the stored document. One server per module.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import cli_json, error_of, log_text, served, submit, wait_job, wait_passes, wait_until

JOB = {"type": "command", "command": "echo scheduled", "compute": "local"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "schedules")


def url(srv: RunningServer, name: str = "") -> str:
    return f"{srv.ws_path}/schedules" + (f"/{name}" if name else "")


def schedule_named(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    response = api.get(url(srv, name))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_yaml_cron_schedule_fires_a_job_that_completes_and_disabled_stops(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "greeting.txt").write_text("hello from a schedule\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
        "type: command\ncommand: cat greeting.txt\ncode: ../src\ncompute: local\n"
    )
    (tmp_path / "every-minute.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/schedule.schema.json\n"
        "name: every-minute\ndisplay_name: Every minute\n"
        "trigger:\n  type: cron\n  expression: '* * * * *'\n  time_zone: UTC\n"
        "create_job: ./jobs/job.yml\n"
    )
    created = cli_json(srv, "schedule", "create", "--file", str(tmp_path / "every-minute.yml"))
    assert created["is_enabled"] is True and created["next_fire_time"], created
    # The job file was read and its code uploaded at creation: the schedule keeps a full job.
    assert created["create_job"]["command"] == "cat greeting.txt"
    assert str(created["create_job"]["code"]).startswith("codes/"), created["create_job"]

    fired = wait_until(
        lambda: schedule_named(api, srv, "every-minute").get("last_job_name"), 90, "the first fire"
    )
    # Disabled at once (well before the next minute): it has no next fire time and leaves the
    # default list.
    disabled = cli_json(srv, "schedule", "disable", "-n", "every-minute")
    assert disabled["is_enabled"] is False and disabled["next_fire_time"] is None
    assert disabled["last_job_name"] == fired, disabled
    assert "every-minute" not in [s["name"] for s in cli_json(srv, "schedule", "list")]
    assert "every-minute" in [s["name"] for s in cli_json(srv, "schedule", "list", "-t", "all")]

    done = wait_job(api, srv, fired, timeout=60)
    assert done["status"] == "Completed", done
    assert log_text(api, srv, fired) == "hello from a schedule\n"
    assert done["properties"] == {"azureml.scheduleName": "every-minute"}

    # The next fire time passes while it is disabled: the loop makes no job for it.
    last_fire = datetime.fromisoformat(str(disabled["last_fire_time"]).replace("Z", "+00:00")).timestamp()
    wait_until(lambda: time.time() > last_fire + 61, 90, "the next minute", interval=1)
    wait_passes(api, "job-schedules", 2)
    assert schedule_named(api, srv, "every-minute")["last_job_name"] == fired
    made = [j["name"] for j in api.get(f"{srv.ws_path}/jobs").json()["value"]]
    assert [n for n in made if n.startswith("every-minute-")] == [fired], made
    cli_json(srv, "schedule", "delete", "-n", "every-minute", "--yes")
    assert api.get(url(srv, "every-minute")).status_code == 404


def test_a_bad_trigger_is_a_400_naming_the_field(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    body = {"trigger": {"type": "cron", "expression": "*/90 * * *"}, "create_job": JOB}
    error = error_of(api.put(url(srv, "bad-cron"), json=body))
    assert error["target"] == "trigger.expression" and "five fields" in error["message"], error
    weekly = {"type": "recurrence", "frequency": "week", "interval": 1, "schedule": {"week_days": ["Funday"]}}
    error = error_of(api.put(url(srv, "bad-day"), json={**body, "trigger": weekly}))
    assert error["target"] == "trigger.schedule.week_days" and "Monday" in error["message"], error
    error = error_of(
        api.put(
            url(srv, "bad-job"),
            json={**body, "trigger": weekly | {"schedule": {}}, "create_job": {"type": "command"}},
        )
    )
    assert str(error["target"]).startswith("create_job"), error
    # The CLI says the same and exits non-zero.
    (tmp_path / "bad.yml").write_text(
        "name: bad-cron\ntrigger: {type: cron, expression: 'nope'}\ncreate_job: azureml:x\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", "schedule", "create", "--file", str(tmp_path / "bad.yml")],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "trigger.expression" in done.stderr + done.stdout, done


def test_a_reader_reads_schedules_but_cannot_create_them(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "schedule-reader", "Reader")
    with srv.client(key) as reader:
        body = {"trigger": {"type": "cron", "expression": "0 2 * * *"}, "create_job": JOB}
        refused = reader.put(url(srv, "by-reader"), json=body)
        assert refused.status_code == 403, refused.text
        assert reader.get(url(srv), params={"list_view_type": "all"}).status_code == 200
        assert api.get(url(srv, "by-reader")).status_code == 404


def test_create_job_azureml_copies_an_existing_jobs_definition(api: httpx.Client, srv: RunningServer) -> None:
    submit(api, srv, "template-job", {**JOB, "command": "echo from the template", "display_name": "template"})
    body = {
        "trigger": {"type": "recurrence", "frequency": "day", "interval": 1},
        "create_job": "azureml:template-job",
    }
    created = api.put(url(srv, "copied"), json=body)
    assert created.status_code == 201, created.text
    assert created.json()["create_job"]["command"] == "echo from the template"
    assert "display_name" not in created.json()["create_job"]
    missing = error_of(api.put(url(srv, "copied"), json={**body, "create_job": "azureml:no-such-job"}))
    assert missing["target"] == "create_job" and "no-such-job" in missing["message"], missing


def test_update_sets_a_field_of_the_stored_schedule(api: httpx.Client, srv: RunningServer) -> None:
    body = {"trigger": {"type": "cron", "expression": "0 2 * * *"}, "create_job": JOB, "tags": {"a": "1"}}
    assert api.put(url(srv, "to-update"), json=body).status_code == 201
    updated = cli_json(srv, "schedule", "update", "-n", "to-update", "--set", "trigger.expression=0 4 * * *")
    assert updated["trigger"]["expression"] == "0 4 * * *" and updated["tags"] == {"a": "1"}, updated
    assert updated["create_job"]["command"] == JOB["command"] and str(updated["next_fire_time"]).endswith(
        "04:00:00Z"
    )
