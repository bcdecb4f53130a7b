"""A stopped server leaves nothing running for ever (issue 10, defect 7).

After SIGTERM the control plane is gone; its agents keep their work through a short outage (a
restart within the grace adopts them: ``test_crashes.py``), but once it has been unreachable for
the grace time each agent stops its processes, unmounts what its node mounted and exits. Real
server, agents, a running job, a compute instance with JupyterLab and its loop-mounted OS disk.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from pathlib import Path

from tests.conftest import RunningServer
from tests.instance_helpers import create_instance
from tests.jobs_helpers import (
    create_compute,
    job,
    processes_with_env,
    reaped,
    submit,
    wait_until,
)

GRACE_S = 3.0


def _mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mountinfo") as mounts:
        return any(line.split()[4] == target for line in mounts)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_agents_stop_everything_and_exit_after_the_grace(
    server_factory: Callable[..., RunningServer],
) -> None:
    srv: RunningServer = server_factory(
        extra_env={"CLOUDLET_AGENT_ORPHAN_GRACE_S": str(GRACE_S), "CLOUDLET_INSTANCE_OS_DISK_GB": "0.0625"}
    )
    with reaped(srv) as installation, srv.client() as api:
        create_compute(
            api, srv, "grace", {"type": "amlcompute", "size": "Standard_DS3_v2", "max_instances": 1}
        )
        submit(api, srv, "long", {"command": "sleep 300", "compute": "azureml:grace"})
        wait_until(lambda: job(api, srv, "long")["status"] == "Running", 90, "the job to run")
        shown = create_instance(api, srv, "grace-ci")
        disk = next(srv.home.rglob("instances/*/os"))
        assert _mounted(disk), "the instance's OS disk is a real mount"
        nodes = api.get(f"{srv.ws_path}/computes/grace-ci/nodes").json()["nodes"]
        assert nodes, shown
        jupyter_port = int(wait_until(lambda: _apps_port(srv, installation), 30, "JupyterLab's port"))
        assert _listening(jupyter_port)
        assert processes_with_env("CLOUDLET_INSTALLATION", installation)

        srv.kill(signal.SIGTERM)

        wait_until(
            lambda: not processes_with_env("CLOUDLET_INSTALLATION", installation),
            GRACE_S + 30,
            "every agent, job and app process of the stopped server to exit",
        )
        # The sandbox's last process can outlive, by a moment, the readable environment the wait
        # above looks for: the port closing is the event (bounded), as the unmount is.
        wait_until(lambda: not _listening(jupyter_port), 10, "JupyterLab's port to close")
        wait_until(lambda: not _mounted(disk), 10, "the OS disk to be unmounted")


def _apps_port(srv: RunningServer, installation: str) -> int | None:
    """JupyterLab's port, from the instance's app process command line."""
    from tests.jobs_helpers import cmdlines_with_env

    for argv in cmdlines_with_env("CLOUDLET_INSTALLATION", installation):
        for arg in argv:
            if arg.startswith("--ServerApp.port="):
                return int(arg.split("=", 1)[1])
    return None
