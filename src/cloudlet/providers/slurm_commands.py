"""The Slurm provider's command lines and the parsing of what Slurm answers (pure: no I/O).

A cloudlet node is one placeholder batch job: ``sbatch`` of a script that runs the agent, with one
node, the size's CPUs, memory and GPUs, and a job name and comment that carry the installation id
and node id (``list_nodes`` finds our jobs by them, orphans included).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Literal

JOB_PREFIX = "cloudlet-"
COMMENT_PREFIX = "cloudlet:"
# squeue's fields, '|'-separated (names, comments and reasons hold no '|' that we make).
SQUEUE_FORMAT = "JobID:|,Name:|,Comment:|,State:|,Reason:|,Partition:|,RestartCnt:|,NodeList:|"
# States of a job that may still hold (or get) an allocation: the ones squeue shows by default.
PENDING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
)
PREEMPTED_STATES = frozenset({"PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
ENDED_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)
# What a pending job's reason means, for people reading list-nodes.
REASON_TEXT = {
    "Resources": "the partition has no free resources for it yet",
    "Priority": "jobs of higher priority are ahead of it",
    "BeginTime": "Slurm holds it until its begin time (a requeued job waits a moment)",
    "QOSMaxCpuPerUserLimit": "the QOS's per-user CPU limit is reached",
    "AssocGrpCpuLimit": "the account's CPU limit is reached",
    "PartitionDown": "the partition is down",
    "ReqNodeNotAvail": "the nodes it may use are unavailable",
}


def job_name(node_id: str) -> str:
    return f"{JOB_PREFIX}{node_id}"


def job_comment(installation_id: str, node_id: str) -> str:
    return f"{COMMENT_PREFIX}{installation_id}:{node_id}"


def parse_comment(comment: str) -> tuple[str, str] | None:
    """(installation id, node id) from a placeholder's comment, None for anybody else's job."""
    if not comment.startswith(COMMENT_PREFIX):
        return None
    installation, sep, node_id = comment[len(COMMENT_PREFIX) :].rpartition(":")
    return (installation, node_id) if sep and installation and node_id else None


@dataclass(frozen=True)
class Placement:
    """Where a node's placeholder goes: partition and QOS by tier, and the account."""

    partition: str
    account: str | None = None
    qos: str | None = None


def sbatch_argv(
    node_id: str,
    installation_id: str,
    vcpus: float,
    memory_gb: float,
    gpus: int,
    placement: Placement,
    node_dir: str,
    script: str,
    time_limit: str | None = None,
) -> list[str]:
    """``sbatch`` of one placeholder: one node, the size's resources, our name and comment; no
    environment of the submitter's (the script sources the agent's own)."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name(node_id)}",
        f"--comment={job_comment(installation_id, node_id)}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={max(1, math.ceil(vcpus))}",
        f"--mem={max(1, int(memory_gb * 1024))}M",
        f"--partition={placement.partition}",
        f"--chdir={node_dir}",
        f"--output={node_dir}/agent.log",
        "--open-mode=append",
        "--export=NONE",
        "--requeue",  # Slurm's preemption requeues it; cloudlet sees that and evicts the node
    ]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    if placement.account:
        argv.append(f"--account={placement.account}")
    if placement.qos:
        argv.append(f"--qos={placement.qos}")
    if time_limit:
        argv.append(f"--time={time_limit}")
    argv.append(script)
    return argv


def batch_script(python: str, env_file: str) -> str:
    """The placeholder's script: the agent, with the environment its provider wrote (mode 0600)."""
    return (
        "#!/bin/sh\n"
        "# cloudlet node placeholder: runs the node agent for as long as the allocation lasts.\n"
        "set -a\n"
        f". {shlex.quote(env_file)}\n"
        "set +a\n"
        f"exec {shlex.quote(python)} -m cloudlet.agent\n"
    )


def env_file_text(env: dict[str, str]) -> str:
    lines = (f"{key}={shlex.quote(value)}\n" for key, value in sorted(env.items()) if key.isidentifier())
    return "".join(lines)


def parse_job_id(sbatch_out: str) -> str:
    """The job id from ``sbatch --parsable`` (``ID`` or ``ID;cluster``); ValueError otherwise."""
    first = sbatch_out.strip().splitlines()[0] if sbatch_out.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {sbatch_out.strip()[:200]!r}")
    return job_id


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    name: str
    installation_id: str
    node_id: str
    state: str
    reason: str
    partition: str
    restarts: int
    nodelist: str


def parse_squeue(out: str) -> list[SlurmJob]:
    """Our placeholders in ``squeue -h -O SQUEUE_FORMAT`` output (other jobs are skipped)."""
    jobs = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 8:
            continue
        job_id, name, comment, state, reason, partition, restarts, nodelist = parts[:8]
        owner = parse_comment(comment)
        if owner is None or not name.startswith(JOB_PREFIX):
            continue
        jobs.append(
            SlurmJob(
                job_id,
                name,
                owner[0],
                owner[1],
                state.upper(),
                "" if reason in ("None", "(null)") else reason,
                partition,
                int(restarts) if restarts.isdigit() else 0,
                nodelist,
            )
        )
    return jobs


NodePhase = Literal["pending", "running", "preempted", "ended"]


def job_phase(state: str, restarts: int) -> NodePhase:
    """What a placeholder's Slurm state means for its node. A placeholder is started once: one
    that Slurm requeued (preempted) has restarted, whatever state it is in now."""
    if restarts > 0 or state in PREEMPTED_STATES:
        return "preempted"
    if state in ENDED_STATES:
        return "ended"
    if state in PENDING_STATES:
        return "pending"
    return "running"


def pending_message(reason: str) -> str:
    if not reason:
        return "Slurm has the allocation pending"
    meaning = REASON_TEXT.get(reason)
    return f"Slurm has the allocation pending: {reason}" + (f" ({meaning})" if meaning else "")


UNUSABLE_NODE_STATES = frozenset({"down", "drain", "drained", "fail", "failing", "maint", "inval"})


@dataclass(frozen=True)
class PartitionCapacity:
    cpus: int
    memory_gb: float
    gpus: int


def parse_sinfo_nodes(out: str) -> PartitionCapacity:
    """The CPUs, memory and GPUs of the partition's usable nodes from
    ``sinfo -h -N -p P -o '%N|%c|%m|%G|%t'`` (one line per node; down and drained ones skipped)."""
    seen: set[str] = set()
    cpus, memory_mb, gpus = 0, 0.0, 0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5 or parts[0] in seen:
            continue
        name, cpu, mem, gres, state = parts[:5]
        if state.rstrip("*~#!%$@^-").lower() in UNUSABLE_NODE_STATES:
            continue
        seen.add(name)
        cpus += int(cpu) if cpu.isdigit() else 0
        memory_mb += float(mem) if mem.replace(".", "", 1).isdigit() else 0.0
        gpus += gres_gpus(gres)
    return PartitionCapacity(cpus, memory_mb / 1024, gpus)


def gres_gpus(gres: str) -> int:
    """GPUs in a node's gres string (``gpu:2``, ``gpu:a100:4(S:0-1)``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        fields = item.split("(")[0].split(":")
        if fields and fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total
