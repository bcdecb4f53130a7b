"""Acceptance (issue 10, C2): a job and an instance terminal cannot become the server.

A real server whose local provider runs every node's user processes in a bubblewrap sandbox as an
unprivileged user. A probe (the same Python script, run as a job on one node while another job
holds a second node, and in an instance's kernel) tries to read what would make it the server:
``$CLOUDLET_HOME/credentials``, the SQLite database, another node's directory, another workspace's
datastore, the agent's environment (``/proc/<agent pid>/environ``, and every process for
``CLOUDLET_NODE_TOKEN``). Each is denied; in the same run it reads its own input and writes its own
output (so the probe is known to work). An instance's terminal, opened through the control plane's
proxy, is root inside its sandbox with ``enable_root_access: true`` and a plain user with
``false``, and a root-owned host file it can see stays unreadable either way. Nothing is mocked.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import RunningServer
from tests.instance_helpers import Kernel, app_url, create_instance, delete_instance
from tests.jobs_helpers import (
    agent_pids,
    create_compute,
    job,
    log_text,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

NO_BWRAP = "bubblewrap (bwrap) is not installed: run scripts/setup.sh (apt-get install bubblewrap)"
if shutil.which("bwrap") is None:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI must run the isolation tests: {NO_BWRAP}")
    print(f"\n!!! SKIPPING isolation tests: {NO_BWRAP} !!!\n")
    pytestmark = pytest.mark.skip(reason=NO_BWRAP)

CLUSTER = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 2,
    "max_instances": 2,
    "idle_time_before_scale_down": 120,
}
SANDBOX_UID = 65534
# Run as a job (python -c "$PROBE" IN OUT) and in a kernel: one JSON line of what it could do.
PROBE = r"""
import errno, json, os, pathlib, sys

def attempt(path):
    try:
        if os.path.isdir(path):
            return "READ " + ",".join(sorted(os.listdir(path))[:5])
        with open(path, "rb") as handle:
            return "READ " + handle.read(80).decode(errors="replace")
    except OSError as exc:
        return "denied " + errno.errorcode.get(exc.errno, str(exc.errno))

def probe(targets, inputs=None, outputs=None, listings=()):
    result = {name: attempt(path) for name, path in targets.items()}
    leaks = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                environ = pathlib.Path("/proc", pid, "environ").read_bytes()
            except OSError:
                continue
            names = {entry.partition(b"=")[0] for entry in environ.split(b"\0")}
            if names & {b"CLOUDLET_NODE_TOKEN", b"CLOUDLET_APP_TOKEN"}:
                leaks.append(pid)
    result["processes_with_a_token"] = leaks
    secret_names = ("CLOUDLET_NODE_TOKEN", "CLOUDLET_APP_TOKEN")
    result["tokens_in_own_env"] = [k for k in secret_names if k in os.environ]
    result["uid"] = os.getuid()
    # Folders above its own binds exist only as empty scaffolding: what is in them is not shown.
    result["listings"] = {p: attempt(p) for p in listings}
    if inputs:
        result["input"] = pathlib.Path(inputs, "hello.txt").read_text()
    if outputs:
        pathlib.Path(outputs, "result.txt").write_text("written by the job")
        result["output"] = "written"
    return result

if __name__ == "__main__":
    targets = json.loads(os.environ["PROBE_TARGETS"])
    listings = json.loads(os.environ.get("PROBE_LISTINGS") or "[]")
    print("PROBE " + json.dumps(probe(targets, sys.argv[1], sys.argv[2], listings)))
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "isolation")


def workspace_dir(srv: RunningServer, name: str) -> Path:
    with sqlite3.connect(f"file:{srv.home / 'cloudlet.db'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT id FROM workspaces WHERE name = ?", (name,)).fetchone()
    assert row, f"no workspace {name}"
    return srv.home / "data" / "workspaces" / str(row[0])


@pytest.fixture(scope="module")
def secrets(api: httpx.Client, srv: RunningServer) -> dict[str, str]:
    """Host paths nothing sandboxed may read, beside the server's own files."""
    made = api.put(srv.workspace_path("elsewhere"), json={"location": "local"})
    assert made.status_code in (200, 201), made.text
    other = workspace_dir(srv, "elsewhere") / "datastores" / "workspaceblobstore" / "theirs"
    other.mkdir(parents=True, exist_ok=True)
    (other / "data.csv").write_text("another workspace's data\n")
    unlisted = workspace_dir(srv, "default") / "datastores" / "workspaceblobstore" / "not-given"
    unlisted.mkdir(parents=True, exist_ok=True)
    (unlisted / "data.csv").write_text("a path no job was given\n")
    return {
        "credentials": str(srv.home / "credentials"),
        "database": str(srv.home / "cloudlet.db"),
        "another_workspace": str(other / "data.csv"),
        "unlisted_datastore_path": str(unlisted / "data.csv"),
    }


def probe_result(text: str) -> dict[str, Any]:
    line = next((line for line in text.splitlines() if line.startswith("PROBE ")), None)
    assert line is not None, text
    result: dict[str, Any] = json.loads(line[len("PROBE ") :])
    return result


def assert_all_denied(result: dict[str, Any], targets: dict[str, str]) -> None:
    for name in targets:
        assert str(result[name]).startswith("denied"), (name, targets[name], result[name])
    assert result["processes_with_a_token"] == [] and result["tokens_in_own_env"] == [], result


# -- jobs ---------------------------------------------------------------------------------------
def test_a_job_cannot_read_the_server_other_nodes_or_workspaces_but_has_its_own_data(
    api: httpx.Client, srv: RunningServer, secrets: dict[str, str]
) -> None:
    assert os.stat(srv.home).st_mode & 0o777 == 0o700
    for name in ("credentials", "database"):
        assert os.stat(secrets[name]).st_mode & 0o777 == 0o600, name
    create_compute(api, srv, "iso", CLUSTER)
    wait_until(
        lambda: len([n for n in nodes(api, srv, "iso") if n["state"] == "idle"]) == 2, 60, "2 idle nodes"
    )

    # A job of another user holds one node: its working directory is what the probe will look for.
    victim = "victim-" + uuid.uuid4().hex[:6]
    submit(
        api,
        srv,
        victim,
        {"command": "echo cwd=$PWD; echo theirs > mine.txt; sleep 120", "compute": "azureml:iso"},
    )
    wait_until(lambda: "cwd=" in log_text(api, srv, victim), 30, "the victim job to start")
    victim_cwd = log_text(api, srv, victim).split("cwd=", 1)[1].split()[0]
    [victim_node] = job(api, srv, victim)["attempts"][0]["nodes"]
    agents = {n["nodeId"]: agent_pids(srv.installation, n["nodeId"]) for n in nodes(api, srv, "iso")}
    assert all(len(pids) == 1 for pids in agents.values()), agents

    inputs = workspace_dir(srv, "default") / "datastores" / "workspaceblobstore" / "probe-in"
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "hello.txt").write_text("hello from my input\n")
    targets = {
        **secrets,
        "other_job_file": f"{victim_cwd}/mine.txt",
        "other_node_dir": str(srv.home / "nodes" / victim_node),
        **{f"agent_environ_{node}": f"/proc/{pids[0]}/environ" for node, pids in agents.items()},
    }
    name = "probe-" + uuid.uuid4().hex[:6]
    body = {
        "command": 'python -c "$PROBE" ${{inputs.data}} ${{outputs.result}}',
        "compute": "azureml:iso",
        "environment_variables": {
            "PROBE": PROBE,
            "PROBE_TARGETS": json.dumps(targets),
            "PROBE_LISTINGS": json.dumps([str(srv.home), str(srv.home / "nodes")]),
        },
        "inputs": {
            "data": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/probe-in"}
        },
        "outputs": {"result": {"type": "uri_folder"}},
    }
    submit(api, srv, name, body)
    done = wait_job(api, srv, name, timeout=60)
    text = log_text(api, srv, name)
    assert done["status"] == "Completed", text
    assert done["attempts"][0]["nodes"] != [victim_node]
    result = probe_result(text)
    assert_all_denied(result, targets)
    assert result["uid"] == SANDBOX_UID
    [own_node] = done["attempts"][0]["nodes"]
    assert result["listings"] == {
        str(srv.home): "READ data,nodes",
        str(srv.home / "nodes"): f"READ {own_node}",
    }
    # The positive control, in the same process: its own input, read; its own output, written.
    assert result["input"] == "hello from my input\n" and result["output"] == "written"
    output = workspace_dir(srv, "default") / "datastores" / "workspaceblobstore" / "azureml" / name / "result"
    assert (output / "result.txt").read_text() == "written by the job"
    assert os.stat(output / "result.txt").st_uid == SANDBOX_UID  # the job's user, not root
    assert api.post(f"{srv.ws_path}/jobs/{victim}/cancel").status_code in (200, 202)
    wait_job(api, srv, victim, timeout=30)


def test_a_job_cannot_write_its_inputs_or_the_system(api: httpx.Client, srv: RunningServer) -> None:
    inputs = workspace_dir(srv, "default") / "datastores" / "workspaceblobstore" / "ro-in"
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "keep.txt").write_text("keep\n")
    script = (
        'for p in "$IN/keep.txt" /usr/bin/evil /etc/evil; do '
        'if echo x >> "$p" 2>/dev/null; then echo "WROTE $p"; else echo "refused $p"; fi; done'
    )
    name = "ro-" + uuid.uuid4().hex[:6]
    body = {
        "command": f"IN=${{{{inputs.data}}}}; {script}",
        "compute": "azureml:iso",
        "inputs": {
            "data": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/ro-in"}
        },
    }
    submit(api, srv, name, body)
    assert wait_job(api, srv, name, timeout=60)["status"] == "Completed"
    text = log_text(api, srv, name)
    assert "WROTE" not in text and text.count("refused") == 3, text
    assert (inputs / "keep.txt").read_text() == "keep\n"


def test_a_link_a_job_plants_in_a_datastore_does_not_lead_the_server_out(
    api: httpx.Client, srv: RunningServer
) -> None:
    """A job may change what it mounts read-write, links included; the server, which reads
    datastores as root to serve downloads, must not follow such a link out of them."""
    target = "plain-" + uuid.uuid4().hex[:6]
    submit(api, srv, target, {"command": "true", "compute": "azureml:iso", "outputs": {"nodes": {}}})
    assert wait_job(api, srv, target, timeout=60)["status"] == "Completed"
    planter = "planter-" + uuid.uuid4().hex[:6]
    az = {
        "type": "uri_folder",
        "path": "azureml://datastores/workspaceblobstore/paths/azureml",
        "mode": "rw_mount",
    }
    command = f'mv "$AZ/{target}" "$AZ/{target}.moved" && ln -s {srv.home} "$AZ/{target}" && echo planted'
    body = {"command": f"AZ=${{{{inputs.az}}}}; {command}", "compute": "azureml:iso", "inputs": {"az": az}}
    submit(api, srv, planter, body)
    done = wait_job(api, srv, planter, timeout=60)
    assert done["status"] == "Completed" and "planted" in log_text(api, srv, planter), log_text(
        api, srv, planter
    )
    # The output's folder now leads to the server's home (…/nodes: every node's directory); the
    # server packs it without following the link, so nothing of that comes back.
    answer = api.get(f"{srv.ws_path}/jobs/{target}/outputs/nodes")
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as archive:
        assert archive.getnames() == [], archive.getnames()


def test_a_link_planted_where_a_jobs_output_goes_fails_that_job_instead_of_mounting_it(
    api: httpx.Client, srv: RunningServer
) -> None:
    """The agent mounts an output by walking to it without following a user's link: had it bound
    the path as named, the next job would have had the server's nodes/ folder read-write."""
    victim = "next-" + uuid.uuid4().hex[:6]
    planter = "plant-" + uuid.uuid4().hex[:6]
    az = {
        "type": "uri_folder",
        "path": "azureml://datastores/workspaceblobstore/paths/azureml",
        "mode": "rw_mount",
    }
    body = {
        "command": f'ln -s {srv.home} "${{{{inputs.az}}}}/{victim}"',
        "compute": "azureml:iso",
        "inputs": {"az": az},
    }
    submit(api, srv, planter, body)
    assert wait_job(api, srv, planter, timeout=60)["status"] == "Completed", log_text(api, srv, planter)
    submit(
        api,
        srv,
        victim,
        {"command": "ls ${{outputs.nodes}}", "compute": "azureml:iso", "outputs": {"nodes": {}}},
    )
    done = wait_job(api, srv, victim, timeout=60)
    text = log_text(api, srv, victim)
    assert done["status"] == "Failed", text
    assert "run failed to start" in text and "a symlink made by uid 65534 is on the way" in text, text
    assert not any(n["nodeId"] in text for n in nodes(api, srv, "iso")), text  # no node folder listed


# -- instance terminals -------------------------------------------------------------------------
def terminal(srv: RunningServer, name: str, command: str, timeout: float = 60) -> str:
    """Run ``command`` in a new JupyterLab terminal of the instance, through the proxy; return its
    output up to the end marker the command is made to print."""
    headers = {"Authorization": f"Bearer {srv.api_key}"}
    made = httpx.post(app_url(srv, name, "api/terminals"), headers=headers, timeout=30)
    assert made.status_code == 200, made.text
    term = made.json()["name"]
    url = app_url(srv, name, f"terminals/websocket/{term}").replace("http://", "ws://", 1)
    out = ""
    with connect(url, additional_headers=headers, open_timeout=30) as ws:
        # The marker is computed by the shell, so the echo of the typed line does not match it.
        ws.send(json.dumps(["stdin", f"{command}; echo END-$((6 * 7))\r"]))
        deadline = time.monotonic() + timeout
        while "END-42" not in out:
            left = deadline - time.monotonic()
            assert left > 0, f"the terminal did not finish: {out!r}"
            try:
                kind, *rest = json.loads(ws.recv(timeout=left))
            except TimeoutError:
                continue
            if kind == "stdout":
                out += str(rest[0])
    httpx.delete(app_url(srv, name, f"api/terminals/{term}"), headers=headers, timeout=30)
    return out.split("END-42")[0]


@pytest.mark.parametrize("root_access", [True, False])
def test_an_instance_terminal_and_kernel_are_sandboxed(
    api: httpx.Client, srv: RunningServer, secrets: dict[str, str], root_access: bool
) -> None:
    name = f"iso-ci-{'root' if root_access else 'user'}"
    create_instance(api, srv, name, enable_root_access=root_access)
    share = workspace_dir(srv, "default") / "share" / "Users" / "admin"
    # A root-owned host file inside what the instance sees (its share): mode bits still hold.
    private = share / f"root-only-{name}.txt"
    private.write_text("root's eyes only\n")
    os.chmod(private, 0o600)
    (share / "shared.txt").write_text("for the instance\n")
    [node] = [n["nodeId"] for n in api.get(f"{srv.ws_path}/computes/{name}/nodes").json()["nodes"]]
    [agent] = agent_pids(srv.installation, node)

    out = terminal(
        srv, name, f"id -u; whoami; cat {secrets['credentials']} {private} 2>&1 | sed 's/^/cat: /'"
    )
    lines = [
        line.strip() for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out).replace("\r", "").splitlines()
    ]
    expected_uid, expected_user = ("0", "root") if root_access else (str(SANDBOX_UID), "azureuser")
    assert expected_uid in lines and expected_user in lines, out
    assert "root's eyes only" not in out and "api_key" not in out, out
    assert any("No such file or directory" in line for line in lines if secrets["credentials"] in line), out
    assert any("Permission denied" in line for line in lines if str(private) in line), out

    targets = {**secrets, "agent_environ": f"/proc/{agent}/environ", "root_only_in_share": str(private)}
    with Kernel(srv, name) as kernel:
        code = PROBE.replace('if __name__ == "__main__":', "if False:")
        code += f"\nimport json\nprint('PROBE ' + json.dumps(probe({targets!r})))\n"
        code += f"print('SHARED', open({str(share / 'shared.txt')!r}).read().strip())\n"
        code += "import pathlib; pathlib.Path.home().joinpath('mine.txt').write_text('made in the kernel')\n"
        text = kernel.run(code)
    result = probe_result(text)
    assert_all_denied(result, targets)
    assert result["uid"] == int(expected_uid)
    assert "SHARED for the instance" in text  # the positive control: the share is there, read-write
    [disk] = (srv.home / "data" / "workspaces").glob(f"*/instances/{name}/os")
    mine = disk / "mine.txt"
    assert mine.read_text() == "made in the kernel" and os.stat(mine).st_uid == SANDBOX_UID
    assert os.stat(disk).st_uid == SANDBOX_UID  # the OS disk belongs to the instance's user
    delete_instance(api, srv, name)
