"""A real Slurm cluster for tests: munged, slurmctld and two slurmd, each slurm daemon in its own
network namespace as its own host (and, on request, an sshd beside slurmctld as its login node).

``clslurm0`` holds slurmctld (10.77.2.10), ``clslurm1`` and ``clslurm2`` one slurmd each (10.77.2.11,
10.77.2.12), all on the bridge ``brslurm`` (10.77.2.1/24, in the root namespace, where the cloudlet
server listens so that agents in allocations can dial it). munged runs in the root namespace: its
socket is a file, reached from every namespace. Two partitions share both nodes: ``lowpri``
(PriorityTier=1, the default) and ``urgent`` (PriorityTier=10); a job in ``urgent`` preempts a
``lowpri`` job by requeueing it (``PreemptType=preempt/partition_prio``, ``PreemptMode=REQUEUE``).

Namespaces, the bridge and the processes inside the namespaces are cleaned up by name before the
cluster starts (a crashed earlier run) and when it stops. Needs root, ``ip``, ``nsenter`` and
Debian's ``slurmctld slurmd slurm-client munge`` (scripts/setup-tests.sh installs them).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BRIDGE = "brslurm"
BRIDGE_ADDRESS = "10.77.2.1"
NAMESPACES = ("clslurm0", "clslurm1", "clslurm2")
ADDRESSES = ("10.77.2.10", "10.77.2.11", "10.77.2.12")
NODES = ("slurm1", "slurm2")
NODE_CPUS = 2
NODE_MEMORY_MB = 8000
CTLD_PORT = 26817
SLURMD_PORT = 26818
LOGIN_PORT = 2222
LOW_PARTITION = "lowpri"
URGENT_PARTITION = "urgent"
SBIN = ("/usr/sbin", "/sbin")
NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")
NEEDED += ("nsenter", "ip")


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":" + ":".join(SBIN))


def missing() -> list[str]:
    """What this machine lacks to run the cluster (root included)."""
    lacking = [name for name in NEEDED if _which(name) is None]
    if os.geteuid() != 0:
        lacking.append("root")
    return lacking


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=10)


def clean_up() -> None:
    """Everything of ours, by name: processes in our namespaces, the namespaces, the bridge."""
    for ns in NAMESPACES:
        if not Path(f"/run/netns/{ns}").exists():
            continue
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10).stdout
        for pid in (int(p) for p in out.split() if p.isdigit()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _ip("netns", "del", ns, check=False)
    for i in range(len(NAMESPACES)):
        _ip("link", "del", f"vslurm{i}", check=False)
    _ip("link", "del", BRIDGE, check=False)


def _network() -> None:
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for i, (ns, address) in enumerate(zip(NAMESPACES, ADDRESSES, strict=True)):
        _ip("netns", "add", ns)
        _ip("link", "add", f"vslurm{i}", "type", "veth", "peer", "name", f"vslurm{i}p")
        _ip("link", "set", f"vslurm{i}", "master", BRIDGE, "up")
        _ip("link", "set", f"vslurm{i}p", "netns", ns)
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", f"vslurm{i}p")
        _ip("-n", ns, "link", "set", f"vslurm{i}p", "up")
        _ip("-n", ns, "link", "set", "lo", "up")


def slurm_conf(tmp: Path, host: str) -> str:
    nodes = ",".join(NODES)
    lines = [
        "ClusterName=cloudlettest",
        f"SlurmctldHost={host}({ADDRESSES[0]})",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        # cred_expire=10: a requeued job may start again after ~10 s (the default is 120).
        f"AuthInfo=socket={tmp / 'munge.sock'},cred_expire=10",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={tmp / 'state'}",
        f"SlurmdSpoolDir={tmp / 'spool' / '%n'}",
        f"SlurmctldPidFile={tmp / 'slurmctld.pid'}",
        f"SlurmdPidFile={tmp / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={tmp / 'slurmctld.log'}",
        f"SlurmdLogFile={tmp / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "ReturnToService=2",
        "MinJobAge=5",
        "KillWait=2",
        "InactiveLimit=0",
    ]
    lines += [
        f"NodeName={name} NodeAddr={address} NodeHostname={name} CPUs={NODE_CPUS} "
        f"RealMemory={NODE_MEMORY_MB} State=UNKNOWN"
        for name, address in zip(NODES, ADDRESSES[1:], strict=True)
    ]
    lines += [
        f"PartitionName={LOW_PARTITION} Nodes={nodes} Default=YES PriorityTier=1 PreemptMode=REQUEUE "
        "MaxTime=INFINITE State=UP",
        f"PartitionName={URGENT_PARTITION} Nodes={nodes} PriorityTier=10 PreemptMode=OFF "
        "MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Login:
    address: str
    port: int
    identity_file: Path
    known_hosts: Path


@dataclass
class SlurmHosts:
    """A running cluster: ``env`` (SLURM_CONF) for client commands; ``client(argv)`` runs one."""

    tmp: Path
    conf: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_"))}
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = env.get("PATH", "") + ":" + ":".join(SBIN)
        return env

    def client(
        self, argv: list[str], check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        env = self.env
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=check)

    def spawn(self, key: str, argv: list[str], ns: str | None = None) -> None:
        if ns is not None:
            argv = ["nsenter", f"--net=/run/netns/{ns}", *argv]
        with open(self.tmp / f"{key}.stdout", "wb") as log:
            self.procs[key] = subprocess.Popen(
                argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def logs(self) -> str:
        tails = []
        for path in sorted(self.tmp.glob("*.log")) + sorted(self.tmp.glob("*.stdout")):
            text = path.read_text(errors="replace").strip()
            if text:
                tails.append(f"[{path.name}] {text[-600:]}")
        return "\n".join(tails)

    def wait(self, ready: object, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for key, proc in self.procs.items():
                if proc.poll() is not None:
                    why = f"{key} exited with {proc.returncode} waiting for {what}"
                    raise RuntimeError(f"{why}:\n{self.logs()}")
            if callable(ready) and ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def node_states(self) -> dict[str, str]:
        out = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def idle(self) -> bool:
        states = self.node_states()
        return all(states.get(name) in ("idle", "mix", "alloc") for name in NODES)

    def start(self) -> None:
        for sub in ("state", "spool", "munge"):
            (self.tmp / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        key = self.tmp / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.conf.write_text(slurm_conf(self.tmp, socket.gethostname().split(".")[0]))
        m = self.tmp / "munge"
        self.spawn(
            "munged",
            [
                _which("munged") or "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.tmp / 'munge.sock'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        self.wait(lambda: (self.tmp / "munge.sock").exists(), "munged's socket")
        self.spawn("slurmctld", [_which("slurmctld") or "slurmctld", "-c", "-D"], NAMESPACES[0])
        self.wait(lambda: self.client(["scontrol", "ping"], check=False).returncode == 0, "slurmctld")
        for name, ns in zip(NODES, NAMESPACES[1:], strict=True):
            self.spawn(f"slurmd-{name}", [_which("slurmd") or "slurmd", "-N", name, "-D"], ns)
        self.wait(self.idle, "both slurmd idle in sinfo", 90)

    def start_login(self) -> Login:
        """An sshd on the controller's host (``clslurm0``) as the cluster's login node: its own
        host key, root's key in its own authorized_keys, no passwords, no PAM."""
        d = self.tmp / "login"
        d.mkdir(mode=0o700, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for name in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True, timeout=30
            )
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        (d / "authorized_keys").chmod(0o600)
        host_pub = (d / "host_key.pub").read_text().split()
        known = d / "known_hosts"
        known.write_text(f"[{ADDRESSES[0]}]:{LOGIN_PORT} {host_pub[0]} {host_pub[1]}\n")
        (d / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {LOGIN_PORT}",
                    f"ListenAddress {ADDRESSES[0]}",
                    f"HostKey {d / 'host_key'}",
                    f"AuthorizedKeysFile {d / 'authorized_keys'}",
                    f"PidFile {d / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                ]
            )
            + "\n"
        )
        sshd = _which("sshd") or "/usr/sbin/sshd"
        self.spawn("sshd", [sshd, "-D", "-e", "-f", str(d / "sshd_config")], NAMESPACES[0])

        def answers() -> bool:
            argv = ["ssh", "-p", str(LOGIN_PORT), "-i", str(d / "client_key"), "-o", "BatchMode=yes"]
            argv += ["-o", "GSSAPIAuthentication=no"]
            argv += ["-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes"]
            done = subprocess.run([*argv, f"root@{ADDRESSES[0]}", "true"], capture_output=True, timeout=30)
            return done.returncode == 0

        self.wait(answers, "the login node's sshd", 30)
        return Login(ADDRESSES[0], LOGIN_PORT, d / "client_key", known)

    def cancel_all(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.client(["scancel", "--quiet", "--full", "-u", "root"], check=False, timeout=10)

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.cancel_all()
        for key in sorted(self.procs, key=lambda k: k == "munged"):  # munged last
            proc = self.procs[key]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)


@contextlib.contextmanager
def slurm_hosts(tmp: Path) -> Iterator[SlurmHosts]:
    """Start the cluster in TMP (cleaning up a crashed run's leftovers first); stop it after."""
    clean_up()
    hosts = SlurmHosts(tmp, tmp / "slurm.conf")
    try:
        _network()
        hosts.start()
        yield hosts
    finally:
        try:
            hosts.stop()
        finally:
            clean_up()
