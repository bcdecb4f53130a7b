"""What a replica's node prepares (control/online_placement.py) and the board agents read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloudlet.control.online_placement import replica_environment
from cloudlet.control.replica_hosts import ReplicaBoard
from cloudlet.domain.endpoints import online_endpoints as rules

DEPLOYMENT: dict[str, Any] = {
    "name": "blue",
    "model": "azureml:m:1",
    "code_configuration": {"code": "codes/" + "a" * 64, "scoring_script": "score.py"},
    "instance_type": "Standard_DS3_v2",
}


def test_an_inline_environment_gets_the_inference_server() -> None:
    env = {"conda_file": {"dependencies": ["python=3.11", {"pip": ["scikit-learn", "joblib"]}]}}
    spec = rules.parse_deployment({**DEPLOYMENT, "environment": env}, "ep1")
    built = replica_environment(spec)
    assert built is not None and built["kind"] == "venv"
    expected = ["azureml-inference-server-http", "joblib", "scikit-learn", *("pip", "setuptools<81", "wheel")]
    assert built["pip"] == sorted(expected, key=str.lower)  # a conda file: pip, setuptools, wheel too


def test_a_given_inference_server_is_not_added_twice() -> None:
    env = {"pip": ["azureml-inference-server-http==1.5.1"]}
    spec = rules.parse_deployment({**DEPLOYMENT, "environment": env}, "ep1")
    built = replica_environment(spec)
    assert built is not None and built["pip"] == ["azureml-inference-server-http==1.5.1"]


def test_a_named_environment_uses_the_nodes_inference_interpreter() -> None:
    spec = rules.parse_deployment({**DEPLOYMENT, "environment": "sklearn-inference"}, "ep1")
    assert replica_environment(spec) is None
    assert replica_environment(rules.parse_deployment(DEPLOYMENT, "ep1")) is None


def test_the_board_answers_each_node_its_own_and_forgets_what_was_let_go(tmp_path: Path) -> None:
    board = ReplicaBoard()
    one = board.assign("n-1", {"scoring_script": "score.py"}, {"code": tmp_path / "c"}, tmp_path / "log")
    board.assign("n-2", {}, {}, tmp_path / "other")
    assert [s["id"] for s in board.report("n-1", {})] == [one.id]
    assert one.spec["code_url"].endswith(f"/nodes/n-1/replicas/{one.id}/code")
    assert board.archive("n-2", one.id, "code") is None  # another node's replica is not its to fetch
    board.report("n-1", {one.id: {"state": "running", "port": 5001, "log": "hello"}})
    assert one.status == {"state": "running", "port": 5001} and (tmp_path / "log").read_text() == "hello"
    one.withdrawn = True
    assert board.report("n-1", {one.id: {"state": "running"}}) == []  # still held: kept until let go
    assert one.id in board.assignments
    board.report("n-1", {})
    assert one.id not in board.assignments


def test_the_client_reads_a_local_conda_file_into_the_inline_environment(tmp_path: Path) -> None:
    """As Azure ML's CLI does for a deployment YAML (``environment: {image, conda_file: ./conda.yml}``)."""
    from types import SimpleNamespace

    from cloudlet.client.online_endpoints import OnlineDeploymentOperations

    conda = {"dependencies": ["python=3.11", {"pip": ["scikit-learn"]}]}
    (tmp_path / "conda.yml").write_text("dependencies:\n- python=3.11\n- pip:\n  - scikit-learn\n")
    operations = OnlineDeploymentOperations(None, SimpleNamespace(ws_path=lambda: "/ws"))  # type: ignore[arg-type]
    env = {"image": "python:3.11-slim", "conda_file": "conda.yml"}
    body = operations.prepare({**DEPLOYMENT, "environment": env}, base_path=tmp_path)
    assert body["environment"] == {"image": "python:3.11-slim", "conda_file": conda}
    assert env["conda_file"] == "conda.yml"  # the caller's document is not changed
    built = replica_environment(rules.parse_deployment(body, "ep1"))
    assert built is not None
    assert built["pip"] == ["azureml-inference-server-http", "pip", "scikit-learn", "setuptools<81", "wheel"]
