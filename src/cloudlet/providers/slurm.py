"""Nodes as Slurm allocations: each node is one placeholder batch job running the agent.

Scale up is ``sbatch`` (one node, the size's CPUs, memory and GPUs, in the location's partition,
account and QOS; ``tier: low_priority`` takes the preemptible partition and QOS when configured);
scale down and terminate are ``scancel``; ``list_nodes`` is ``squeue`` filtered by the job comment,
which carries the installation id. The listing also says whether Slurm keeps an allocation pending
(and why: ``Resources``, ``Priority``, ``QOSMaxCpuPerUserLimit`` …) or preempted it
(``SupportsNodeStatus``); the engine's capacity is its partitions' usable nodes (``CapacityOwner``).

The agent runs inside the allocation, on a Slurm compute node: the node directory (``nodes_dir``)
must be on a filesystem that node shares with the server's host, and the agent's interpreter
(``python``) must exist there. The script sources the agent's environment from a file of mode
0600 in the node directory; ``sbatch --export=NONE`` keeps the server's own environment out.
The commands run on this host (``sbatch`` and friends on PATH or in ``bin_dir``), or on a login
node over SSH (``login``: ``providers/slurm_runner.py``), which then also writes the node's files.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.jobs.run_state import ExitReason
from cloudlet.providers import slurm_commands as sc
from cloudlet.providers.base import Capacity, NodeHandle, NodeRequest, NodeStatus, ProviderError
from cloudlet.providers.local import NODE_SUBDIRS, agent_env, sandbox_env
from cloudlet.providers.slurm_runner import LocalRunner, Runner, SshRunner

TERMINATE_WAIT_S = 5.0
ENV_FILE = "agent.env"
SCRIPT_FILE = "placeholder.sh"
AGENT_LOG = "agent.log"


class SlurmLogin(BaseModel):
    """A login node reached over SSH, where the Slurm commands run (``slurm_runner.SshRunner``)."""

    model_config = ConfigDict(extra="forbid")
    address: str = Field(min_length=1, max_length=255)
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(default="root", min_length=1, max_length=64)
    identity_file: str | None = Field(default=None, max_length=4096, description="the private key")
    known_hosts: str | None = Field(
        default=None, max_length=4096, description="the login node's host key (default: learned on first use)"
    )

    _paths = field_validator("identity_file", "known_hosts")(lambda v: _absolute(v))


def _absolute(value: str | None) -> str | None:
    if value is not None and not os.path.isabs(value):
        raise ValueError("must be an absolute path")
    return value


class SlurmConfig(BaseModel):
    """A Slurm cluster (``providers/slurm.py``): where placeholders go and how commands reach it."""

    model_config = ConfigDict(extra="forbid")
    partition: str = Field(min_length=1, max_length=128, description="the partition of dedicated nodes")
    account: str | None = Field(default=None, min_length=1, max_length=128, description="sbatch --account")
    qos: str | None = Field(default=None, min_length=1, max_length=128, description="sbatch --qos")
    low_priority_partition: str | None = Field(
        default=None, min_length=1, max_length=128, description="the partition of tier: low_priority"
    )
    low_priority_qos: str | None = Field(
        default=None, min_length=1, max_length=128, description="the preemptible QOS (tier: low_priority)"
    )
    login: SlurmLogin | None = Field(default=None, description="a login node over SSH (else: this host)")
    slurm_conf: str | None = Field(default=None, max_length=4096, description="SLURM_CONF for the commands")
    bin_dir: str | None = Field(default=None, max_length=4096, description="where sbatch, squeue ... live")
    nodes_dir: str | None = Field(
        default=None,
        max_length=4096,
        description="node directories, on a filesystem the compute nodes share (default: <home>/slurm-nodes)",
    )
    python: str | None = Field(
        default=None, max_length=4096, description="the agent's interpreter on the compute nodes"
    )
    time_limit: str | None = Field(default=None, max_length=32, description="sbatch --time of a placeholder")
    shared_filesystem: bool = Field(
        default=True,
        description="the compute nodes see the server's data folder at the same path (else: jobs' "
        "inputs, outputs and checkpoints move over the server's HTTP API)",
    )

    _paths = field_validator("slurm_conf", "bin_dir", "nodes_dir", "python")(_absolute)

    @model_validator(mode="after")
    def _remote_paths(self) -> SlurmConfig:
        if self.login is not None and (self.nodes_dir is None or self.python is None):
            raise ValueError("with a login node, nodes_dir and python must be given: paths on the cluster")
        return self

    @field_validator("partition", "account", "qos", "low_priority_partition", "low_priority_qos")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not all(ch.isalnum() or ch in "-_." for ch in value):
            raise ValueError("must be a Slurm name (letters, digits, '-', '_', '.')")
        return value


class SlurmProvider:
    kind = "slurm"

    def __init__(self, config: SlurmConfig, home: Path, python: str = sys.executable) -> None:
        self.config = config
        self.root = Path(config.nodes_dir) if config.nodes_dir else home / "slurm-nodes"
        self.python = config.python or python
        login = config.login
        self.runner: Runner
        if login is None:
            self.env_cache = home / "envs"  # shared with the local provider's nodes on this host
            self.runner = LocalRunner(config.bin_dir, config.slurm_conf)
        else:
            self.env_cache = self.root / ".cache" / "envs"  # on the cluster's filesystem
            own = home / "slurm-known_hosts"
            self.runner = SshRunner(
                login.address,
                login.port,
                login.user,
                login.identity_file,
                login.known_hosts,
                own,
                config.bin_dir,
                config.slurm_conf,
            )
        self.remote = login is not None

    def _run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.runner.run(argv, check)

    def placement(self, tier: str) -> sc.Placement:
        c = self.config
        if tier == Tier.LOW_PRIORITY:
            partition, qos = c.low_priority_partition or c.partition, c.low_priority_qos or c.qos
            return sc.Placement(partition, c.account, qos)
        return sc.Placement(c.partition, c.account, c.qos)

    # -- the provider protocol -----------------------------------------------------------------
    def create(self, req: NodeRequest) -> NodeHandle:
        for existing in self.list_nodes(req.installation_id):
            if existing.node_id == req.node_id:
                return existing  # a retried create does not queue a second placeholder
        node_dir = (req.node_root or self.root) / req.node_id
        env = agent_env(req, node_dir, self.python)
        env.pop("CLOUDLET_NODE_ADDRESS")  # the agent's own address on its Slurm node, not ours
        env.update(sandbox_env())
        env.setdefault("CLOUDLET_ENV_CACHE", str(self.env_cache))
        env.setdefault("CLOUDLET_BUILD_CACHE", str(self.env_cache.parent / "build-cache"))
        env.setdefault("CLOUDLET_DOWNLOAD_CACHE", str(self.env_cache.parent / "downloads"))
        # Slurm's SIGTERM means preemption (or its time limit): the run exit reason the agent reports.
        env["CLOUDLET_SIGNAL_MEANS"] = ExitReason.PREEMPTED.value
        env["CLOUDLET_SHARED_FILESYSTEM"] = "1" if self.config.shared_filesystem else "0"
        env_file, script = node_dir / ENV_FILE, node_dir / SCRIPT_FILE
        if self.remote:
            # The agent makes the rest of its directory; the log's folder must exist for Slurm.
            self.runner.run(["mkdir", "-p", *(str(node_dir / sub) for sub in NODE_SUBDIRS)])
        else:
            try:
                for sub in NODE_SUBDIRS:
                    (node_dir / sub).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ProviderError(f"cannot make node directory {node_dir}: {exc}") from exc
        self.runner.write_file(str(env_file), sc.env_file_text(env), 0o600)
        self.runner.write_file(str(script), sc.batch_script(self.python, str(env_file)), 0o700)
        placement = self.placement(req.tier)
        argv = sc.sbatch_argv(
            req.node_id,
            req.installation_id,
            req.vcpus,
            req.memory_gb,
            req.gpus,
            placement,
            str(node_dir),
            str(script),
            self.config.time_limit,
        )
        proc = self._run(argv)
        try:
            job_id = sc.parse_job_id(proc.stdout)
        except ValueError as exc:
            raise ProviderError(str(exc)) from exc
        ref = self._ref(req.installation_id, req.node_id, job_id, str(node_dir))
        ref.update({"partition": placement.partition, "slurm_state": "PENDING", "reason": "", "restarts": 0})
        return NodeHandle(node_id=req.node_id, provider_ref=ref)

    def terminate(self, handle: NodeHandle) -> None:
        ref = handle.provider_ref
        job_id = str(ref.get("job_id") or "")
        if not job_id:
            installation = str(ref.get("installation_id", ""))
            listed = self.list_nodes(installation) if installation else []
            found = [h for h in listed if h.node_id == handle.node_id]
            job_id = str(found[0].provider_ref["job_id"]) if found else ""
        if job_id:
            proc = self._run(["scancel", job_id], check=False)
            if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
                why = proc.stderr.strip()[-300:]
                raise ProviderError(f"scancel {job_id} exited {proc.returncode}: {why}")
            deadline = time.monotonic() + TERMINATE_WAIT_S
            while time.monotonic() < deadline and self._job_active(job_id):
                time.sleep(0.1)
        node_dir = ref.get("node_dir")
        if node_dir:  # the node's token (its env file) goes with the node
            self.runner.remove([str(Path(str(node_dir)) / name) for name in ("work", "mnt", ENV_FILE)])

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        proc = self._run(["squeue", "-h", "-O", sc.SQUEUE_FORMAT])
        handles = []
        for job in sc.parse_squeue(proc.stdout):
            if job.installation_id != installation_id or job.state in sc.ENDED_STATES:
                continue
            ref = self._ref(installation_id, job.node_id, job.job_id, str(self.root / job.node_id))
            ref.update(
                {
                    "partition": job.partition,
                    "slurm_state": job.state,
                    "reason": job.reason,
                    "restarts": job.restarts,
                    "slurm_node": job.nodelist,
                }
            )
            handles.append(NodeHandle(node_id=job.node_id, provider_ref=ref))
        return sorted(handles, key=lambda h: h.node_id)

    # -- optional abilities --------------------------------------------------------------------
    def node_status(self, handle: NodeHandle) -> NodeStatus | None:
        ref = handle.provider_ref
        state = str(ref.get("slurm_state") or "")
        if not state:
            return None
        restarts = int(ref.get("restarts") or 0)
        phase = sc.job_phase(state, restarts)
        reason = str(ref.get("reason") or "")
        job = ref.get("job_id")
        if phase == "pending":
            return NodeStatus("pending", sc.pending_message(reason), reason)
        if phase == "preempted":
            return NodeStatus("preempted", f"Slurm preempted the allocation (job {job} requeued)", reason)
        if phase == "running":
            return NodeStatus("running", "", "")
        return None

    def capacity(self) -> Capacity:
        partitions = {self.config.partition, self.config.low_priority_partition or self.config.partition}
        proc = self._run(["sinfo", "-h", "-N", "-p", ",".join(sorted(partitions)), "-o", "%N|%c|%m|%G|%t"])
        offer = sc.parse_sinfo_nodes(proc.stdout)
        return Capacity(vcpus=float(offer.cpus), memory_gb=offer.memory_gb, gpus=float(offer.gpus))

    def node_log(self, handle: NodeHandle, tail_bytes: int = 65536) -> str:
        path = handle.provider_ref.get("agent_log")
        if not path:
            return ""
        if self.remote:
            with contextlib.suppress(ProviderError):
                return self.runner.run(["tail", "-c", str(tail_bytes), str(path)], check=False).stdout
            return ""
        try:
            with open(str(path), "rb") as f:
                f.seek(max(0, os.path.getsize(str(path)) - tail_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # -- helpers -------------------------------------------------------------------------------
    def _job_active(self, job_id: str) -> bool:
        proc = self._run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False)
        return proc.returncode == 0 and bool(proc.stdout.strip())

    @staticmethod
    def _ref(installation_id: str, node_id: str, job_id: str, node_dir: str) -> dict[str, Any]:
        return {
            "job_id": job_id,
            "node_dir": node_dir,
            "agent_log": str(Path(node_dir) / AGENT_LOG),
            "installation_id": installation_id,
            "job_name": sc.job_name(node_id),
        }
