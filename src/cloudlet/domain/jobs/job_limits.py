"""How big one command job may be: its nodes and processes against what its target can ever hold.

One attempt of a job is one run per process (``services/jobs/dispatch.py``): a row, a run spec sent
to an agent and, for TensorFlow, a ``TF_CONFIG`` naming every task. So the process count is what
one job writes, and an absurd one (20,000 TensorFlow tasks) once took the server down. These
rules refuse such a job at submission, with the field to change; every way in (native REST, the
ARM facade, the CLI, a sweep's trials, a pipeline's steps) reaches them through
``job_spec.parse_job`` and ``services.jobs.jobs.submit``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudlet.domain.bounds import (
    MAX_PROCESSES_PER_JOB,
    MAX_SERVERLESS_INSTANCES,
    MAX_TENSORFLOW_TASKS,
)
from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_models import CommandJobSpec, TensorFlowDistribution

NEVER_RUNS = "JobCanNeverRun"
INSTANCE_COUNT = "resources.instance_count"


@dataclass(frozen=True)
class Shape:
    """A job's processes."""

    processes: int
    field: str  # the field that sets the process count (named when it is too many)
    limit: int = MAX_PROCESSES_PER_JOB  # the most processes a job of its kind may start


def shape(spec: CommandJobSpec) -> Shape:
    """How many processes SPEC starts (``job_spec.distribution_envs`` places them)."""
    nodes = spec.resources.instance_count
    dist = spec.distribution
    if isinstance(dist, TensorFlowDistribution):
        workers = dist.worker_count or nodes  # one worker per node unless it says
        if workers < dist.parameter_server_count:
            wide = "distribution.parameter_server_count"
        else:
            wide = "distribution.worker_count" if dist.worker_count else INSTANCE_COUNT
        return Shape(workers + dist.parameter_server_count, wide, MAX_TENSORFLOW_TASKS)
    if dist is not None:
        per_node = dist.process_count_per_instance
        wide = "distribution.process_count_per_instance" if per_node >= nodes else INSTANCE_COUNT
        return Shape(nodes * per_node, wide)
    return Shape(nodes, INSTANCE_COUNT)


def check_processes(spec: CommandJobSpec) -> None:
    """Refuse a job with more processes than one job may start (``MAX_PROCESSES_PER_JOB``,
    ``MAX_TENSORFLOW_TASKS``), naming the field to lower. (A node's share is bounded by the
    fields' own limits, ``MAX_PROCESSES_PER_NODE``.)"""
    found = shape(spec)
    if found.processes > found.limit:
        counted = (
            "worker_count + parameter_server_count"
            if found.limit == MAX_TENSORFLOW_TASKS
            else "resources.instance_count × processes per node"
        )
        raise CloudletError(
            NEVER_RUNS,
            f"this job would start {found.processes} processes ({counted}); one job may start at most "
            f"{found.limit}. Lower {found.field}, or split the work into several jobs (a sweep or pipeline)",
            found.field,
            400,
        )


def check_serverless_nodes(count: int) -> None:
    """A serverless job's nodes are made for it alone, at most ``MAX_SERVERLESS_INSTANCES``."""
    if count > MAX_SERVERLESS_INSTANCES:
        raise CloudletError(
            NEVER_RUNS,
            f"resources.instance_count {count} > {MAX_SERVERLESS_INSTANCES}, the most nodes a serverless "
            "job may have; lower instance_count, or create a compute cluster with max_instances "
            f"{count} and name it in 'compute'",
            INSTANCE_COUNT,
            400,
        )


def check_cluster_nodes(count: int, max_nodes: int, compute_name: str, compute_type: str) -> None:
    """A job on a compute needs at most the nodes it can ever have: one on a compute instance or
    an attached VM, ``max_instances`` on a cluster (else it would wait forever)."""
    if compute_type in compute_types.SINGLE_NODE and count > 1:
        what = "a compute instance" if compute_type == ComputeType.COMPUTE_INSTANCE else "an attached VM"
        raise CloudletError(
            NEVER_RUNS,
            f"'{compute_name}' is {what}: one machine. Use resources.instance_count 1 (with "
            "distribution.process_count_per_instance for several processes) or a compute cluster",
            INSTANCE_COUNT,
        )
    if count > max_nodes:
        raise CloudletError(
            NEVER_RUNS,
            f"resources.instance_count {count} > max_instances {max_nodes} of '{compute_name}': the job "
            f"would wait forever; lower instance_count or raise max_instances (cloudlet compute update -n "
            f"{compute_name} --max-instances {count})",
            INSTANCE_COUNT,
        )
