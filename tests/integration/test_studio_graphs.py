"""A pipeline's full-page graph and a sweep's charts over HTTP (issue 28, item 4): the graph's
edges are named by the ports they join, a rerun's reused steps name the job they reused, a sweep's
trial stopped by its early-termination policy says so (and why) in the studio and in ``job show``;
a job of another kind has no such page; every hostile string comes back escaped."""

from __future__ import annotations

import html
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.integration.test_studio_sessions import new_user
from tests.jobs_helpers import served, submit, wait_job
from tests.studio_http import events, sign_in, studio_client

HOSTILE = "<img src=x onerror=console.error(1)></script><script>console.error(2)</script>"
# The train step's output is the score step's input; the pipeline's own input and output are nodes.
EDGES = [
    "inputs.greeting → prepare.text",
    "prepare.clean → train.data",
    "train.model_output → score.model_input",
    "score.scores → outputs.final_scores",
]
# Each trial logs its loss 20 times (lr × a falling curve); the bandit policy stops lr 5 once another
# trial reported as often. lr 5 then waits to be stopped: on a loaded machine the policy may judge
# it only after its last report, and a trial that ended by itself would not show what pages mark.
TRIAL = (
    'python -c "import mlflow, time; lr = ${{search_space.lr}}; '
    "[(mlflow.log_metric('loss', lr * (30 - i) / 30, step=i), time.sleep(0.3)) for i in range(20)]; "
    'time.sleep(600 if lr > 1 else 0)"'
)


def pipeline_doc(display: str = "scoring pipeline") -> dict[str, Any]:
    step = {"compute": "local"}
    return {
        "type": "pipeline",
        "display_name": display,
        "inputs": {"greeting": {"type": "string", "default": "hello"}},
        "outputs": {"final_scores": {"type": "uri_folder"}},
        "jobs": {
            "prepare": {
                **step,
                "display_name": display,
                "command": "echo ${{inputs.text}} > ${{outputs.clean}}/a",
                "inputs": {"text": "${{parent.inputs.greeting}}"},
                "outputs": {"clean": None},
            },
            "train": {
                **step,
                "command": "cat ${{inputs.data}}/a > ${{outputs.model_output}}/model",
                "inputs": {"data": "${{parent.jobs.prepare.outputs.clean}}"},
                "outputs": {"model_output": None},
            },
            "score": {
                **step,
                "command": "wc -c ${{inputs.model_input}}/model > ${{outputs.scores}}/s",
                "inputs": {"model_input": "${{parent.jobs.train.outputs.model_output}}"},
                "outputs": {"scores": "${{parent.outputs.final_scores}}"},
            },
        },
    }


def sweep_doc(note: str = "plain") -> dict[str, Any]:
    return {
        "type": "sweep",
        "compute": "local",
        "display_name": note,
        "trial": {"command": TRIAL},
        "sampling_algorithm": "grid",
        # lr 5 last: a trial is judged against the others that reached the same interval.
        "search_space": {
            "lr": {"type": "choice", "values": [0.1, 0.11, 5.0]},
            "note": {"type": "choice", "values": [note]},
        },
        "objective": {"goal": "minimize", "primary_metric": "loss"},
        "early_termination": {
            "type": "bandit",
            "slack_factor": 0.2,
            "evaluation_interval": 1,
            "delay_evaluation": 2,
        },
        "limits": {"max_total_trials": 3, "max_concurrent_trials": 3},
    }


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-graphs")


def job_url(srv: RunningServer, name: str) -> str:
    return f"/studio/ws/{srv.subscription_id}/default/default/jobs/{name}"


def test_the_graph_names_its_edges_and_a_rerun_marks_its_reused_steps(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "graph-one", pipeline_doc(HOSTILE))
        assert wait_job(api, srv, "graph-one", timeout=120)["status"] == "Completed"
        submit(api, srv, "graph-two", pipeline_doc(HOSTILE))
        assert wait_job(api, srv, "graph-two", timeout=120)["status"] == "Completed"
        sign_in(client, srv.api_key)
        first = client.get(job_url(srv, "graph-one") + "/graph.json")
        assert first.status_code == 200, first.text
        body = first.json()
        assert [e["label"] for e in body["edges"]] == EDGES, body["edges"]
        assert (
            body["edges"][0]["source"] == "input:greeting"
            and body["edges"][-1]["target"] == "output:final_scores"
        )
        assert body["inputs"] == ["greeting"] and body["outputs"] == ["final_scores"] and body["final"]
        steps = {s["key"]: s for s in body["steps"]}
        assert steps["train"]["inputs"] == {"data": "prepare.clean"}
        assert steps["train"]["outputs"] == {"model_output": "uri_folder"}
        assert steps["prepare"]["display_name"] == HOSTILE and steps["train"]["component"] == "inline command"
        assert steps["score"]["logs_url"] == job_url(srv, "graph-one-score") + "?tab=outputs"
        assert all(s["status"] == "Completed" and s["reused_from"] is None for s in steps.values())
        # The rerun: nothing changed, so each step took the first run's outputs.
        again = {s["key"]: s for s in client.get(job_url(srv, "graph-two") + "/graph.json").json()["steps"]}
        assert {k: s["reused_from"] for k, s in again.items()} == {
            "prepare": "graph-one-prepare",
            "train": "graph-one-train",
            "score": "graph-one-score",
        }
        assert again["train"]["reused_url"] == job_url(srv, "graph-one-train")
        page = client.get(job_url(srv, "graph-two") + "/graph")
        assert page.status_code == 200, page.text
        assert html.escape(HOSTILE, quote=False) in page.text and HOSTILE not in page.text
        assert "Reused" in page.text and f'href="{job_url(srv, "graph-one-train")}"' in page.text
        for label in EDGES:
            assert html.escape(label, quote=False) in page.text
        tab = client.get(job_url(srv, "graph-one"), params={"tab": "children"})
        assert f'href="{job_url(srv, "graph-one")}/graph"' in tab.text  # "Open full page"


def test_a_job_of_another_kind_has_no_graph_or_trials_and_an_outsider_sees_none(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client, studio_client(srv) as outsider:
        submit(api, srv, "plain-job", {"command": "true", "compute": "local"})
        submit(api, srv, "closed-pipe", pipeline_doc())
        sign_in(client, srv.api_key)
        for suffix in ("/graph", "/graph.json", "/trials.json", "/graph/live", "/trials/live"):
            assert client.get(job_url(srv, "plain-job") + suffix).status_code == 404, suffix
        assert client.get(job_url(srv, "nope") + "/graph").status_code == 404
        with studio_client(srv) as reader:  # a Reader of the workspace sees the graph: read-only
            sign_in(reader, new_user(api, srv, "graph-reader"))
            seen = reader.get(job_url(srv, "closed-pipe") + "/graph")
            assert seen.status_code == 200 and seen.text.count('method="post"') == 1  # sign-out alone
        sign_in(outsider, new_user(api, srv, "no-role", role=None))
        for suffix in ("/graph", "/graph.json", "/graph/live"):
            refused = outsider.get(job_url(srv, "closed-pipe") + suffix)
            assert refused.status_code == 404 and "prepare" not in refused.text, suffix


def test_a_trial_stopped_by_the_policy_is_marked_early_terminated(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "stopping-sweep", sweep_doc(HOSTILE))
        done = wait_job(api, srv, "stopping-sweep", timeout=240)
        assert done["status"] == "Completed", done
        shown = {t["params"]["lr"]: t for t in done["sweep"]["trials"]}  # job show's view
        assert shown[5.0]["early_terminated"] and shown[5.0]["status"] == "Canceled", shown
        assert shown[5.0]["termination_reason"].startswith("bandit policy at interval"), shown[5.0]
        assert not shown[0.1]["early_terminated"] and shown[0.1]["termination_reason"] is None
        sign_in(client, srv.api_key)
        data = client.get(job_url(srv, "stopping-sweep") + "/trials.json").json()
        assert data["metric"] == "loss" and data["goal"] == "minimize" and data["final"]
        assert data["axes"] == [
            {"name": "lr", "kind": "category", "values": [0.1, 0.11, 5.0]},
            {"name": "note", "kind": "category", "values": [HOSTILE]},
        ]
        by_lr = {t["params"]["lr"]: t for t in data["trials"]}
        assert by_lr[5.0]["early_terminated"] and not by_lr[0.11]["early_terminated"]
        assert data["best"] == by_lr[0.1]["key"] and by_lr[0.1]["metric"] is not None
        assert [t["index"] for t in data["trials"]] == sorted(t["index"] for t in data["trials"])
        tab = client.get(job_url(srv, "stopping-sweep"), params={"tab": "children"})
        assert tab.text.count("Stopped early") == 1 and "stopped-early" in tab.text
        assert 'id="sweep-charts"' in tab.text and HOSTILE not in tab.text


def stream_documents(client: httpx.Client, url: str, kind: str) -> list[dict[str, Any]]:
    """Each KIND document a live stream sends, until its ``end``."""
    documents: list[dict[str, Any]] = []
    with client.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event, _, data in events(response):
            if event == "end":
                return documents
            assert event == kind, (event, data)
            documents.append(json.loads(data))
    raise AssertionError(f"the stream ended without its end event: {len(documents)} documents")


def test_a_pipelines_graph_arrives_as_its_steps_change_and_the_stream_ends(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        slow = pipeline_doc()  # its first step takes long enough for the stream to see it run
        prepare = slow["jobs"]["prepare"]
        prepare["command"] = "sleep 4; " + prepare["command"]
        submit(api, srv, "graph-live", slow)
        sign_in(client, srv.api_key)
        shown = stream_documents(client, job_url(srv, "graph-live") + "/graph/live", "graph")
        assert len(shown) >= 2 and all(a != b for a, b in itertools.pairwise(shown))  # changes only
        assert not shown[0]["final"] and [s["key"] for s in shown[0]["steps"]] == [
            "prepare",
            "train",
            "score",
        ]
        assert shown[-1]["final"] and shown[-1]["status"] == "Completed", shown[-1]
        assert {s["status"] for s in shown[-1]["steps"]} == {"Completed"}
        assert sorted(e["label"] for e in shown[-1]["edges"]) == sorted(EDGES)


def test_a_sweeps_trials_arrive_as_they_report_and_the_stream_ends(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "trials-live", sweep_doc("live"))
        sign_in(client, srv.api_key)
        shown = stream_documents(client, job_url(srv, "trials-live") + "/trials/live", "trials")
        assert len(shown) >= 2 and not shown[0]["final"]
        metrics = [sum(t["metric"] is not None for t in doc["trials"]) for doc in shown]
        assert metrics[-1] == 3 and min(metrics) < 3, metrics  # the trials' metrics came as they reported
        assert shown[-1]["final"] and shown[-1]["best"] is not None
        assert shown[-1] == client.get(job_url(srv, "trials-live") + "/trials.json").json()
