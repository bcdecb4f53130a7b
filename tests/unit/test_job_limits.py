"""How big one command job may be (``domain/jobs/job_limits.py``), and building its processes'
environments in time linear in its processes (``job_spec.distribution_envs``): issue 24, defect 1,
where one TensorFlow job of 20,000 tasks took the server down. Pure, no I/O."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cloudlet.domain.bounds import MAX_PROCESSES_PER_JOB, MAX_SERVERLESS_INSTANCES, MAX_TENSORFLOW_TASKS
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import job_limits, job_spec


def _job(**extra: Any) -> dict[str, Any]:
    return {"command": "python train.py", **extra}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (  # the reproducer
            _job(
                distribution={"type": "tensorflow", "worker_count": 10_000, "parameter_server_count": 10_000}
            ),
            "distribution.worker_count",
        ),
        (
            _job(distribution={"type": "tensorflow", "worker_count": 2, "parameter_server_count": 300}),
            "distribution.parameter_server_count",
        ),
        (
            _job(resources={"instance_count": MAX_TENSORFLOW_TASKS + 1}, distribution={"type": "tensorflow"}),
            "resources.instance_count",
        ),
        (
            _job(
                resources={"instance_count": 2},
                distribution={"type": "pytorch", "process_count_per_instance": 1000},
            ),
            "distribution.process_count_per_instance",
        ),
        (
            _job(
                resources={"instance_count": 600},
                distribution={"type": "mpi", "process_count_per_instance": 2},
            ),
            "resources.instance_count",
        ),
        (_job(resources={"instance_count": MAX_PROCESSES_PER_JOB + 1}), "resources.instance_count"),
    ],
)
def test_a_job_with_too_many_processes_is_refused_naming_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(CloudletError) as caught:
        job_spec.parse_job(doc)
    error = caught.value
    assert (error.status, error.code, error.target) == (400, "JobCanNeverRun", field), error
    assert f"Lower {field}" in error.message and "at most" in error.message


@pytest.mark.parametrize(
    "doc",
    [
        _job(distribution={"type": "tensorflow", "worker_count": MAX_TENSORFLOW_TASKS}),
        _job(
            resources={"instance_count": 4},
            distribution={"type": "pytorch", "process_count_per_instance": 256},
        ),
        _job(resources={"instance_count": MAX_PROCESSES_PER_JOB}),
    ],
)
def test_a_job_at_the_limits_is_taken(doc: dict[str, Any]) -> None:
    job_spec.parse_job(doc)


def test_serverless_and_cluster_node_limits() -> None:
    job_limits.check_serverless_nodes(MAX_SERVERLESS_INSTANCES)
    with pytest.raises(CloudletError) as caught:
        job_limits.check_serverless_nodes(MAX_SERVERLESS_INSTANCES + 1)
    assert caught.value.target == "resources.instance_count" and "compute cluster" in caught.value.message
    job_limits.check_cluster_nodes(4, 4, "gpu", "amlcompute")
    with pytest.raises(CloudletError, match="max_instances 4 of 'gpu'") as caught:
        job_limits.check_cluster_nodes(5, 4, "gpu", "amlcompute")
    assert caught.value.target == "resources.instance_count"
    with pytest.raises(CloudletError, match="one machine"):
        job_limits.check_cluster_nodes(2, 1, "ci", "computeinstance")


def test_tensorflow_environments_are_built_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every task's TF_CONFIG names every task; the cluster list is serialised once for all of
    them (it was once per task, for each node again: 20,000 tasks were O(tasks²) dumps)."""
    # Past the submission limit on purpose (the model's own bounds still take it): the builder
    # must stay linear whatever reaches it.
    doc = {"type": "tensorflow", "worker_count": 1_500, "parameter_server_count": 500}
    spec = job_spec.CommandJobSpec.model_validate(
        {"command": "x", "resources": {"instance_count": 50}, "distribution": doc}
    )
    world = [f"10.0.{n // 256}.{n % 256}" for n in range(50)]
    dumps = json.dumps
    calls: list[int] = []

    def counted(value: Any, **kwargs: Any) -> str:
        calls.append(1)
        return dumps(value, **kwargs)

    monkeypatch.setattr(job_spec.json, "dumps", counted)
    envs = job_spec.distribution_envs(spec, world, 20_000)
    monkeypatch.undo()
    assert len(calls) == 1, "the cluster list is serialised once for all 2,000 tasks"
    assert sum(len(node) for node in envs) == 2_000 and [len(node) for node in envs] == [40] * 50
    first, last = json.loads(envs[0][0]["TF_CONFIG"]), json.loads(envs[49][39]["TF_CONFIG"])
    assert first["task"] == {"type": "worker", "index": 0} and last["task"] == {"type": "ps", "index": 499}
    assert first["cluster"] == last["cluster"] and len(first["cluster"]["worker"]) == 1_500
    # Exactly what serialising each task's whole document writes (what agents were sent before).
    assert envs[49][39]["TF_CONFIG"] == json.dumps(last)
