"""Acceptance: sweep jobs as a user runs them — ``cloudlet job create --file sweep.yml`` — against a
real server with real node agents; each trial is a real process that logs its metric with the
real MLflow client (``examples/jobs/sweep``). The HTTP API only reads what happened.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, job, nodes, served, wait_job, wait_until

SWEEP = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "sweep"
CLUSTER = "cpu-cluster"  # the example's compute


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "sweeps")


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 2}
        create_compute(client, srv, CLUSTER, {**body, "idle_time_before_scale_down": 60})
        yield client


def cli(srv: RunningServer, *args: str) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return json.loads(result.stdout)


def trials(api: httpx.Client, srv: RunningServer, sweep: str) -> list[dict[str, Any]]:
    response = api.get(f"{srv.ws_path}/jobs", params={"parent": sweep})
    assert response.status_code == 200, response.text
    return list(response.json()["value"])


def test_random_sweep_scales_the_cluster_stops_a_losing_trial_and_reports_the_best(
    srv: RunningServer, api: httpx.Client
) -> None:
    assert nodes(api, srv, CLUSTER) == []  # min_instances 0: nothing runs yet
    created = cli(srv, "job", "create", "--file", str(SWEEP / "sweep.yml"), "--name", "toy-sweep")
    assert created["name"] == "toy-sweep" and created["status"] in ("Queued", "Preparing", "Running")
    # Two trials at a time on a cluster that starts at 0 nodes: it scales to its max of 2.
    wait_until(lambda: len(nodes(api, srv, CLUSTER)) == 2, 90, "the cluster to scale to 2 nodes")
    running = wait_until(
        lambda: [t for t in trials(api, srv, "toy-sweep") if t["status"] == "Running"], 60, "a running trial"
    )
    assert len(running) <= 2
    done = wait_job(api, srv, "toy-sweep", timeout=300)
    assert done["status"] == "Completed", done

    kids = trials(api, srv, "toy-sweep")
    assert len(kids) == 8, [k["name"] for k in kids]
    stopped = [k for k in kids if k["status"] == "Canceled"]
    assert stopped, [(k["name"], k["status"]) for k in kids]  # bandit stopped at least one loser
    shown = cli(srv, "job", "show", "-n", "toy-sweep")
    by_key = {t["key"]: t for t in shown["sweep"]["trials"]}
    reports = [by_key[kid["name"].rsplit("-", 1)[1]]["reports"] for kid in stopped]
    # Judged once it had reported delay_evaluation (2) values; one may be stopped just as it logs
    # its last epoch, but the losers stopped early did not run their 6 epochs.
    assert all(2 <= n <= 6 for n in reports) and min(reports) < 6, reports
    for kid in stopped:  # each says why it was stopped (its own numbers), after its runs ended
        assert kid["error"]["message"].startswith("bandit policy at interval"), kid
    best = shown["sweep"]["best_trial"]
    completed = [t for t in by_key.values() if t["status"] == "Completed"]
    assert best["metric"] == min(t["metric"] for t in completed), (best, completed)
    assert set(best["params"]) == {"lr", "optimizer"}
    assert f"best trial {best['key']} ({best['name']}): loss=" in done["status_message"], done
    # Each trial got its values as literal inputs, within the search space.
    for trial in by_key.values():
        assert trial["params"]["optimizer"] in ("sgd", "adam") and 0.001 <= trial["params"]["lr"] <= 1.0
        assert job(api, srv, trial["name"])["compute"] == CLUSTER


def test_bayesian_sweep_completes(srv: RunningServer, api: httpx.Client) -> None:
    created = cli(srv, "job", "create", "--file", str(SWEEP / "sweep-bayesian.yml"), "--name", "toy-bayes")
    assert created["name"] == "toy-bayes"
    done = wait_job(api, srv, "toy-bayes", timeout=300)
    assert done["status"] == "Completed", done
    shown = cli(srv, "job", "show", "-n", "toy-bayes")
    assert shown["sweep"]["sampling_algorithm"] == "bayesian"
    assert len(shown["sweep"]["trials"]) == 8
    assert all(t["status"] == "Completed" and t["reports"] == 3 for t in shown["sweep"]["trials"])
    assert shown["sweep"]["best_trial"]["metric"] is not None


def test_a_sweep_whose_trials_log_nothing_fails_naming_the_metric(
    srv: RunningServer, api: httpx.Client
) -> None:
    body = {
        "type": "sweep",
        "trial": {"command": "echo lr=${{search_space.lr}}"},
        "compute": "local",
        "sampling_algorithm": "grid",
        "search_space": {"lr": {"type": "choice", "values": [0.1, 0.2]}},
        "objective": {"goal": "maximize", "primary_metric": "accuracy"},
    }
    response = api.put(f"{srv.ws_path}/jobs/silent", json=body)
    assert response.status_code in (200, 201), response.text
    done = wait_job(api, srv, "silent", timeout=120)
    assert done["status"] == "Failed", done
    assert "mlflow.log_metric('accuracy', value)" in done["status_message"], done
    assert sorted(t["status"] for t in trials(api, srv, "silent")) == ["Completed", "Completed"]


def test_cancel_stops_the_trials(srv: RunningServer, api: httpx.Client) -> None:
    body = {
        "type": "sweep",
        "trial": {"command": "echo started; sleep 60 # ${{search_space.x}}"},
        "compute": f"azureml:{CLUSTER}",
        "sampling_algorithm": "random",
        "search_space": {"x": {"type": "randint", "upper": 100}},
        "objective": {"goal": "maximize", "primary_metric": "m"},
        "limits": {"max_total_trials": 4, "max_concurrent_trials": 2},
    }
    assert api.put(f"{srv.ws_path}/jobs/long-sweep", json=body).status_code in (200, 201)
    wait_until(
        lambda: len([t for t in trials(api, srv, "long-sweep") if t["status"] == "Running"]) == 2,
        90,
        "two running trials",
    )
    assert api.post(f"{srv.ws_path}/jobs/long-sweep/cancel").status_code in (200, 202)
    done = wait_job(api, srv, "long-sweep", timeout=20)
    assert done["status"] == "Canceled", done
    assert {t["status"] for t in trials(api, srv, "long-sweep")} == {"Canceled"}


def test_create_stream_shows_each_trial_as_it_starts_and_ends(srv: RunningServer, tmp_path: Path) -> None:
    """A sweep's own log is empty while its trials run: ``--stream`` follows the trials instead."""
    doc = {
        "type": "sweep",
        "trial": {
            "code": str(SWEEP / "src"),
            "command": "python train.py --lr ${{search_space.lr}} --optimizer sgd"
            " --epochs 2 --epoch-seconds 0.1",
        },
        "compute": "local",
        "sampling_algorithm": "grid",
        "search_space": {"lr": {"type": "choice", "values": [0.1, 0.2]}},
        "objective": {"goal": "minimize", "primary_metric": "loss"},
        "limits": {"max_total_trials": 2, "max_concurrent_trials": 1},
    }
    spec = tmp_path / "sweep.yml"
    spec.write_text(json.dumps(doc))  # JSON is YAML
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cloudlet",
            "job",
            "create",
            "--file",
            str(spec),
            "-n",
            "streamed",
            "--stream",
        ],
        env={**srv.cli_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    lines = result.stdout.splitlines()
    for key in ("0", "1"):
        started = [
            i for i, line in enumerate(lines) if line.startswith(f"trial {key} (job streamed-{key}) started")
        ]
        ended = [
            i
            for i, line in enumerate(lines)
            if line.startswith(f"trial {key} (job streamed-{key}) Completed")
        ]
        assert len(started) == 1 and len(ended) == 1 and started[0] < ended[0], result.stdout
        assert "lr=0.1" in lines[started[0]] or "lr=0.2" in lines[started[0]], lines[started[0]]
        assert "loss=" in lines[ended[0]], lines[ended[0]]
    assert any(line.startswith("Job streamed Completed") for line in lines), result.stdout
    assert any(line.startswith("best trial ") for line in lines), result.stdout
    assert f"Studio: {srv.endpoint}/studio/ws/" in result.stderr  # the sweep's studio page
