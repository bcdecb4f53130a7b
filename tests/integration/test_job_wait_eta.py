"""Acceptance (issue 31 item 4): every queued job shows a reason, its position in its compute's queue
and an estimated start, over HTTP, in the native view, the job list, the CLI and the SDK's job
properties (the real azure-ai-ml through the ARM facade); when the head job starts, the others move
up and their estimates change (within the ≤ 5 s refresh, waited for, never slept on).

A 1-node cluster runs ``holder`` (timeout 300 s); ``q-1``…``q-3`` (timeout 600 s each, no history:
the timeout is their expected run) queue behind it, then ``urgent`` (high priority) jumps them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, job, served, submit, wait_job, wait_until
from tests.studio_http import sign_in, studio_client

CLUSTER = "wait-one"
QUEUED = ("q-1", "q-2", "q-3")
# The SDK loads a command component only with an environment (Azure's always have one).
SKLEARN = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "job-wait-eta")


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        spec = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(client, srv, CLUSTER, spec)
        holder = {"command": "sleep 300", "compute": f"azureml:{CLUSTER}", "limits": {"timeout": 300}}
        submit(client, srv, "holder", holder)
        wait_job(client, srv, "holder", ("Running",), timeout=90)
        for name in QUEUED:
            body = {"command": "sleep 300", "compute": f"azureml:{CLUSTER}", "limits": {"timeout": 600}}
            submit(client, srv, name, body)
        yield client
        for name in ("holder", *QUEUED, "urgent"):
            client.post(f"{srv.ws_path}/jobs/{name}/cancel")


def _eta(waiting: dict[str, Any]) -> float:
    return datetime.fromisoformat(waiting["eta"].replace("Z", "+00:00")).timestamp()


def test_each_queued_job_has_a_reason_a_position_and_an_eta(api: httpx.Client, srv: RunningServer) -> None:
    shown = [job(api, srv, name)["waiting"] for name in QUEUED]
    assert [w["position"] for w in shown] == [1, 2, 3], shown
    assert [w["ahead"] for w in shown] == [0, 1, 2], shown
    for waiting in shown:
        assert waiting["code"] == "cluster_at_max" and "maximum of 1 node" in waiting["message"], waiting
        assert waiting["as_of"] and waiting["eta_text"].startswith("in "), waiting
    etas = [_eta(w) for w in shown]
    # The holder ends by its timeout (300 s after it started); each job ahead then runs its 600 s.
    assert etas[1] - etas[0] == pytest.approx(600, abs=2) and etas[2] - etas[1] == pytest.approx(600, abs=2)
    assert 0 < shown[0]["eta_in_s"] <= 300, shown[0]
    # The list shows the same, one read of the queue for the page.
    listed = api.get(f"{srv.ws_path}/jobs", params={"compute": CLUSTER, "status": "Queued"}).json()["value"]
    by_name = {j["name"]: j["waiting"] for j in listed}
    assert [by_name[n]["position"] for n in QUEUED] == [1, 2, 3], by_name
    assert [by_name[n]["eta"] for n in QUEUED] == [w["eta"] for w in shown], by_name


def test_a_high_priority_job_goes_first_and_says_why_the_others_wait(
    api: httpx.Client, srv: RunningServer
) -> None:
    body = {"command": "echo urgent", "compute": f"azureml:{CLUSTER}", "queue_settings": {"priority": "high"}}
    submit(api, srv, "urgent", body)
    urgent = job(api, srv, "urgent")["waiting"]
    assert urgent["position"] == 1, urgent
    moved = wait_until(
        lambda: (w := job(api, srv, "q-1")["waiting"])["position"] == 2 and w, 10, "q-1 to move behind urgent"
    )
    assert moved["code"] == "behind_higher_priority" and "1 job of higher priority" in moved["message"], moved
    api.post(f"{srv.ws_path}/jobs/urgent/cancel")
    wait_job(api, srv, "urgent", ("Canceled",), timeout=30)
    # The queue is read again within the refresh (≤ 5 s): q-1 back at the head.
    wait_until(lambda: job(api, srv, "q-1")["waiting"]["position"] == 1, 10, "q-1 back at the head")
    # A spot job runs only on capacity nobody else wants: behind the others, and says so.
    spot = {"command": "echo spot", "compute": f"azureml:{CLUSTER}", "queue_settings": {"job_tier": "spot"}}
    submit(api, srv, "spotty", spot)
    waiting = job(api, srv, "spotty")["waiting"]
    assert waiting["code"] == "spot" and waiting["position"] == 4, waiting
    assert "spot tier" in waiting["message"] and "3 jobs ahead" in waiting["message"], waiting
    api.post(f"{srv.ws_path}/jobs/spotty/cancel")
    wait_job(api, srv, "spotty", ("Canceled",), timeout=30)


def test_the_cli_shows_a_waiting_block_and_list_columns(api: httpx.Client, srv: RunningServer) -> None:
    env = {**srv.cli_env(), "CLOUDLET_OUTPUT": "table"}
    run = [sys.executable, "-m", "cloudlet", "job"]
    shown = subprocess.run([*run, "show", "-n", "q-2"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    block = shown.stdout.split("Waiting", 1)[1]
    assert "position:  2 in the queue of wait-one" in block or "position:  3" in block, shown.stdout
    assert "estimated start:" in block and "(in ~" in block, shown.stdout
    listed = subprocess.run(
        [*run, "list", "--compute", CLUSTER], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    header = listed.stdout.splitlines()[0]
    assert "POSITION" in header and "ETA" in header and "WAITING" in header, listed.stdout
    assert "cluster_at_max" in listed.stdout, listed.stdout


def test_the_studio_shows_the_position_and_the_eta(api: httpx.Client, srv: RunningServer) -> None:
    base = f"/studio/ws/{srv.subscription_id}/default/default/jobs"
    eta = job(api, srv, "q-2")["waiting"]["eta"]
    with studio_client(srv) as client:
        sign_in(client, srv.api_key)
        page = client.get(f"{base}/q-2")
        assert page.status_code == 200, page.text
        assert "Why it has not started" in page.text and "maximum of 1 node" in page.text, page.text
        assert 'Position <strong data-wait="position_text">2</strong>' in page.text, page.text
        assert "Estimated start" in page.text and f'datetime="{eta}"' in page.text, page.text
        assert "running jobs&#39; limits and history" in page.text or "running jobs' limits" in page.text
        listed = client.get(base, params={"compute": CLUSTER})
        assert listed.status_code == 200, listed.text
        assert listed.text.count('class="sub queue-place"') == len(QUEUED), listed.text
        assert "#1 · starts in " in listed.text and "#3 · starts in ~" in listed.text, listed.text


SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
props = dict(ml.jobs.get("q-3").properties)
print("RESULT " + json.dumps({"step": "get", "properties": props}), flush=True)
listed = {j.name: dict(j.properties) for j in ml.jobs.list() if j.name in ("q-3", "holder")}
print("RESULT " + json.dumps({"step": "list", "properties": listed}), flush=True)
"""


def test_the_sdk_keeps_the_wait_in_the_jobs_properties(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    sdk_python()
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=240)}
    props = steps["get"]["properties"]
    assert props["cloudlet.wait.reason"] == "cluster_at_max", props
    assert props["cloudlet.wait.position"] in ("3", "2"), props  # 2 once q-1 started (the next test)
    assert props["cloudlet.wait.eta"].endswith("Z") and int(props["cloudlet.wait.etaInSeconds"]) > 0, props
    assert "maximum of 1 node" in props["cloudlet.wait.message"], props
    listed = steps["list"]["properties"]
    assert listed["q-3"]["cloudlet.wait.position"] == props["cloudlet.wait.position"], listed
    assert not any(k.startswith("cloudlet.wait.") for k in listed["holder"]), listed  # it runs


def test_a_pipeline_step_waits_for_its_upstream_step(api: httpx.Client, srv: RunningServer) -> None:
    pipeline = {
        "type": "pipeline",
        "settings": {"default_compute": f"azureml:{CLUSTER}"},
        "jobs": {
            "make": {
                "command": "echo made > ${{outputs.o}}/f.txt",
                "environment": SKLEARN,
                "outputs": {"o": {"type": "uri_folder"}},
            },
            "use": {
                "command": "cat ${{inputs.d}}/f.txt",
                "environment": SKLEARN,
                "inputs": {"d": "${{parent.jobs.make.outputs.o}}"},
            },
        },
    }
    submit(api, srv, "piped", pipeline)
    try:
        parent = wait_until(lambda: (p := job(api, srv, "piped")).get("children") and p, 30, "the first step")
        assert parent["waiting_steps"] == {
            "use": {"code": "dependency", "message": "waits for make to complete"}
        }, parent
        [make] = parent["children"]
        waiting = job(api, srv, make["name"])["waiting"]  # the step itself queues behind q-1…q-3
        assert waiting["position"] == 4 and waiting["code"] == "cluster_at_max", waiting
    finally:
        api.post(f"{srv.ws_path}/jobs/piped/cancel")
        wait_job(api, srv, "piped", ("Canceled",), timeout=30)


SDK_PIPELINE_SCRIPT = r"""
import json
from azure.ai.ml import MLClient
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
names = sorted(j.name for j in ml.jobs.list())
piped = ml.jobs.get("piped")
steps = {key: str(node.component) for key, node in piped.jobs.items()}
components = {}
for key, component in steps.items():  # each step's anonymous component resolves, as on Azure
    name, _, version = component.partition(":")
    found = ml.components.get(name=name, version=version)
    components[key] = {
        "command": found.command,
        "inputs": {k: v.type for k, v in found.inputs.items()},
        "outputs": {k: v.type for k, v in found.outputs.items()},
        "environment": str(found.environment),
    }
result = {"names": names, "type": piped.type, "steps": steps, "components": components}
print("RESULT " + json.dumps(result), flush=True)
"""


def test_the_sdk_lists_and_gets_a_natively_submitted_inline_pipeline(
    srv: RunningServer, tmp_path: Path
) -> None:
    """The previous test's pipeline has inline command steps (a native YAML's, no component): the
    facade names each step's anonymous component, which the SDK needs to build a PipelineJob, and
    each resolves with ``components.get`` (registered when the pipeline was submitted)."""
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    [result] = run_sdk(SDK_PIPELINE_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=240)
    assert "piped" in result["names"] and result["type"] == "pipeline", result
    assert set(result["steps"]) == {"make", "use"}, result
    assert all(c.startswith("azureml_anonymous:") for c in result["steps"].values()), result
    assert result["steps"]["make"] != result["steps"]["use"], result
    # Registered at submission (services.jobs.pipelines.register_inline): components.get finds them.
    made, used = result["components"]["make"], result["components"]["use"]
    assert made["command"] == "echo made > ${{outputs.o}}/f.txt" and made["outputs"] == {"o": "uri_folder"}
    assert used["command"] == "cat ${{inputs.d}}/f.txt" and used["inputs"] == {"d": "uri_folder"}, used
    assert "sklearn-1.5" in made["environment"] and not made["inputs"] and not used["outputs"], result


def test_a_team_over_its_share_says_its_usage_and_share(api: httpx.Client, srv: RunningServer) -> None:
    """The holder's team may not borrow (borrow_limit 0): it holds the whole 4-core node against a
    2-core share, so its queued jobs wait on fair share, with the usage and the share in words."""
    pool = {"workspace": "default", "compute": CLUSTER, "share": 1}
    alpha = {"members": ["admin"], "shares": [{**pool, "borrow_limit": 0}]}
    assert api.put("/api/v1/teams/alpha", json=alpha).status_code == 201
    assert api.put("/api/v1/teams/beta", json={"shares": [pool]}).status_code == 201
    try:
        waiting = wait_until(
            lambda: (w := job(api, srv, "q-2")["waiting"])["code"] == "fair_share" and w,
            10,
            "the fair-share reason",
        )
        assert waiting["message"].startswith(
            "team alpha has used 100% of the pool lately against a share of 50%"
        ), waiting
        assert "holds 4 of its 2 cores and may not borrow more" in waiting["message"], waiting
        assert waiting["position"] == 2 and waiting["eta"], waiting
    finally:
        for team in ("alpha", "beta"):
            api.delete(f"/api/v1/teams/{team}")
    wait_until(lambda: job(api, srv, "q-2")["waiting"]["code"] == "cluster_at_max", 10, "no fair share")


def test_when_the_head_starts_the_others_move_up_and_their_etas_change(
    api: httpx.Client, srv: RunningServer
) -> None:
    before = {name: job(api, srv, name)["waiting"] for name in QUEUED[1:]}
    assert api.post(f"{srv.ws_path}/jobs/holder/cancel").status_code == 202
    wait_job(api, srv, "q-1", ("Preparing", "Running", "Completed"), timeout=60)
    after = {
        name: wait_until(
            lambda name=name: (
                (w := job(api, srv, name).get("waiting"))
                and w["position"] == before[name]["position"] - 1
                and w
            ),
            15,
            f"{name} to move up",
        )
        for name in QUEUED[1:]
    }
    # q-1 runs now (expected to end by its 600 s timeout): q-2 starts then, not after the holder too.
    for name in QUEUED[1:]:
        assert after[name]["as_of"] != before[name]["as_of"], (before[name], after[name])
        assert _eta(after[name]) < _eta(before[name]) - 60, (before[name], after[name])
