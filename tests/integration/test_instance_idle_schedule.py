"""Acceptance: idle shutdown, start/stop schedules and a full OS disk (issue 4, items 5 and 6).

A real server with real agents and JupyterLab; time is shortened through settings only:
``CLOUDLET_IDLE_SECONDS_PER_MINUTE`` makes each configured idle minute that many seconds (the
15-minute minimum Azure allows becomes 9 s), the OS disk is 64 MiB (a real loop-mounted ext4
image), the agent reports every second and the watch ticks every half second. Schedules are
real recurrences anchored a few seconds ahead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import Kernel, act, compute_url, create_instance, live_nodes, operate
from tests.jobs_helpers import agent_pids, served, wait_passes, wait_until

SECONDS_PER_MINUTE = 0.6
IDLE_S = 15 * SECONDS_PER_MINUTE
DS_FAMILY = "standardDSv2Family"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {
        "CLOUDLET_IDLE_SECONDS_PER_MINUTE": str(SECONDS_PER_MINUTE),
        "CLOUDLET_INSTANCE_OS_DISK_GB": "0.0625",
        "CLOUDLET_INSTANCE_REPORT_S": "1",
        "CLOUDLET_INSTANCE_TICK_S": "0.5",
    }
    yield from served(tmp_path_factory, "idle", extra_env=env)  # reaped: agents and OS disks


def show(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    body: dict[str, Any] = api.get(compute_url(srv, name)).json()
    return body


def state_of(api: httpx.Client, srv: RunningServer, name: str) -> str:
    return str(show(api, srv, name)["state"])


def operations_of(api: httpx.Client, srv: RunningServer, name: str) -> list[dict[str, Any]]:
    ops = api.get(f"{srv.ws_path}/operations").json()["value"]
    return [op for op in ops if op["target_name"] == name]


def patch(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any]) -> None:
    operate(api, srv, api.patch(compute_url(srv, name), json=body))


def schedule_in(action: str, seconds: float) -> dict[str, Any]:
    """A recurrence every minute whose first occurrence is ``seconds`` from now (UTC)."""
    first = (datetime.now(UTC) + timedelta(seconds=seconds)).replace(tzinfo=None)
    trigger = {
        "type": "recurrence",
        "frequency": "minute",
        "interval": 1,
        "start_time": first.isoformat(timespec="seconds"),
        "time_zone": "UTC",
    }
    return {"compute_start_stop": [{"action": action, "trigger": trigger}]}


def usage_of(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    lines = api.get(f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/usages").json()["value"]
    family = next(line for line in lines if line["name"] == DS_FAMILY)
    holder: dict[str, Any] = next(h for h in family["holders"] if h["compute"] == name)
    return holder


def delete_settled(api: httpx.Client, srv: RunningServer, name: str) -> None:
    """Delete once no operation (an idle shutdown, say) is under way."""
    deadline = time.monotonic() + 120
    while True:
        response = api.delete(compute_url(srv, name))
        if response.status_code != 409 or time.monotonic() > deadline:
            operate(api, srv, response)
            return
        time.sleep(0.5)


def os_disk(srv: RunningServer, name: str) -> Path:
    [disk] = (srv.home / "data" / "workspaces").glob(f"*/instances/{name}/os")
    return disk


# -- idle shutdown ------------------------------------------------------------------------------
def test_an_idle_instance_stops_keeps_its_quota_and_a_schedule_starts_it(
    api: httpx.Client, srv: RunningServer
) -> None:
    shown = create_instance(api, srv, "idle1", idle_time_before_shutdown_minutes=15)
    if shown["state"] == "Running":
        explanation = shown["idle_shutdown"]["explanation"]
        assert explanation.startswith("idle ") and f"of {IDLE_S:.0f} s; stops at" in explanation, explanation
    cores = usage_of(api, srv, "idle1")["cores"]
    wait_until(lambda: state_of(api, srv, "idle1") == "Stopped", 90, "idle shutdown to stop idle1")
    [stop] = [op for op in operations_of(api, srv, "idle1") if op["kind"] == "stop"]
    assert stop["created_by"] == "idle-shutdown" and stop["status"] == "Succeeded"
    assert live_nodes(api, srv, "idle1") == []
    # Stopped keeps the quota (I9): list-usage still counts the instance's cores.
    assert usage_of(api, srv, "idle1") == {
        "compute": "idle1",
        "workspace": "default",
        "cores": cores,
        "state": "Stopped",
    }
    # ... and costs only its OS disk (T10): no compute charge, storage still billed.
    cost = show(api, srv, "idle1")["cost"]
    assert cost["compute_per_hour"] == 0 and cost["storage_per_hour"] > 0, cost

    patch(api, srv, "idle1", {"schedules": schedule_in("start", 4)})
    assert show(api, srv, "idle1")["next_scheduled_action"]["action"] == "start"
    wait_until(lambda: state_of(api, srv, "idle1") in ("Starting", "Running"), 30, "the scheduled start")
    start = next(op for op in operations_of(api, srv, "idle1") if op["kind"] == "start")
    assert start["created_by"] == "schedule"
    delete_settled(api, srv, "idle1")


def test_a_busy_kernel_holds_the_instance_and_a_schedule_stops_it(
    api: httpx.Client, srv: RunningServer
) -> None:
    create_instance(api, srv, "busy1")
    kernel = Kernel(srv, "busy1", notebook="analysis.ipynb")
    try:
        kernel.send("import time\ntime.sleep(120)")
        patch(api, srv, "busy1", {"idle_time_before_shutdown_minutes": 15})
        expected = "not idle: kernel busy in analysis.ipynb"
        wait_until(
            lambda: show(api, srv, "busy1")["idle_shutdown"]["explanation"] == expected, 30, "the busy kernel"
        )
        # Past the idle timeout, counted from any moment since it started (time must pass here),
        # then two ticks of the watch that began after it.
        time.sleep(IDLE_S)
        wait_passes(api, "instance-watch")
        shown = show(api, srv, "busy1")
        assert shown["state"] == "Running", shown
        assert shown["idle_shutdown"]["explanation"] == expected
        assert shown["status_message"] == expected
        assert [op["kind"] for op in operations_of(api, srv, "busy1") if op["kind"] == "stop"] == []

        patch(api, srv, "busy1", {"schedules": schedule_in("stop", 4)})
        upcoming = show(api, srv, "busy1")["next_scheduled_action"]
        assert upcoming["action"] == "stop" and "next: stop at" in show(api, srv, "busy1")["status_message"]
        wait_until(lambda: state_of(api, srv, "busy1") == "Stopped", 60, "the scheduled stop")
        [stop] = [op for op in operations_of(api, srv, "busy1") if op["kind"] == "stop"]
        assert stop["created_by"] == "schedule"
    finally:
        with contextlib.suppress(Exception):
            kernel.ws.close()
        kernel.http.close()
    delete_settled(api, srv, "busy1")


# -- a full OS disk -------------------------------------------------------------------------------
def test_a_full_os_disk_makes_it_unusable_and_restart_recovers(api: httpx.Client, srv: RunningServer) -> None:
    create_instance(api, srv, "full1")
    disk = os_disk(srv, "full1")
    assert os.path.ismount(disk), "the OS disk is a size-limited filesystem of its own"
    [node] = live_nodes(api, srv, "full1")
    temp = srv.home / "nodes" / node["nodeId"] / "mnt"
    (temp / "scratch.bin").write_bytes(b"x" * 1024)

    with pytest.raises(OSError), (disk / "fill.bin").open("wb") as handle:  # ENOSPC: the limit is real
        for _ in range(200):
            handle.write(b"\0" * (1 << 20))
            handle.flush()
            os.fsync(handle.fileno())
    wait_until(lambda: state_of(api, srv, "full1") == "Unusable", 30, "full1 to become Unusable")
    shown = show(api, srv, "full1")
    reason = shown["unusable_reason"]
    assert reason.startswith("OS disk full (") and reason.endswith("free space, then restart"), reason
    assert shown["idle_shutdown"]["explanation"] == f"idle shutdown and schedules paused: {reason}"
    assert api.post(f"{compute_url(srv, 'full1')}/start").status_code == 409  # restart is the way

    (disk / "fill.bin").unlink()
    act(api, srv, "full1", "restart")
    shown = show(api, srv, "full1")
    assert shown["state"] == "Running" and shown["unusable_reason"] is None
    [started] = live_nodes(api, srv, "full1")
    assert started["nodeId"] != node["nodeId"]
    assert os.listdir(srv.home / "nodes" / started["nodeId"] / "mnt") == []  # a fresh temp disk
    wait_passes(api, "instance-watch")  # it stays Running now that there is room
    assert state_of(api, srv, "full1") == "Running"
    delete_settled(api, srv, "full1")
    assert not disk.exists() and not os.path.ismount(disk)


# -- a lost instance agent --------------------------------------------------------------------------
def test_an_instance_whose_agent_died_is_unusable_until_restarted(
    api: httpx.Client, srv: RunningServer
) -> None:
    create_instance(api, srv, "lost1")
    [node] = live_nodes(api, srv, "lost1")
    for pid in agent_pids(srv.installation, node["nodeId"]):
        os.kill(pid, signal.SIGKILL)  # the machine "dies": no more heartbeats
    wait_until(lambda: state_of(api, srv, "lost1") == "Unusable", 60, "lost1 to become Unusable")
    reason = show(api, srv, "lost1")["unusable_reason"]
    assert "agent stopped reporting" in reason and reason.endswith("restart the instance"), reason
    act(api, srv, "lost1", "restart")
    assert show(api, srv, "lost1")["state"] == "Running"
    assert show(api, srv, "lost1")["unusable_reason"] is None
    delete_settled(api, srv, "lost1")
