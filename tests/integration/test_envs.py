"""Job environments: venvs built with uv once per host, cached by hash and reused; images warn.

Real processes throughout: a real agent (started by LocalProvider) against the `FakeControlPlane`
test double of tests/integration/test_agent.py, and one end-to-end test against a real server.
The venv tests install `six` from PyPI.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.domain.assets.environments import resolve_environment
from cloudlet.nodekit import envs
from cloudlet.providers.base import NodeRequest
from cloudlet.providers.local import LocalProvider, process_alive
from tests.conftest import RunningServer
from tests.integration.test_agent import FakeControlPlane, Node, run_pids, run_spec, vm_rss_kb, wait_until

SIX = ["six==1.16.0"]
PRINT_SIX = """python -c "import six; print('six', six.__version__)" """
BUILD_TIMEOUT_S = 60.0


def environment(doc: dict[str, Any] | None) -> dict[str, Any]:
    """The run spec's `environment`, as the server's dispatcher makes it."""
    return dataclasses.asdict(resolve_environment(doc))


def real_uv() -> str:
    found = envs.find_uv()
    if found is None:
        pytest.skip("uv is not installed")
    return found


@pytest.fixture
def fake() -> Iterator[FakeControlPlane]:
    plane = FakeControlPlane()
    yield plane
    plane.close()


@pytest.fixture
def start_node(fake: FakeControlPlane, tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Agents on one host: their provider shares `tmp_path/envs` as the environment cache."""
    provider = LocalProvider(tmp_path / "nodes", cgroup_parent=None)
    nodes: list[Node] = []

    def start(**agent_env: str) -> Node:
        node_id = f"n-{uuid.uuid4().hex[:8]}"
        req = NodeRequest(
            node_id=node_id,
            token=f"tok-{uuid.uuid4().hex}",
            installation_id=f"inst-{uuid.uuid4().hex[:8]}",
            server_url=fake.url,
            size="Standard_DS3_v2",
            vcpus=2,
            memory_gb=4,
            env=agent_env,
        )
        with fake.cond:
            fake.tokens[node_id] = req.token
        node = Node(req, provider.create(req))
        nodes.append(node)
        fake.wait_for(lambda: fake.calls_to("register", node_id), what="registration")
        return node

    yield start
    for node in nodes:
        provider.terminate(node.handle)


def run_to_exit(
    fake: FakeControlPlane, node: Node, spec: dict[str, Any]
) -> tuple[dict[str, Any], str, float]:
    began = time.monotonic()
    fake.command(node.id, start=spec)
    body = fake.wait_for(lambda: fake.exits.get(spec["run"]), timeout=BUILD_TIMEOUT_S, what="exit")
    return body, fake.log_text(spec["run"]), time.monotonic() - began


def test_venv_is_built_once_per_host_and_reused_by_another_node(
    fake: FakeControlPlane, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    env = environment({"pip": SIX})
    first, second = start_node(), start_node()
    check = PRINT_SIX + """&& python -c "import sys; print('prefix', sys.prefix)" """
    check += """&& (python -c "import httpx" 2>/dev/null && echo leaky || echo clean)"""
    spec = run_spec(check, environment=env)
    body, log, built_s = run_to_exit(fake, first, spec)
    assert body["exit_code"] == 0, log
    venv = tmp_path / "envs" / env["hash"]
    assert f"Preparing environment {env['hash'][:12]} (six==1.16.0) with uv" in log
    assert log.index("Preparing environment") < log.index("six 1.16.0\n")
    # The run's own venv over the cached one (its pip installs stay its own); it sees none of
    # the agent's packages.
    assert re.search(r"prefix /\S+/\.cloudlet-venv\n", log) and "clean\n" in log, log
    assert (venv / envs.MARKER).is_file()
    assert sorted(p.name for p in venv.parent.iterdir()) == [env["hash"], f"{env['hash']}.lock"]

    # Another node on the same host: the same environment is reused at once.
    spec2 = run_spec(PRINT_SIX, environment=env)
    body2, log2, reused_s = run_to_exit(fake, second, spec2)
    assert body2["exit_code"] == 0, log2
    assert log2 == f"cloudlet-agent: environment {env['hash'][:12]} reused ({venv})\nsix 1.16.0\n"
    assert reused_s < 2.0
    rss_mib = vm_rss_kb(first.pid) / 1024
    print(
        f"first run (build) {built_s:.2f} s, second run (reuse) {reused_s:.2f} s, agent RSS {rss_mib:.1f} MiB"
    )
    assert rss_mib <= 40  # the agent stays small after building an environment


def test_two_nodes_wanting_one_environment_at_once_build_it_once(
    fake: FakeControlPlane, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    slow_uv = tmp_path / "slow-uv"  # uv whose `pip install` starts a second late: the builds overlap
    slow_uv.write_text(f'#!/bin/sh\n[ "$1" = pip ] && sleep 1\nexec {real_uv()} "$@"\n')
    slow_uv.chmod(slow_uv.stat().st_mode | stat.S_IXUSR)
    env = environment({"pip": SIX})
    nodes = [start_node(CLOUDLET_UV=str(slow_uv)) for _ in range(2)]
    specs = [run_spec(PRINT_SIX, environment=env) for _ in nodes]
    for node, spec in zip(nodes, specs, strict=True):
        fake.command(node.id, start=spec)
    fake.wait_for(lambda: all(s["run"] in fake.exits for s in specs), timeout=BUILD_TIMEOUT_S, what="exits")
    exits = [fake.exits[s["run"]] for s in specs]
    logs = sorted((fake.log_text(s["run"]) for s in specs), key=lambda text: "Preparing" not in text)
    assert [e["exit_code"] for e in exits] == [0, 0], logs
    assert "Preparing environment" in logs[0] and "Preparing" not in logs[1]
    short = env["hash"][:12]
    assert logs[1] == (
        f"cloudlet-agent: waiting for another build of environment {short} on this host\n"
        f"cloudlet-agent: environment {short} reused ({tmp_path / 'envs' / env['hash']})\nsix 1.16.0\n"
    )


def test_a_bad_package_fails_the_run_with_a_clear_log_and_leaves_no_env(
    fake: FakeControlPlane, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    env = environment({"pip": ["this-package-does-not-exist-cloudlet==0.0.1"]})
    node = start_node()
    spec = run_spec("echo the command ran", environment=env)
    body, log, _ = run_to_exit(fake, node, spec)
    assert body["exit_code"] == 1 and body["reason"] == "exited", log
    assert "Preparing environment" in log and "this-package-does-not-exist-cloudlet" in log
    short = env["hash"][:12]
    assert (
        f"cloudlet-agent: the job's environment could not be prepared: environment {short} could not be "
        "built: uv pip install exited with code 1\n"
    ) in log
    assert "the command ran" not in log
    assert not (tmp_path / "envs" / env["hash"]).exists()
    assert [p.name for p in (tmp_path / "envs").iterdir()] == [f"{env['hash']}.lock"]


def test_an_image_warns_and_its_job_has_pip_installing_into_the_runs_own_venv(
    fake: FakeControlPlane, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """Issue 25.6a: hello-notebook.yml's `pip install …` in an `image:` environment exited 127."""
    env = environment({"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"})
    assert env["kind"] == "image"
    node = start_node()
    command = "pip --version && pip install -q --disable-pip-version-check six==1.16.0 && "
    command += """python -c "import six, sys; print('six', six.__version__, 'in', sys.prefix)" """
    spec = run_spec(command, environment=env)
    body, log, _ = run_to_exit(fake, node, spec)
    assert body["exit_code"] == 0, log
    warning = log.partition("\n")[0]
    assert warning.startswith(
        "cloudlet-agent: warning: image mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04 requested; "
    )
    assert warning.endswith(": using a venv with pip") and "container" in warning
    assert re.search(r"six 1\.16\.0 in /\S+/\.cloudlet-venv\n", log), log
    # The package went into the run's venv, not into the environment other runs share.
    assert not list((tmp_path / "envs" / env["hash"]).glob("lib/python3.*/site-packages/six.py"))
    assert list((tmp_path / "envs" / env["hash"]).glob("lib/python3.*/site-packages/pip"))


def test_cancel_during_a_build_kills_the_build_and_leaves_no_env(
    fake: FakeControlPlane, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    slow_uv = tmp_path / "slow-uv"  # uv whose `pip install` hangs
    slow_uv.write_text(f'#!/bin/sh\n[ "$1" = venv ] && exec {real_uv()} "$@"\necho resolving...\nsleep 60\n')
    slow_uv.chmod(slow_uv.stat().st_mode | stat.S_IXUSR)
    env = environment({"pip": ["anything==1"]})
    node = start_node(CLOUDLET_UV=str(slow_uv))
    spec = run_spec("echo the command ran", environment=env)
    fake.command(node.id, start=spec)
    fake.wait_for(lambda: "resolving..." in fake.log_text(spec["run"]), what="the build to start")
    pids = wait_until(lambda: run_pids(spec["run"]), what="the build's processes")
    assert (tmp_path / "envs" / env["hash"]).exists()  # partly built
    began = time.monotonic()
    fake.command(node.id, cancel=spec["run"])
    wait_until(lambda: not any(process_alive(p) for p in pids), timeout=2.0, what="the build to die")
    assert time.monotonic() - began < 2.0
    body = fake.wait_for(lambda: fake.exits.get(spec["run"]), what="exit")
    assert body["reason"] == "canceled", fake.log_text(spec["run"])
    assert "the command ran" not in fake.log_text(spec["run"])
    assert not (tmp_path / "envs" / env["hash"]).exists()


def test_without_uv_the_venv_is_built_with_venv_and_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(envs, "find_uv", lambda env=None: None)
    lines: list[str] = []
    spec = environment({"pip": SIX})
    added = envs.prepare(spec, tmp_path, lines.append, stop=threading.Event())
    venv = tmp_path / spec["hash"]
    assert added == {"VIRTUAL_ENV": str(venv), "PATH": f"{venv}/bin{os.pathsep}{os.environ['PATH']}"}
    assert "python -m venv and pip (uv not found)" in lines[0]
    assert (venv / envs.MARKER).is_file()
    assert list((venv / "lib").glob("python3.*/site-packages/six.py"))
    lines.clear()
    assert envs.prepare(spec, tmp_path, lines.append) == added
    assert lines == [f"cloudlet-agent: environment {spec['hash'][:12]} reused ({venv})\n"]
    assert envs.prepare(environment(None), tmp_path, lines.append) == {}


# -- end to end: a real server, its local provider, two jobs ----------------------------------
def wait_job(api: httpx.Client, url: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = api.get(url).json()
        if job.get("status") in ("Completed", "Failed", "Canceled") or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def test_two_jobs_with_one_inline_environment_build_once(server: RunningServer) -> None:
    ws = server.ws_path
    with server.client() as api:
        cluster = {
            "type": "amlcompute",
            "size": "Standard_DS3_v2",
            "min_instances": 0,
            "max_instances": 1,
            "idle_time_before_scale_down": 30,
        }
        assert api.put(f"{ws}/computes/c1", json=cluster).status_code in (200, 201, 202)
        job = {
            "command": "python -c 'import six; print(six.__version__)'",
            "compute": "azureml:c1",
            "environment": {"pip": SIX},
        }
        logs = []
        for name in ("env-job-1", "env-job-2"):
            began = time.monotonic()
            created = api.put(f"{ws}/jobs/{name}", json=job)
            assert created.status_code == 201, created.text
            done = wait_job(api, f"{ws}/jobs/{name}")
            assert done["status"] == "Completed", done
            logs.append(api.get(f"{ws}/jobs/{name}/logs").json()["data"])
            print(f"{name}: submitted to Completed in {time.monotonic() - began:.2f} s")
    digest = environment({"pip": SIX})["hash"]
    assert f"Preparing environment {digest[:12]} (six==1.16.0)" in logs[0] and logs[0].endswith("\n1.16.0\n")
    venv = server.home / "envs" / digest  # the local provider's host-wide cache, beside its nodes
    assert logs[1] == f"cloudlet-agent: environment {digest[:12]} reused ({venv})\n1.16.0\n"


def test_a_node_with_micromamba_builds_a_conda_file_with_it(tmp_path: Path) -> None:
    """Issue 25.1: conda or micromamba is used where the node has one. No real one exists on these
    machines, so a fake `micromamba` (which makes a prefix shaped like a conda environment: a
    bin/python and a site-packages) checks the steps: the conda file as written reaches the tool,
    and the prefix is used as a venv is (the run's own venv over it sees its packages)."""
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    python = os.path.realpath(sys.executable)
    (fake_bin / "micromamba").write_text(
        f"""#!/bin/sh
echo "fake micromamba $*"
[ "$1 $2 $3 $5" = "create -y -p -f" ] || exit 2
{python} -I -S -m venv --without-pip "$4" || exit 3
cp "$6" "$4.seen.json"
for site in "$4"/lib/python3.*/site-packages; do echo "VALUE = 'from conda'" > "$site/fromconda.py"; done
"""
    )
    (fake_bin / "micromamba").chmod(0o755)
    conda = {"channels": ["conda-forge"], "dependencies": ["python=3.8", "numpy=1.21", {"pip": ["six"]}]}
    spec = environment({"conda_file": conda})
    assert spec["conda"] == conda
    lines: list[str] = []
    base = {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    added = envs.prepare(spec, tmp_path / "envs", lines.append, base_env=base)
    venv = tmp_path / "envs" / spec["hash"]
    said = "".join(lines)
    assert f"with micromamba ({fake_bin / 'micromamba'}) from the conda file" in said, said
    assert "pins Python" not in said  # conda installs the pinned Python itself
    assert json.loads((venv / "conda.seen.json").read_text()) == conda
    assert (venv / envs.MARKER).is_file() and added["VIRTUAL_ENV"] == str(venv)
    own = envs.overlay(venv, tmp_path / "run" / ".cloudlet-venv", base)
    out = subprocess.run(
        ["python", "-c", "import fromconda, sys; print(fromconda.VALUE, sys.prefix)"],
        env={**os.environ, **own},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == f"from conda {tmp_path / 'run' / '.cloudlet-venv'}\n"
