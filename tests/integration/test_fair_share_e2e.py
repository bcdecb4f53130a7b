"""Acceptance, issue 31, end to end on a real server over HTTP with real node agents (local provider):

- two teams with 50 %/50 % of a 4-node cluster (made through the teams API); team A fills it; team B
  submits; within one reconcile interval (+ the minimum run time, set low here) B runs on its half,
  A's preempted jobs resume from their checkpoints (their step count goes on), and every job
  completes exactly once;
- a high-priority job jumps a queue of low ones;
- a waiting job's estimate moves later while another team, which fair share puts first, keeps
  submitting.

The jobs count steps into ``$CLOUDLET_CHECKPOINT_DIR/count`` (written atomically: a preempted
process may die between two steps) and start from the count found there. The server's reconcile
interval and the guard's minimum run time are set low by configuration; the tests wait for states,
never sleep and then assert.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, job, log_text, nodes, served, submit, wait_job, wait_until

TEAMS = "/api/v1/teams"
PRINCIPALS = "/api/v1/principals"
DS3 = "Standard_DS3_v2"  # 4 vCPUs: a one-node job holds 4 of the cluster's 16 cores
PASS_S = 0.5  # the clusters' reconcile interval (CLOUDLET_CLUSTER_PASS_S)
MIN_RUN_S = 3.0  # the preemption guard's minimum run time (CLOUDLET_PREEMPT_MIN_RUN_S)
STEPS = 60  # A's jobs: 60 steps of 0.25 s, so a preemption lands mid-run
ENV = {
    "CLOUDLET_CLUSTER_PASS_S": str(PASS_S),
    "CLOUDLET_PREEMPT_MIN_RUN_S": str(MIN_RUN_S),
    "CLOUDLET_FAIR_SHARE_HALF_LIFE_S": "3600",
}


def counting(steps: int, step_s: float = 0.25) -> str:
    """A job that resumes from its checkpoint: it prints where it starts and where it ends."""
    return (
        'f="$CLOUDLET_CHECKPOINT_DIR/count"; n=$(cat "$f" 2>/dev/null || echo 0); n=${n:-0}; '
        'echo "start at $n"; '
        f'while [ "$n" -lt {steps} ]; do sleep {step_s}; n=$((n+1)); '
        'echo "$n" > "$f.tmp" && mv "$f.tmp" "$f"; done; '
        'echo "done at $n"'
    )


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "fair_share", extra_env=ENV)


def user(api: httpx.Client, srv: RunningServer, name: str) -> httpx.Client:
    """A user with a key and the Contributor role on the default workspace: their client."""
    assert api.post(PRINCIPALS, json={"name": name}).status_code == 201
    key = api.post(f"{PRINCIPALS}/{name}/keys")
    assert key.status_code == 201, key.text
    role = api.put(f"{srv.ws_path}/roleAssignments/{name}", json={"role": "Contributor"})
    assert role.status_code == 200, role.text
    return srv.client(key.json()["api_key"])


def team(api: httpx.Client, name: str, members: list[str], cluster: str) -> None:
    body = {"members": members, "shares": [{"workspace": "default", "compute": cluster, "share": 50}]}
    made = api.put(f"{TEAMS}/{name}", json=body)
    assert made.status_code in (200, 201), made.text


def full_cluster(api: httpx.Client, srv: RunningServer, name: str, count: int) -> None:
    """A cluster of COUNT nodes, all up and idle (min = max)."""
    body = {"type": "amlcompute", "size": DS3, "min_instances": count, "max_instances": count}
    create_compute(api, srv, name, body)
    wait_until(
        lambda: [n["state"] for n in nodes(api, srv, name)] == ["idle"] * count,
        120,
        f"{count} idle nodes on {name}",
    )


def statuses(api: httpx.Client, srv: RunningServer, names: list[str]) -> dict[str, str]:
    return {name: job(api, srv, name)["status"] for name in names}


def job_events(api: httpx.Client, srv: RunningServer, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    since = 0
    while True:
        page = api.get(f"{srv.ws_path}/events", params={"since": since, "type": "job"})
        assert page.status_code == 200, page.text
        body = page.json()
        events = body.get("value") or body.get("events") or []
        found += [e for e in events if e["name"] == name]
        if not events:
            return found
        since = events[-1]["seq"]


def test_team_b_gets_its_half_and_team_a_resumes_from_checkpoints(
    api: httpx.Client, srv: RunningServer
) -> None:
    cluster = "halves"
    full_cluster(api, srv, cluster, 4)
    a, b = user(api, srv, "fs-a"), user(api, srv, "fs-b")
    team(api, "fs-team-a", ["fs-a"], cluster)
    team(api, "fs-team-b", ["fs-b"], cluster)

    a_jobs = [f"fs-a-{i}" for i in range(4)]
    for name in a_jobs:
        submit(a, srv, name, {"command": counting(STEPS), "compute": f"azureml:{cluster}"})
    wait_until(lambda: set(statuses(api, srv, a_jobs).values()) == {"Running"}, 60, "A to fill the cluster")

    b_jobs = [f"fs-b-{i}" for i in range(2)]
    submitted = time.time()
    for name in b_jobs:
        submit(b, srv, name, {"command": counting(8), "compute": f"azureml:{cluster}"})
    # B runs on its half: A's two borrowed jobs are preempted once they have run MIN_RUN_S, within
    # a reconcile interval, and stopped with the agent's grace (SIGTERM, 1 s, kill).
    wait_until(
        lambda: all(s in ("Running", "Completed") for s in statuses(api, srv, b_jobs).values()),
        MIN_RUN_S + PASS_S + 20,
        "B's jobs to run",
    )
    b_running_after = time.time() - submitted
    preempted = [n for n in a_jobs if job(api, srv, n)["status"] in ("Queued", "Preparing")]
    assert len(preempted) == 2, statuses(api, srv, a_jobs)

    done = {name: wait_job(api, srv, name, timeout=120) for name in a_jobs + b_jobs}
    assert {name: j["status"] for name, j in done.items()} == dict.fromkeys(a_jobs + b_jobs, "Completed")

    for name in a_jobs:
        shown = done[name]
        attempts = len(shown["attempts"])
        texts = [log_text(api, srv, name, attempt=k) for k in range(1, attempts + 1)]
        # One final completion: only the last attempt reaches the end.
        assert [t.count(f"done at {STEPS}") for t in texts] == [0] * (attempts - 1) + [1], texts
        if name in preempted:
            assert attempts == 2, shown["attempts"]
            started = int(texts[1].split("start at ", 1)[1].split()[0])
            assert 0 < started < STEPS, texts  # it resumed from its checkpoint, not from 0
            assert texts[0].startswith("start at 0"), texts
        else:
            assert attempts == 1, shown["attempts"]
        completed = [e for e in job_events(api, srv, name) if e["to_state"] == "Completed"]
        assert len(completed) == 1, completed
    for name in preempted:
        moved = [e for e in job_events(api, srv, name) if e["to_state"] == "Preempted"]
        assert len(moved) == 1, moved
        assert "preempted to give team fs-team-b its share" in moved[0]["detail"]["message"], moved
    shown_compute = api.get(f"{srv.ws_path}/computes/{cluster}").json()
    assert shown_compute["preemptions"] == "preemptions in the last hour: 2 of 60", shown_compute
    table = subprocess.run(
        [sys.executable, "-m", "cloudlet", "compute", "show", "-n", cluster],
        env={**srv.cli_env(), "CLOUDLET_OUTPUT": "table"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "preemptions in the last hour: 2 of 60" in table.stdout, table.stdout + table.stderr
    print(f"B ran {b_running_after:.1f} s after its submission (guard minimum run {MIN_RUN_S} s)")


def test_a_high_priority_job_jumps_a_queue_of_low_ones(api: httpx.Client, srv: RunningServer) -> None:
    cluster = "one-node"
    full_cluster(api, srv, cluster, 1)
    low = [f"prio-low-{i}" for i in range(4)]
    body = {"command": "sleep 1", "compute": f"azureml:{cluster}", "queue_settings": {"priority": "low"}}
    for name in low:
        submit(api, srv, name, body)
    wait_job(api, srv, low[0], statuses=("Running", "Completed"), timeout=60)
    high = {**body, "queue_settings": {"priority": "high"}}
    submit(api, srv, "prio-high", high)
    ended = {name: wait_job(api, srv, name, timeout=120) for name in [*low, "prio-high"]}
    assert {j["status"] for j in ended.values()} == {"Completed"}
    came = ended["prio-high"]["creation_context"]["created_at"]
    waiting = [ended[name] for name in low if ended[name]["start_time"] > came]
    assert waiting, "some low job must still have waited when the high one came"
    assert all(ended["prio-high"]["start_time"] <= j["start_time"] for j in waiting), ended


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_a_waiting_jobs_eta_moves_later_as_another_team_keeps_submitting(
    api: httpx.Client, srv: RunningServer
) -> None:
    """The server stretches a waiting job's estimate for the later arrivals that will pass it
    (``wait_estimate.stretched``, the simulator's rule). Team C holds the one node and has a job
    waiting; team D (no usage: a higher fair-share factor) submits two jobs and cancels them, so
    none is in the queue ahead — only its rate of arrivals is. With no finished job on the cluster
    each asks for the node for the default hour: a third of the pool over the 3 h window each, two
    thirds in all, which stretches C's wait 1 / (1 − 2/3) = 3 times."""
    cluster = "arrivals"
    full_cluster(api, srv, cluster, 1)
    c, d = user(api, srv, "fs-c"), user(api, srv, "fs-d")
    team(api, "fs-team-c", ["fs-c"], cluster)
    team(api, "fs-team-d", ["fs-d"], cluster)
    compute_ref = f"azureml:{cluster}"
    submit(c, srv, "fs-c-hold", {"command": "sleep 300", "compute": compute_ref, "limits": {"timeout": 300}})
    wait_job(api, srv, "fs-c-hold", ("Running",), timeout=60)
    submit(c, srv, "fs-c-wait", {"command": "echo waited", "compute": compute_ref})
    # Nothing finished here: the holder is expected to run a minute more, or as long again as it
    # has run past that (wait_estimate.expected_remaining), and the waiting job to start then.
    before = wait_until(
        lambda: (w := job(api, srv, "fs-c-wait").get("waiting")) and w.get("eta") and w, 15, "an estimate"
    )
    held = time.time() - _ts(job(api, srv, "fs-c-hold")["start_time"])
    assert before["eta_in_s"] <= max(60.0, held) + 1, before  # a slow machine: as long again
    for name in ("fs-d-0", "fs-d-1"):
        submit(d, srv, name, {"command": "echo never", "compute": compute_ref})
        assert d.post(f"{srv.ws_path}/jobs/{name}/cancel").status_code == 202
        wait_job(api, srv, name, ("Canceled",), timeout=30)
    arrived = time.time()  # a snapshot read after both arrivals (as_of in whole seconds; ≤ 4 s apart)
    after = wait_until(
        lambda: _ts((w := job(api, srv, "fs-c-wait")["waiting"])["as_of"]) >= arrived + 1 and w,
        15,
        "a fresh estimate",
    )
    assert after["position"] == 1, after  # D's jobs are not in the queue: only their arrival rate
    held = time.time() - _ts(job(api, srv, "fs-c-hold")["start_time"])
    assert 2.5 * 60 <= after["eta_in_s"] <= 3 * max(60.0, held) + 5, (before, after)
    assert _ts(after["eta"]) - _ts(before["eta"]) >= 100, (before, after)
    for name in ("fs-c-hold", "fs-c-wait"):
        api.post(f"{srv.ws_path}/jobs/{name}/cancel")
