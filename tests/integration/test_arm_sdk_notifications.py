"""A job's ``notificationSetting`` through the ARM facade, sent and read by the official
azure-ai-ml SDK's own REST client and models (1.35.2's ``command()`` entity carries no
notification setting, so the script sets it on the SDK's REST ``JobBase`` as Azure's wire has it):
the setting round-trips in Azure's shape, and a webhook that names no http(s) URL is refused."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served

SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient, command
from azure.ai.ml._restclient.arm_ml_service.models import NotificationSetting, Webhook
from azure.core.exceptions import HttpResponseError
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}), flush=True)

ml = MLClient.from_config(DefaultAzureCredential())
ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"

def submit(name, webhook_url):
    rest = command(name=name, command="exit 1", environment=ENV)._to_job()._to_rest_object()
    rest.properties.notification_setting = NotificationSetting(
        email_on=["JobFailed", "JobCompleted"],
        emails=["ops@example.com"],
        webhooks={"chat": Webhook(
            {"webhookType": "AzureDevOps", "eventType": "JobFailed", "url": webhook_url}
        )},
    )
    return ml.jobs._create_or_update_with_different_version_api(rest, strip_none_body=True)

created = submit("sdk-notified", "https://hooks.example/chat")
got = ml.jobs.service_client_01_2025_preview.jobs.get(
    id="sdk-notified", resource_group_name=ml.resource_group_name, workspace_name=ml.workspace_name
)
for step, job in (("created", created), ("got", got)):
    setting = job.properties.notification_setting
    out(step, email_on=list(setting.email_on), emails=list(setting.emails),
        webhooks={k: dict(v) for k, v in setting.webhooks.items()})
try:
    submit("sdk-bad-hook", "file:///etc/passwd")
    out("bad", refused=False)
except HttpResponseError as exc:
    out("bad", refused=True, status=exc.status_code, message=str(exc.message))
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-sdk-notify")


def test_the_sdk_s_notification_setting_round_trips_through_the_facade(
    srv: RunningServer, tmp_path: Path
) -> None:
    sdk_python()
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=300)}
    for step in ("created", "got"):
        assert steps[step]["email_on"] == ["JobFailed", "JobCompleted"], steps[step]
        assert steps[step]["emails"] == ["ops@example.com"]
        assert steps[step]["webhooks"] == {
            "chat": {
                "url": "https://hooks.example/chat",
                "eventType": "JobFailed",
                "webhookType": "AzureDevOps",
            }
        }
    bad = steps["bad"]
    assert bad["refused"] and bad["status"] == 400 and "http" in bad["message"], bad
