"""Job schedules through the official azure-ai-ml SDK, unmodified, over HTTPS, pointed at cloudlet
only by ``cloudlet azureml env`` and ``config.json``: ``schedules.begin_create_or_update`` of a
``JobSchedule`` with a ``CronTrigger`` and a ``command(...)`` job with local code (uploaded by the
SDK), and one with a ``RecurrenceTrigger``; ``get``, ``list`` (enabled, disabled, all),
``begin_disable``, ``begin_enable``, ``begin_delete``; a schedule the CLI made keeps its job's code
through the SDK's disable and enable (each a get, then a PUT of what it read). The SDK itself sends
a command job in a schedule only with ``AZURE_ML_CLI_PRIVATE_FEATURES_ENABLED`` set (it says so
against Azure too)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import cli_json, served

ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient, command
from azure.ai.ml.entities import CronTrigger, JobSchedule, RecurrencePattern, RecurrenceTrigger
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
ml = MLClient.from_config(DefaultAzureCredential())
job = command(code="./src", command="python hello.py", environment=ENV, display_name="nightly-hello")
nightly = ml.schedules.begin_create_or_update(
    JobSchedule(name="sdk-nightly",
                trigger=CronTrigger(expression="0 3 * * *", time_zone="Pacific Standard Time"),
                create_job=job, tags={"team": "vision"})
).result()
out("created", name=nightly.name, enabled=nightly.is_enabled, state=nightly.provisioning_state,
    expression=nightly.trigger.expression, zone=nightly.trigger.time_zone,
    command=nightly.create_job.command, code=nightly.create_job.code, tags=nightly.tags)
weekly = ml.schedules.begin_create_or_update(
    JobSchedule(name="sdk-weekly",
                trigger=RecurrenceTrigger(
                    frequency="week", interval=1,
                    schedule=RecurrencePattern(hours=9, minutes=30, week_days=["monday"])),
                create_job=command(command="echo weekly", environment=ENV))
).result()
out("weekly", frequency=weekly.trigger.frequency, hours=weekly.trigger.schedule.hours,
    week_days=weekly.trigger.schedule.week_days)
got = ml.schedules.get("sdk-nightly")
out("get", name=got.name, command=got.create_job.command)
out("listed", names=sorted(s.name for s in ml.schedules.list()))
disabled = ml.schedules.begin_disable("sdk-nightly").result()
out("disabled", enabled=disabled.is_enabled,
    enabled_names=sorted(s.name for s in ml.schedules.list()),
    disabled_names=sorted(s.name for s in ml.schedules.list(list_view_type="DisabledOnly")),
    all_names=sorted(s.name for s in ml.schedules.list(list_view_type="All")))
enabled = ml.schedules.begin_enable("sdk-nightly").result()
out("enabled", enabled=enabled.is_enabled, code=enabled.create_job.code)
cli_made = ml.schedules.begin_disable("cli-made").result()
ml.schedules.begin_enable("cli-made").result()
out("cli-made", enabled=cli_made.is_enabled, code=cli_made.create_job.code)
ml.schedules.begin_delete("sdk-nightly").result()
ml.schedules.begin_delete("sdk-weekly").result()
out("deleted", names=sorted(s.name for s in ml.schedules.list(list_view_type="All")))
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "schedules-sdk")


def test_the_sdk_creates_lists_disables_enables_and_deletes_schedules(
    srv: RunningServer, tmp_path: Path
) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "hello.py").write_text("print('hello')\n")
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    # A schedule the CLI made: its code is a snapshot no code version holds.
    (tmp_path / "job.yml").write_text(
        f"type: command\ncommand: python hello.py\ncode: ./src\nenvironment: {ENV}\n"
    )
    (tmp_path / "cli-made.yml").write_text(
        "name: cli-made\ntrigger: {type: cron, expression: '0 4 * * *'}\ncreate_job: ./job.yml\n"
    )
    cli_code = cli_json(srv, "schedule", "create", "--file", str(tmp_path / "cli-made.yml"))["create_job"][
        "code"
    ]
    env = {**azureml_env(srv.cli_env()), "AZURE_ML_CLI_PRIVATE_FEATURES_ENABLED": "true"}
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, env, timeout=300)}

    created = steps["created"]
    assert created["name"] == "sdk-nightly" and created["enabled"] is True, created
    assert created["state"] == "Succeeded" and created["expression"] == "0 3 * * *", created
    assert created["zone"] == "Pacific Standard Time" and created["tags"] == {"team": "vision"}, created
    assert created["command"] == "python hello.py", created
    assert "/codes/" in str(created["code"]), created  # the SDK uploaded ./src; the schedule keeps it
    assert steps["weekly"]["frequency"].lower() == "week" and steps["weekly"]["hours"] == [9], steps["weekly"]
    assert [d.lower() for d in steps["weekly"]["week_days"]] == ["monday"], steps["weekly"]
    assert steps["get"] == {"step": "get", "name": "sdk-nightly", "command": "python hello.py"}
    assert steps["listed"]["names"] == ["cli-made", "sdk-nightly", "sdk-weekly"]
    disabled = steps["disabled"]
    assert disabled["enabled"] is False and disabled["enabled_names"] == ["cli-made", "sdk-weekly"], disabled
    assert disabled["disabled_names"] == ["sdk-nightly"], disabled
    assert disabled["all_names"] == ["cli-made", "sdk-nightly", "sdk-weekly"], disabled
    assert steps["enabled"]["enabled"] is True and "/codes/" in str(steps["enabled"]["code"]), steps[
        "enabled"
    ]
    assert steps["deleted"]["names"] == ["cli-made"]
    # Disabled and enabled again through the SDK (a get, then a PUT of what it read), the CLI-made
    # schedule keeps its job's code.
    assert steps["cli-made"]["enabled"] is False and "/codes/" in str(steps["cli-made"]["code"])
    shown = cli_json(srv, "schedule", "show", "-n", "cli-made")
    assert shown["is_enabled"] is True and shown["create_job"]["code"] == cli_code, shown
    assert not {"display_name", "experiment_name"} & set(shown["create_job"]), shown  # none given
