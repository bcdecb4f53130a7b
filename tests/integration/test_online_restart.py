"""Online endpoints converge on the store after a crash (issue 26): the server is killed (SIGKILL)
while two deployments serve traffic — blue on a node made for it, green as a local process — and
started again on the same home. Its online loop starts both from the stored desired state, traffic
resumes on both, and no replica of the killed server is left: every inference server of this
installation is one the new server lists, and blue's node is the new server's only one.
"""

from __future__ import annotations

import contextlib
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.client import MLClient
from tests.conftest import RunningServer
from tests.integration.test_online_workers import _replica_ports
from tests.jobs_helpers import require_inference_environment, wait_until

pytestmark = pytest.mark.timeout(400)
SCORE = """
import os
def init():
    pass
def run(raw):
    return {"who": os.environ.get("WHO")}
"""


def _doc(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "endpoint_name": "ep-crash",
        "model": {"path": "model"},
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "instance_type": "Standard_DS3_v2",
        "instance_count": 1,
        "environment_variables": {"WHO": name},
        "readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 90},
    }


def _answers(url: str, key: str) -> Callable[[], set[str]]:
    def who() -> set[str]:
        seen = set()
        for _ in range(8):
            got = httpx.post(url, json={"x": 1}, headers={"Authorization": f"Bearer {key}"}, timeout=30)
            if got.status_code == 200:
                seen.add(str(got.json()["who"]))
        return seen

    return who


def _serving(ml: MLClient) -> set[str]:
    """The ports of the replicas the server lists as ready, for both deployments."""
    ports = set()
    for name in ("blue", "green"):
        shown = ml.online_deployments.get("ep-crash", name)
        ports |= {str(r["port"]) for r in shown["replicas"] if r["ready"]}
    return ports


def test_a_killed_server_converges_on_its_stored_deployments(
    server_factory: Callable[..., RunningServer], tmp_path: Path
) -> None:
    require_inference_environment()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "none.txt").write_text("-")
    first = server_factory(timeout=240)
    with MLClient(home=first.home) as ml:
        ml.online_endpoints.create_or_update({"name": "ep-crash", "auth_mode": "key"})
        for name, local in (("blue", False), ("green", True)):
            created = ml.online_deployments.create_or_update(_doc(name), base_path=tmp_path, local=local)
            shown = ml.online_deployments.wait("ep-crash", name, generation=created["generation"])
            assert shown["provisioning_state"] == "Succeeded", shown
        url = ml.online_endpoints.update_traffic("ep-crash", {"blue": 50, "green": 50})["scoring_uri"]
        key = ml.online_endpoints.get_keys("ep-crash")["primaryKey"]
        old_nodes = {n["nodeId"] for n in ml.online_deployments.get("ep-crash", "blue")["nodes"]}
    who = _answers(url, key)
    wait_until(lambda: who() == {"blue", "green"}, 60, "both deployments serving")

    stop = threading.Event()

    def traffic() -> None:  # requests in flight when the server dies (then refused until it is back)
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                who()

    load = threading.Thread(target=traffic, daemon=True)
    load.start()
    try:
        first.kill()  # SIGKILL: no shutdown of any kind
        second = server_factory(home=first.home, timeout=240)
        with MLClient(home=second.home) as ml:  # its port may be another
            url = ml.online_endpoints.get("ep-crash")["scoring_uri"]
        again = _answers(url, key)
        wait_until(lambda: again() == {"blue", "green"}, 240, "both deployments serving again")
    finally:
        stop.set()
        load.join(60)
    with MLClient(home=second.home) as ml:
        wait_until(lambda: len(_serving(ml)) == 2, 60, "one ready replica per deployment listed")
        listed = _serving(ml)
        nodes = {n["nodeId"] for n in ml.online_deployments.get("ep-crash", "blue")["nodes"]}
    running = _replica_ports(second.installation)
    assert running <= listed, f"inference servers nobody lists: {running - listed}"
    assert running, "green's local replica carries the installation"
    assert len(nodes) == 1 and not nodes & old_nodes, (nodes, old_nodes)
