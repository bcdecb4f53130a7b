"""A job's studio page over HTTP (issue 27): it renders for a command job, a pipeline and a sweep;
an unknown job is the studio's 404 page; a reader of another workspace is refused; the live stream
sends a running job's new log lines and resumes from ``Last-Event-ID``."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudlet.studio.live import RECHECK_S
from cloudlet.studio.pages.job_page import TAIL_BYTES as JOB_TAIL_BYTES
from tests.conftest import RunningServer
from tests.instance_helpers import act, create_instance
from tests.integration.test_studio_sessions import new_user
from tests.jobs_helpers import served, submit, wait_job, wait_until
from tests.studio_http import sign_in, studio_client

PRINCIPALS = "/api/v1/principals"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-job-page")


def job_url(srv: RunningServer, name: str, rg: str = "default", ws: str = "default") -> str:
    return f"/studio/ws/{srv.subscription_id}/{rg}/{ws}/jobs/{name}"


LINK_QUERY = "?tab=overview"  # the link's query (azure-ai-ml appends "&tid=…" to it)


def events(response: httpx.Response) -> Iterator[tuple[str, str | None, Any]]:
    """The (event, id, data) of a server-sent event stream, as they arrive."""
    kind, ident, data = "message", None, ""
    for line in response.iter_lines():
        if line == "":
            if data:
                yield kind, ident, json.loads(data)
            kind, ident, data = "message", None, ""
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            data += line[6:]


def pipeline_doc() -> dict[str, Any]:
    def step(text: str, reads: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"command": f"echo {text} > ${{{{outputs.out}}}}/o", "outputs": {"out": None}}
        body["compute"] = "local"
        if reads:
            body["inputs"] = {"before": f"${{{{parent.jobs.{reads}.outputs.out}}}}"}
        return body

    return {"type": "pipeline", "jobs": {"prepare": step("a", None), "train": step("b", "prepare")}}


SWEEP = {
    "type": "sweep",
    "compute": "local",
    "trial": {"command": "echo trial ${{search_space.b}}"},
    "sampling_algorithm": "grid",
    "search_space": {"b": {"type": "choice", "values": [1, 2]}},
    "objective": {"goal": "minimize", "primary_metric": "m"},
    "limits": {"max_total_trials": 2},
}


def test_the_page_renders_for_command_pipeline_and_sweep_jobs(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "page-cmd", {"command": "echo hi", "compute": "local", "tags": {"team": "vision"}})
        submit(api, srv, "page-pipe", pipeline_doc())
        submit(api, srv, "page-sweep", SWEEP)
        for name in ("page-cmd", "page-pipe", "page-sweep"):
            wait_job(api, srv, name, timeout=120)
        sign_in(client, srv.api_key)
        page = client.get(job_url(srv, "page-cmd"))
        assert page.status_code == 200, page.text
        assert (
            "echo hi" in page.text and "vision" in page.text and 'aria-current="page">Overview' in page.text
        )
        for tab in ("outputs", "metrics"):
            shown = client.get(job_url(srv, "page-cmd"), params={"tab": tab})
            assert shown.status_code == 200, shown.text
        assert "user_logs/std_log.txt" in client.get(job_url(srv, "page-cmd"), params={"tab": "outputs"}).text
        log = client.get(job_url(srv, "page-cmd") + "/log")
        assert log.status_code == 200 and "hi" in log.text, log.text
        assert "attachment" in log.headers["content-disposition"]
        # Metric names: MLflow's key rule refuses markup at the door; the names it takes are JSON here.
        tracking = (
            f"/mlflow/v1.0/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
            "Microsoft.MachineLearningServices/workspaces/default/api/2.0/mlflow/runs/log-batch"
        )
        point = {"value": 1.5, "timestamp": 1, "step": 0}
        hostile = api.post(
            tracking, json={"run_id": "page-cmd", "metrics": [{"key": "<img src=x>", **point}]}
        )
        assert hostile.status_code == 400, hostile.text
        kept = api.post(
            tracking, json={"run_id": "page-cmd", "metrics": [{"key": "eval/f1: macro", **point}]}
        )
        assert kept.status_code == 200, kept.text
        charted = client.get(job_url(srv, "page-cmd") + "/metrics.json").json()
        assert charted["metrics"] == {"eval/f1: macro": {"page-cmd": [[0.0], [1.5]]}}, charted
        packed = client.get(job_url(srv, "page-pipe-prepare") + "/outputs/out.tar.gz")
        assert packed.status_code == 200 and packed.content[:2] == b"\x1f\x8b"
        assert client.get(job_url(srv, "page-pipe-prepare") + "/outputs/nope.tar.gz").status_code == 404
        graph = client.get(job_url(srv, "page-pipe"), params={"tab": "children"})
        assert graph.status_code == 200, graph.text
        assert 'data-key="train"' in graph.text and 'data-upstream="prepare"' in graph.text
        assert 'data-status="Completed"' in graph.text
        trials = client.get(job_url(srv, "page-sweep"), params={"tab": "children"})
        assert trials.status_code == 200, trials.text
        assert 'id="trials"' in trials.text and "page-sweep" in trials.text
        step = client.get(job_url(srv, "page-pipe-prepare"))
        assert step.status_code == 200 and "page-pipe" in step.text  # its parent, in the breadcrumb


def test_an_unknown_job_is_the_studios_404_and_another_workspaces_reader_is_refused(
    srv: RunningServer,
) -> None:
    with srv.client() as api, studio_client(srv) as admin, studio_client(srv) as outsider:
        submit(api, srv, "private-job", {"command": "true", "compute": "local"})
        other = f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/team/workspaces/other"
        assert api.put(other, json={}).status_code in (200, 201)
        key = new_user(api, srv, "other-reader", role=None)
        assigned = api.put(f"{other}/roleAssignments/other-reader", json={"role": "Reader"})
        assert assigned.status_code == 200, assigned.text
        sign_in(admin, srv.api_key)
        missing = admin.get(job_url(srv, "no-such-job"))
        assert missing.status_code == 404 and "Not found" in missing.text and "Sign out" in missing.text
        assert admin.get(job_url(srv, "no-such-job") + "/live").status_code == 404
        with studio_client(srv) as reader:  # a Reader of the job's workspace sees it all, read-only
            sign_in(reader, new_user(api, srv, "page-reader"))
            for tab in ("overview", "outputs", "metrics", "monitoring"):
                seen = reader.get(job_url(srv, "private-job"), params={"tab": tab})
                assert seen.status_code == 200, seen.text
                assert seen.text.count('method="post"') == 1  # sign-out alone: no write control
            monitored = reader.get(job_url(srv, "private-job") + "/monitoring.json")
            assert monitored.status_code == 200 and monitored.json()["job"] == "private-job", monitored.text
        sign_in(outsider, key)
        assert outsider.get(job_url(srv, "other-missing", "team", "other")).status_code == 404
        for path in ("", "/live", "/metrics.json", "/monitoring.json", "/log", "/artifacts.tar.gz"):
            refused = outsider.get(job_url(srv, "private-job") + path)
            assert refused.status_code == 404, (path, refused.status_code)
            assert "private-job" not in refused.text or "Not found" in refused.text


def test_a_long_log_is_shown_from_its_end(srv: RunningServer) -> None:
    long = "head -c 400000 /dev/zero | tr '\\0' x; echo; echo last-line"
    with srv.client() as api, studio_client(srv) as client:
        submit(api, srv, "long-log", {"command": long, "compute": "local"})
        assert wait_job(api, srv, "long-log", timeout=90)["status"] == "Completed"
        sign_in(client, srv.api_key)
        page = client.get(job_url(srv, "long-log"), params={"tab": "outputs"})
        found = re.search(r'data-stream="([^"]+)"', page.text)
        assert found is not None and "A long log" in page.text, page.text
        stream = html.unescape(found.group(1))
        offset = int(stream.rsplit("offset=", 1)[1])
        assert offset > 0
        text = ""
        with client.stream("GET", stream) as response:
            for kind, _, data in events(response):
                if kind == "log":
                    text += data["text"]
                if kind == "end":
                    break
        assert text.endswith("last-line\n") and len(text.encode()) == JOB_TAIL_BYTES, len(text)


def test_the_live_stream_sends_new_lines_and_resumes_from_last_event_id(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        command = "echo line-one; sleep 3; echo line-two"
        submit(api, srv, "streamed", {"command": command, "compute": "local"})
        sign_in(client, srv.api_key)
        stream = job_url(srv, "streamed") + "/live"
        params = {"file": "user_logs/std_log.txt"}
        resume_at = None
        text = ""
        with client.stream("GET", stream, params=params) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for kind, ident, data in events(response):
                if kind == "log":
                    text += data["text"]
                    resume_at = ident
                    if "line-one" in text:
                        break
        assert "line-one" in text and "line-two" not in text, text
        assert resume_at is not None and int(resume_at) == len(text.encode())
        later = ""
        seen: list[str] = []
        headers = {"Last-Event-ID": resume_at}
        with client.stream("GET", stream, params=params, headers=headers) as response:
            for kind, _, data in events(response):
                seen.append(kind)
                if kind == "log":
                    later += data["text"]
                if kind == "end":
                    break
        assert "line-two" in later and "line-one" not in later, later
        assert seen[0] == "status" and seen[-1] == "end", seen
        assert wait_job(api, srv, "streamed", timeout=60)["status"] == "Completed"


def test_a_queued_job_says_why_it_waits_and_where_it_is_in_the_queue(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as client:
        create_instance(api, srv, "stopped-ci", size="Standard_DS2_v2")
        act(api, srv, "stopped-ci", "stop")
        for name in ("held-1", "held-2"):
            submit(api, srv, name, {"command": "echo never", "compute": "azureml:stopped-ci"})
        sign_in(client, srv.api_key)
        page = client.get(job_url(srv, "held-2"))
        assert page.status_code == 200, page.text
        assert "Why it has not started" in page.text and "stopped" in page.text, page.text
        assert (
            'Position <strong data-wait="position_text">2</strong>' in page.text
            and "1 job ahead" in page.text
        ), page.text
        assert f'href="/studio/ws/{srv.subscription_id}/default/default/compute/stopped-ci"' in page.text
        for name in ("held-1", "held-2"):
            assert api.post(f"{srv.ws_path}/jobs/{name}/cancel").status_code == 202
        done = client.get(job_url(srv, "held-2"))
        assert "Why it has not started" not in done.text and "Canceled" in done.text


def test_a_removed_role_ends_an_open_stream(srv: RunningServer) -> None:
    with srv.client() as api, studio_client(srv) as reader:
        submit(api, srv, "watched", {"command": "sleep 120", "compute": "local"})
        sign_in(reader, new_user(api, srv, "stream-reader"))
        with reader.stream("GET", job_url(srv, "watched") + "/live") as response:
            assert response.status_code == 200
            kinds = events(response)
            assert next(kinds)[0] == "status"
            assert api.delete(f"{srv.ws_path}/roleAssignments/stream-reader").status_code == 204
            started = time.monotonic()
            ended = next(data for kind, _, data in kinds if kind == "end")
            assert ended == {"reason": "no longer allowed"}
            assert time.monotonic() - started < RECHECK_S + 5
        assert api.post(f"{srv.ws_path}/jobs/watched/cancel").status_code == 202


def test_every_job_view_links_its_studio_page_which_a_signed_out_browser_reaches_after_sign_in(
    srv: RunningServer,
) -> None:
    """``services.Studio`` (what the SDK's ``studio_url`` reads): the job's studio page, absolute,
    in the job's own workspace, for a pipeline's steps and a sweep's trials too; followed signed
    out, it goes through sign-in and lands on that page."""
    team = srv.workspace_path("linked", "research")
    with srv.client() as api:
        assert api.put(team, json={}).status_code in (200, 201)
        submit(api, srv, "link-pipe", pipeline_doc())
        submit(api, srv, "link-sweep", SWEEP)
        made = api.put(f"{team}/jobs/link-cmd", json={"command": "echo linked", "compute": "local"})
        assert made.status_code == 201, made.text
        assert made.json()["services"]["Studio"]["endpoint"].endswith(
            job_url(srv, "link-cmd", "research", "linked") + LINK_QUERY
        )

        def children(name: str) -> list[str] | None:
            kids = api.get(f"{srv.ws_path}/jobs/{name}").json().get("children") or []
            return [k["name"] for k in kids] or None

        shown = [(team, "link-cmd", "research", "linked")]
        for parent in ("link-pipe", "link-sweep"):
            kids = wait_until(lambda parent=parent: children(parent), 60, f"{parent}'s children")
            shown += [(srv.ws_path, name, "default", "default") for name in [parent, *kids]]
        for ws_path, name, rg, ws in shown:
            view = api.get(f"{ws_path}/jobs/{name}").json()
            page = srv.endpoint + job_url(srv, name, rg, ws) + LINK_QUERY
            assert view["services"] == {"Studio": {"endpoint": page, "job_service_type": "Studio"}}, view
        listed = api.get(f"{team}/jobs").json()["value"]
        assert [j["services"]["Studio"]["endpoint"] for j in listed] == [
            srv.endpoint + job_url(srv, "link-cmd", "research", "linked") + LINK_QUERY
        ]
        page_url = made.json()["services"]["Studio"]["endpoint"]

    path = page_url.removeprefix(srv.endpoint)
    with studio_client(srv) as browser:
        went = browser.get(page_url)
        assert went.status_code == 303, went.text
        form = browser.get(went.headers["location"])
        assert form.status_code == 200 and f'name="next" value="{html.escape(path)}"' in form.text
        signed = browser.post("/studio/signin", data={"api_key": srv.api_key, "next": path})
        assert signed.status_code == 303 and signed.headers["location"] == path
        landed = browser.get(signed.headers["location"])
        assert landed.status_code == 200 and "link-cmd" in landed.text and "echo linked" in landed.text
        # As the SDK hands it out (``studio_url`` appends the token's tenant): the same page.
        with_tenant = browser.get(f"{page_url}&tid=00000000-0000-0000-0000-000000000001")
        assert with_tenant.status_code == 200 and "echo linked" in with_tenant.text
