"""Acceptance (issue 10, defect 3): ``kill -9`` of the server under the mixed load, three times,
restarting it each time on the same port and home.

While 100 readers and 10 submitters keep going, the server is killed (SIGKILL) and restarted
three times. Then every job submitted (answered 201, or whose answer was lost in a crash and that
the client submitted again) completes exactly once: each job appends its name and attempt to a
ledger in a datastore folder it is given read-write (jobs run sandboxed: that folder is the only
place outside their own they can write), and every name is there once, at attempt 1. The node agents outlive
each crash and are adopted by the next server (same nodes, same processes, no new node made), and
once the cluster scales down nothing of the installation is left running.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from cloudlet.services.core.storage import empty_tar
from tests.conftest import RunningServer
from tests.integration.test_crashes import restart_on_same_port
from tests.jobs_helpers import (
    agent_pids,
    compute,
    create_compute,
    installation_id,
    job,
    nodes,
    processes_with_env,
    reap_installation,
    wait_until,
)
from tests.load_helpers import Background, Load

KILLS = 3
SERVED_JOBS = 20  # submissions accepted between crashes and after the last one
SIZE = "Standard_DS3_v2"
LEDGER = {
    "type": "uri_folder",
    "path": "azureml://datastores/workspaceblobstore/paths/ledger",
    "mode": "rw_mount",
}
_EMPTY_TAR = empty_tar()


def _settle(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, object]) -> None:
    """A submission whose answer was lost: submit it again, as a client would. 201 (it was not
    made) and 409 (it was, before the crash) both leave exactly one job of that name."""
    response = api.put(f"{srv.ws_path}/jobs/{name}", json=body)
    assert response.status_code in (201, 409), (name, response.status_code, response.text)


def test_server_killed_three_times_under_load_every_job_runs_exactly_once_and_nodes_are_adopted(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv = server_factory()
    installation = installation_id(srv)
    servers = [srv]
    try:
        with srv.client() as api:
            empty = api.put(f"{srv.ws_path}/datastores/workspaceblobstore/paths/ledger", content=_EMPTY_TAR)
            assert empty.status_code == 201, empty.text
            spec = {"type": "amlcompute", "size": SIZE, "min_instances": 0, "max_instances": 2}
            create_compute(api, srv, "crashy", {**spec, "idle_time_before_scale_down": 10})
            warm = {"command": "true", "compute": "azureml:crashy"}
            for i in range(2):  # two jobs at once: the cluster scales to 2 nodes
                assert api.put(f"{srv.ws_path}/jobs/warm-{i}", json=warm).status_code == 201
            wait_until(lambda: len(nodes(api, srv, "crashy")) == 2, 60, "the cluster's 2 nodes")
            serving = {n["nodeId"] for n in nodes(api, srv, "crashy")}
            wait_until(lambda: all(len(agent_pids(installation, n)) == 1 for n in serving), 30, "2 agents")
            agents = {n: agent_pids(installation, n) for n in serving}

        def body(name: str) -> dict[str, object]:
            command = 'echo "$CLOUDLET_JOB $CLOUDLET_ATTEMPT" >> ${{inputs.ledger}}/ledger.txt; sleep 0.1'
            return {"command": command, "compute": "azureml:crashy", "inputs": {"ledger": LEDGER}}

        ws = srv.ws_path
        load = Load(
            reads=(
                ("compute show", f"{ws}/computes/crashy"),
                ("job list", f"{ws}/jobs?compute=crashy&status=Running"),
                ("job show", f"{ws}/jobs/warm-0"),
            ),
            submit_path=f"{ws}/jobs/",
            job_body=body,
            prefix="crash",
            submit_every_s=1.0,
            failure_pause_s=0.25,
        )
        accepted_at_restart: list[int] = []
        with Background(srv, load, duration_s=600) as background:

            def serves_again(since: int) -> None:
                """Wait for the load to be served: SERVED_JOBS more submissions accepted (a
                restart takes 2 s on a quiet machine and 12 s on a loaded one)."""
                enough = since + SERVED_JOBS
                wait_until(lambda: len(background.report.accepted) >= enough, 120, "jobs accepted")

            for _ in range(KILLS):
                serves_again(len(background.report.accepted))
                servers[-1].kill()  # SIGKILL, mid-load: no shutdown of any kind
                servers.append(restart_on_same_port(servers[-1]))
                accepted_at_restart.append(len(background.report.accepted))
            serves_again(accepted_at_restart[-1])
            background.stop()
        report = background.join()
        last = servers[-1]
        assert installation_id(last) == installation
        # The load was served between the crashes and after the last one.
        counts = [*accepted_at_restart, len(report.accepted)]
        assert all(b > a for a, b in itertools.pairwise(counts)), counts
        assert report.failures, "the crashes should have cut some requests off"

        with last.client() as api:
            for name in report.unanswered:
                _settle(api, last, name, body(name))
            submitted = [*report.accepted, *report.unanswered]
            done: dict[str, dict[str, Any]] = {}
            for name in submitted:
                done[name] = wait_until(
                    lambda n=name: (j := job(api, last, n))["status"] in ("Completed", "Failed") and j,
                    90,
                    f"{name} to end",
                )
            bad = {n: (j["status"], j["attempt"]) for n, j in done.items() if j["status"] != "Completed"}
            assert not bad, f"jobs that did not complete: {bad}"
            ledger = next(last.home.rglob("datastores/workspaceblobstore/ledger/ledger.txt"))
            lines = Counter(ledger.read_text().splitlines())
            ran = Counter(line.split()[0] for line in lines.elements())
            assert set(ran) == set(submitted), (set(submitted) - set(ran), set(ran) - set(submitted))
            twice = {name: n for name, n in ran.items() if n != 1}
            assert not twice, f"jobs that ran more than once: {twice}"
            assert all(line.endswith(" 1") for line in lines), [x for x in lines if not x.endswith(" 1")]
            assert all(done[n]["attempt"] == 1 and len(done[n]["attempts"]) == 1 for n in submitted)
            # Adopted, not replaced: the same nodes served every job, by the same agent processes.
            used = {node for j in done.values() for node in j["attempts"][0]["nodes"]}
            assert used <= serving, (used, serving)
            for node, before in agents.items():
                assert agent_pids(installation, node) in ([], before), f"node {node} got a second agent"
            # The load over, the cluster scales down and nothing of the installation is left.
            wait_until(
                lambda: (
                    compute(api, last, "crashy")["current_node_count"] == 0 and not nodes(api, last, "crashy")
                ),
                40,
                "the cluster to scale to 0",
            )
        wait_until(
            lambda: not processes_with_env("CLOUDLET_INSTALLATION", installation),
            15,
            "every process of the installation to exit",
        )
        print(
            f"\n{len(submitted)} jobs ({len(report.unanswered)} resubmitted after a lost answer), "
            f"{len(report.failures)} requests cut off by {KILLS} crashes, "
            f"{sum(report.answered.values())} answered"
        )
    finally:
        for server in servers:
            server.kill()
        reap_installation(installation)
