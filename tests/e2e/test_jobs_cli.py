"""Acceptance: ``cloudlet job …`` and the job-related ``cloudlet compute …`` commands as a user runs
them (a subprocess per command) against a real server with real node agents, using the example
files in ``examples/``. The HTTP API only sets scenes and checks what the CLI did.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.client import MLClient, command
from tests.conftest import RunningServer
from tests.jobs_helpers import job, log_text, nodes, served, submit, wait_job, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRAIN = EXAMPLES / "jobs" / "train"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "jobs-cli")


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        # No wrapping of stderr notes; no display (`--web` prints the link, opens no browser).
        env={**srv.cli_env(), "COLUMNS": "400", "DISPLAY": "", "WAYLAND_DISPLAY": ""},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result).stdout)


@pytest.fixture(scope="module")
def cpu_cluster(srv: RunningServer) -> str:
    created = ok_json(cli(srv, "compute", "create", "--file", str(EXAMPLES / "compute" / "cluster.yml")))
    assert (created["name"], created["provisioning_state"]) == ("cpu-cluster", "Succeeded"), created
    return "cpu-cluster"


def test_train_example_runs_downloads_and_resubmits_without_upload(
    srv: RunningServer, api: httpx.Client, cpu_cluster: str, tmp_path: Path
) -> None:
    streamed = ok(cli(srv, "job", "create", "--file", str(TRAIN / "job.yml"), "--stream"))
    match = re.search(r"job (\S+) submitted", streamed.stderr)
    assert match is not None, streamed.stderr
    name = match.group(1)
    # Code and the local uri_folder input were uploaded before submission.
    assert re.search(r"code \S*src: uploaded .* → codes/[0-9a-f]{64}", streamed.stderr), streamed.stderr
    assert re.search(r"data \S*data: uploaded .* → azureml://datastores/", streamed.stderr), streamed.stderr
    # The log was streamed: the script's own lines, then the summary.
    assert "read iris-sample.csv: 30 rows so far" in streamed.stdout, streamed.stdout
    assert re.search(r"training accuracy [01]\.\d{3} on 30 rows", streamed.stdout), streamed.stdout
    assert "Completed" in streamed.stdout.strip().splitlines()[-1], streamed.stdout

    shown = ok_json(cli(srv, "job", "show", "-n", name))
    assert shown["status"] == "Completed" and shown["compute"] == cpu_cluster, shown
    assert shown["inputs"]["learning_rate"] == 0.01, shown["inputs"]
    assert shown["inputs"]["training_data"]["path"].startswith("azureml://datastores/"), shown["inputs"]
    code = shown["code"]
    assert re.fullmatch(r"codes/[0-9a-f]{64}", code), code
    assert "lr=0.01" in log_text(api, srv, name)

    ok(cli(srv, "job", "download", "-n", name, "--output-name", "model", "-p", str(tmp_path)))
    model = json.loads((tmp_path / "named-outputs" / "model" / "model.json").read_text())
    assert model["kind"] == "softmax_regression" and model["learning_rate"] == 0.01, model
    assert model["classes"] == ["setosa", "versicolor", "virginica"]
    assert model["train_accuracy"] > 0.8, model

    # Resubmitting the same folder uploads nothing: the CLI says so, and the server already had it.
    again = ok(cli(srv, "job", "create", "--file", str(TRAIN / "job.yml")))
    assert re.search(r"code \S*src: unchanged, already on the server \(" + re.escape(code), again.stderr), (
        again.stderr
    )
    assert "data" in again.stderr and "uploaded" not in again.stderr, again.stderr
    second = json.loads(again.stdout)
    assert second["name"] != name and second["code"] == code, second
    assert api.head(f"{srv.ws_path}/{code}").status_code == 200
    assert wait_job(api, srv, second["name"], timeout=60)["status"] == "Completed"

    # The Python client reports the skipped upload too.
    with MLClient(home=srv.home) as client:
        client.jobs.create_or_update(
            command(command="python train.py --help > /dev/null", code=TRAIN / "src", compute=cpu_cluster)
        )
        assert client.jobs.last_upload_skipped is True

    # Nodes of the example cluster (idle 120 s) stay, idle, in list-nodes.
    listed = ok_json(cli(srv, "compute", "list-nodes", "-n", cpu_cluster))
    assert listed and {n["nodeState"] for n in listed} <= {"idle", "running"}, listed
    assert {n["nodeId"] for n in listed} == {n["nodeId"] for n in nodes(api, srv, cpu_cluster)}


def test_cli_cancel_stops_a_running_job(srv: RunningServer, api: httpx.Client, cpu_cluster: str) -> None:
    submit(api, srv, "cli-cancel", {"command": "echo started; sleep 60", "compute": f"azureml:{cpu_cluster}"})
    wait_until(lambda: log_text(api, srv, "cli-cancel") == "started\n", 40, "the job to start")
    ok_json(cli(srv, "job", "cancel", "-n", "cli-cancel"))
    done = wait_job(api, srv, "cli-cancel", timeout=10)
    assert done["status"] == "Canceled", done
    assert done["attempts"][0]["reasons"] == ["canceled"], done["attempts"]
    # Cancelling again is refused with the reason, as a non-zero exit.
    again = cli(srv, "job", "cancel", "-n", "cli-cancel")
    assert again.returncode != 0 and "already ended" in again.stdout + again.stderr, again


def test_cli_evict_requeues_the_low_priority_job(
    srv: RunningServer, api: httpx.Client, cpu_cluster: str
) -> None:
    ok_json(
        cli(
            srv,
            "compute",
            "create",
            "--file",
            str(EXAMPLES / "compute" / "cluster-low-priority.yml"),
            "--set",
            "idle_time_before_scale_down=2",
            "--set",
            "max_instances=1",
        )
    )
    submit(
        api,
        srv,
        "spot",
        {
            # attempt 1 runs until evicted; attempt 2 ends at once
            "command": 'echo "attempt $CLOUDLET_ATTEMPT"; if [ "$CLOUDLET_ATTEMPT" = 1 ]; then sleep 60; fi',
            "compute": "azureml:low-pri-cluster",
        },
    )
    wait_until(lambda: log_text(api, srv, "spot") == "attempt 1\n", 40, "attempt 1 to start")
    [node_id] = job(api, srv, "spot")["attempts"][0]["nodes"]
    evicted = ok_json(cli(srv, "compute", "evict", "-n", "low-pri-cluster", "--node", node_id))
    assert (evicted["nodeId"], evicted["nodeState"]) == (node_id, "preempted"), evicted
    done = wait_job(api, srv, "spot", timeout=60)
    assert done["status"] == "Completed" and [a["attempt"] for a in done["attempts"]] == [1, 2], done
    assert log_text(api, srv, "spot", attempt=2) == "attempt 2\n"
    # A dedicated node is not evicted (the example cluster keeps its nodes 120 s after a job).
    submit(api, srv, "warm-up", {"command": "true", "compute": f"azureml:{cpu_cluster}"})
    [dedicated] = wait_job(api, srv, "warm-up", timeout=40)["attempts"][0]["nodes"]
    refused = cli(srv, "compute", "evict", "-n", cpu_cluster, "--node", dedicated)
    assert refused.returncode != 0 and "NotLowPriority" in refused.stdout + refused.stderr, refused
    assert dedicated in {n["nodeId"] for n in nodes(api, srv, cpu_cluster)}


def test_a_script_in_azures_style_captures_names_with_query_and_tsv(
    srv: RunningServer, tmp_path: Path
) -> None:
    """``JOB=$(az ml job create -f job.yml --query name -o tsv --web)`` then ``az ml job show -n $JOB
    --query status -o tsv``, as Azure's scripts write them (flags after the verb, --web, tsv)."""
    spec = tmp_path / "job.yml"
    spec.write_text("command: echo from-a-script\ncompute: local\n")
    created = ok(cli(srv, "job", "create", "-f", str(spec), "--query", "name", "-o", "tsv", "--web"))
    name = created.stdout.strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]+", name), created.stdout
    page = f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/jobs/{name}?tab=overview"
    assert f"Studio: {page}\n" in created.stderr  # --web: the job's studio page (no display here)
    with srv.client() as api:
        assert wait_job(api, srv, name)["status"] == "Completed"
    shown = ok(cli(srv, "job", "show", "-n", name, "--query", "{n:name, s:status}", "--out", "tsv", "--web"))
    assert shown.stdout == f"{name}\tCompleted\n" and f"Studio: {page}\n" in shown.stderr
    refused = cli(srv, "job", "show", "-n", name, "--query", "[?")
    assert refused.returncode == 2 and "--query" in refused.stderr
