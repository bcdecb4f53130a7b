"""Slurm peer for the ``dispatch`` benchmark: a throwaway Slurm on loopback, measured like cloudlet.

``measure(SlurmPlan(...))`` (in-process, from ``bench/dispatch.py``; or ``python -m bench._slurm_peer
OUT.json [--quick]`` on its own):

* finds ``slurmctld``, ``slurmd``, ``munged`` and the client commands; when they are missing and this
  process is root with ``apt-get``, installs Debian's ``slurmctld slurmd slurm-client munge``
  (``--no-install-recommends``; ``BENCH_SLURM_INSTALL=0`` turns that off), else reports why it skipped;
* starts, in a fresh temp dir, its own ``munged`` (own key, socket, pid, log and seed files) and a
  Slurm cluster: ``slurmctld -c -D`` and two ``slurmd -N benchN -D`` (1 CPU each, on 127.0.0.1 with
  their own ports, below 32768), ``select/cons_tres``, ``proctrack/linuxproc``, ``task/none``, no
  accounting, ``SchedulerParameters`` tuned for latency; waits until ``sinfo`` shows both idle;
* measures warm latency, one job at a time, from the process's own ``date +%s.%N``: ``sbatch --wrap``
  (output to a file, read back) and ``srun`` (stdout); throughput: N ``sbatch --wrap true`` jobs
  submitted by as many threads as cloudlet uses, and one ``sbatch --array=1-N`` job array (Slurm's
  fast path), first submit -> queue empty (no ``sacct``: accounting needs slurmdbd; ``squeue`` is
  polled every 20 ms); RSS of the daemons;
* tears everything down on success, error, Ctrl-C or SIGTERM: cancels its jobs, stops the daemons it
  started (by pid), kills leftover job steps (``slurmstepd`` and their children, found by a marker in
  their environment and a start time after ours), removes the temp dir. Never matches by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench._server import status_kib
from bench._stats import summarize_ns

HOST = "127.0.0.1"
PAYLOAD = "date +%s.%N"
NODES = ("bench1", "bench2")
DAEMONS = ("slurmctld", "slurmd", "munged")
CLIENTS = ("sbatch", "srun", "sinfo", "squeue", "scancel", "scontrol")
APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
MARKER = "CLOUDLET_BENCH_SLURM"
POLL_S = 0.02
ACTIVE = "PD,CF,R,CG,S,RQ,RS,RH,SI,SO,ST"
SCHEDULER_PARAMETERS = (
    "batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1,"
    "default_queue_depth=1000,max_rpc_cnt=0"
)


@dataclass(frozen=True)
class SlurmPlan:
    sbatch_latency: int
    srun_latency: int
    throughput: int
    array: int
    submit_threads: int
    deadline_s: float

    @classmethod
    def make(cls, quick: bool, submit_threads: int = 8) -> SlurmPlan:
        if quick:
            return cls(30, 50, 50, 100, submit_threads, 90.0)
        return cls(60, 200, 300, 500, submit_threads, 420.0)


# -- installation -------------------------------------------------------------------------------
def _missing() -> list[str]:
    return [name for name in DAEMONS + CLIENTS if not _which(name)]


def _which(name: str) -> str | None:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return shutil.which(name, path=path)


def ensure_installed() -> tuple[bool, str]:
    """(True, how) when every binary is there (installing with apt-get if allowed), else (False, why)."""
    missing = _missing()
    if not missing:
        return True, "already installed"
    why = f"{', '.join(missing)} not installed on this machine"
    if os.environ.get("BENCH_SLURM_INSTALL", "1") == "0":
        return False, f"{why} and BENCH_SLURM_INSTALL=0"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False, f"{why} (and no apt-get as root to install {' '.join(APT_PACKAGES)})"
    print(f"   installing {' '.join(APT_PACKAGES)} with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{why}; apt-get install failed: {exc}"
    if proc.returncode != 0 or _missing():
        return False, f"{why}; apt-get install exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return True, f"installed with apt-get in {time.perf_counter() - t0:.1f} s"


# -- process helpers ----------------------------------------------------------------------------
def _free_ports(count: int) -> list[int]:
    """COUNT distinct ports in 20000-32767 that bind on loopback now (below the ephemeral range)."""
    found: list[int] = []
    while len(found) < count:
        port = random.randint(20000, 32767)
        if port in found:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        found.append(port)
    return found


def _start_ticks(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw.rpartition(")")[2].split()[19])


def _marked(token: str, since_ticks: int) -> dict[int, int]:
    """pid -> start ticks of processes carrying ``MARKER=token`` in their environment, started after
    SINCE_TICKS (slurmstepd and the jobs it runs inherit it from slurmd / sbatch)."""
    needle = f"{MARKER}={token}".encode()
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            start = _start_ticks(int(entry))
            if start is not None and start >= since_ticks:
                found[int(entry)] = start
    return found


def _kill_matching(known: dict[int, int]) -> int:
    killed = 0
    for pid, start in known.items():
        if _start_ticks(pid) == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM unwinds (so ``finally`` tears the cluster down) when we can hook it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- the throwaway cluster ----------------------------------------------------------------------
class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.token = secrets.token_hex(8)
        self.env = {**os.environ, "SLURM_CONF": str(tmp / "slurm.conf"), MARKER: self.token}
        for key in ("SLURM_JOB_ID", "SLURM_JOBID", "SQUEUE_FORMAT", "SBATCH_PARTITION"):
            self.env.pop(key, None)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.since_ticks = _start_ticks(os.getpid()) or 0
        self.ports: dict[str, int] = {}

    def _conf(self) -> str:
        t = self.tmp
        ctld, slurmd, *node_ports = _free_ports(2 + len(NODES))
        self.ports = {"slurmctld": ctld, "slurmd": slurmd} | dict(zip(NODES, node_ports, strict=True))
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=cloudletbench",
            f"SlurmctldHost={host}({HOST})",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            f"AuthInfo=socket={t / 'munge.sock'}",
            "CredType=cred/munge",
            "AuthType=auth/munge",
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={t / 'state'}",
            f"SlurmdSpoolDir={t / 'spool' / '%n'}",
            f"SlurmctldPidFile={t / 'slurmctld.pid'}",
            f"SlurmdPidFile={t / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={t / 'slurmctld.log'}",
            f"SlurmdLogFile={t / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            f"SchedulerParameters={SCHEDULER_PARAMETERS}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            "MinJobAge=2",
            "KillWait=1",
            "InactiveLimit=0",
            "MaxArraySize=10001",
            "MaxJobCount=20000",
        ]
        lines += [
            f"NodeName={name} NodeAddr={HOST} NodeHostname={host} Port={self.ports[name]} CPUs=1 "
            "RealMemory=1000 State=UNKNOWN"
            for name in NODES
        ]
        lines.append(f"PartitionName=bench Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _spawn(self, key: str, argv: list[str]) -> None:
        log = open(self.tmp / f"{key}.stdout", "wb")  # noqa: SIM115 - closed when the child has it
        try:
            self.procs[key] = subprocess.Popen(
                argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()

    def start(self, deadline: float) -> float:
        t0 = time.perf_counter()
        t = self.tmp
        for sub in ("state", "spool", "munge"):
            (t / sub).mkdir(mode=0o700)
        key = t / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (t / "slurm.conf").write_text(self._conf())
        self._spawn(
            "munged",
            [
                _which("munged") or "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={t / 'munge.sock'}",
                f"--pid-file={t / 'munge' / 'munged.pid'}",
                f"--log-file={t / 'munge' / 'munged.log'}",
                f"--seed-file={t / 'munge' / 'munged.seed'}",
            ],
        )
        self._wait(lambda: (t / "munge.sock").exists(), "munged socket", deadline)
        self._spawn("slurmctld", [_which("slurmctld") or "slurmctld", "-c", "-D"])
        self._wait(
            lambda: self.client(["scontrol", "ping"], check=False).returncode == 0, "slurmctld", deadline
        )
        for name in NODES:
            self._spawn(f"slurmd-{name}", [_which("slurmd") or "slurmd", "-N", name, "-D"])
        self._wait(self._nodes_idle, "both nodes idle in sinfo", deadline)
        return time.perf_counter() - t0

    def _nodes_idle(self) -> bool:
        out = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
        states = dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)
        return all(states.get(name) == "idle" for name in NODES)

    def _wait(self, ready: Any, what: str, deadline: float) -> None:
        until = min(deadline, time.monotonic() + 60)
        while time.monotonic() < until:
            for key, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{key} exited with {proc.returncode} waiting for {what}: {self.logs()}"
                    )
            if ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def logs(self) -> str:
        tails = []
        for path in sorted(self.tmp.glob("*.log")) + sorted(self.tmp.glob("*.stdout")):
            text = path.read_text(errors="replace").strip()
            if text:
                tails.append(f"[{path.name}] {text[-400:]}")
        return " ".join(tails)[-1500:]

    def client(
        self, argv: list[str], check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def active(self) -> int:
        out = self.client(["squeue", "-h", "-r", "-t", ACTIVE, "-o", "%i"], check=False).stdout
        return len(out.split())

    def rss(self) -> dict[str, Any]:
        by: dict[str, dict[str, int | None]] = {}
        for key, proc in self.procs.items():
            by[key] = {"rss_kib": status_kib(proc.pid, "VmRSS"), "hwm_kib": status_kib(proc.pid, "VmHWM")}
        total = sum(v["rss_kib"] or 0 for v in by.values())
        return {"total_kib": total, "by_process": by}

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.client(["scancel", "--quiet", "--full", "-u", "root"], check=False, timeout=10)
                until = time.monotonic() + 5
                while time.monotonic() < until and self.active():
                    time.sleep(0.1)
        steps = _marked(self.token, self.since_ticks)
        for key in sorted(self.procs, key=lambda k: k == "munged"):  # slurm first, munged last
            proc = self.procs[key]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        steps.update(_marked(self.token, self.since_ticks))
        out["leftover_processes_killed"] = _kill_matching(steps)
        out["exit_codes"] = {key: proc.returncode for key, proc in self.procs.items()}
        return out


# -- measurements -------------------------------------------------------------------------------
def _ns(seconds: list[float]) -> list[int]:
    return [int(s * 1e9) for s in seconds]


def _first_float(text: str) -> float | None:
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            return float(line.strip())
    return None


def _wait_quiet(cluster: Cluster, until: float) -> bool:
    while time.monotonic() < until:
        if not cluster.active():
            return True
        time.sleep(POLL_S)
    return False


def _sbatch_latency(cluster: Cluster, n: int, deadline: float, warmup: int = 3) -> dict[str, Any]:
    outdir = cluster.tmp / "out"
    outdir.mkdir(exist_ok=True)
    lat: list[float] = []
    submit: list[float] = []
    failures: list[str] = []
    for i in range(-warmup, n):
        if time.monotonic() > deadline:
            break
        path = outdir / f"lat-{i + warmup}.out"
        t0 = time.time()
        proc = cluster.client(["sbatch", "--parsable", "-N1", "-n1", f"--output={path}", f"--wrap={PAYLOAD}"])
        submit_s = time.time() - t0
        ts = None
        until = min(deadline, time.monotonic() + 30)
        while time.monotonic() < until:
            if path.exists():
                ts = _first_float(path.read_text())
                if ts is not None:
                    break
            time.sleep(0.005)
        if ts is None:
            failures.append(f"job {proc.stdout.strip()}: no timestamp")
        elif i >= 0:
            lat.append(ts - t0)
            submit.append(submit_s)
        _wait_quiet(cluster, min(deadline, time.monotonic() + 30))
    return {
        "latency": summarize_ns(_ns(lat)),
        "sbatch_call": summarize_ns(_ns(submit)),
        "failures": failures[:5],
        "failed": len(failures),
    }


def _srun_latency(cluster: Cluster, n: int, deadline: float, warmup: int = 3) -> dict[str, Any]:
    lat: list[float] = []
    failures: list[str] = []
    for i in range(-warmup, n):
        if time.monotonic() > deadline:
            break
        t0 = time.time()
        proc = cluster.client(["srun", "--quiet", "-N1", "-n1", "date", "+%s.%N"], check=False)
        ts = _first_float(proc.stdout)
        if ts is None:
            failures.append(f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}")
        elif i >= 0:
            lat.append(ts - t0)
    return {"latency": summarize_ns(_ns(lat)), "failures": failures[:5], "failed": len(failures)}


def _drain(cluster: Cluster, t_first: float, count: int, deadline: float) -> dict[str, Any]:
    done = _wait_quiet(cluster, deadline)
    wall = time.time() - t_first
    if not done:  # leave an empty queue for the next series
        cluster.client(["scancel", "--quiet", "-u", "root"], check=False)
        _wait_quiet(cluster, time.monotonic() + 10)
    return {
        "count": count,
        "completed": count if done else None,
        "timed_out": not done,
        "wall_s": round(wall, 4),
        "jobs_per_s": round(count / wall, 2) if done and wall > 0 else None,
        "end_resolution_s": POLL_S,
    }


def _sbatch_throughput(cluster: Cluster, n: int, threads: int, deadline: float) -> dict[str, Any]:
    argv = ["sbatch", "--parsable", "--quiet", "-N1", "-n1", "--output=/dev/null", "--wrap=true"]
    failed = 0

    def submit(_: int) -> bool:
        return cluster.client(argv, check=False).returncode == 0

    t_first = time.time()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        ok = list(pool.map(submit, range(n)))
    submit_wall = time.time() - t_first
    failed = ok.count(False)
    out = _drain(cluster, t_first, n - failed, deadline)
    return out | {
        "submit_threads": threads,
        "submit_wall_s": round(submit_wall, 4),
        "submit_rate_per_s": round(n / submit_wall, 1) if submit_wall > 0 else None,
        "submit_failed": failed,
    }


def _array_throughput(cluster: Cluster, n: int, deadline: float) -> dict[str, Any]:
    argv = ["sbatch", "--parsable", "--quiet", f"--array=1-{n}", "-n1", "--output=/dev/null", "--wrap=true"]
    t_first = time.time()
    cluster.client(argv)
    submit_s = time.time() - t_first
    return _drain(cluster, t_first, n, deadline) | {"submit_s": round(submit_s, 4)}


def _version() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        argv = [_which("slurmctld") or "slurmctld", "-V"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip() or None
    return None


def measure(plan: SlurmPlan) -> dict[str, Any]:
    """Everything above; a dict with "skipped" when Slurm cannot run here."""
    ok, how = ensure_installed()
    if not ok:
        return {"skipped": how}
    out: dict[str, Any] = {"install": how, "version": _version(), "plan": asdict(plan)}
    t_start = time.monotonic()
    deadline = t_start + plan.deadline_s
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-slurm-", dir="/tmp"))
    cluster = Cluster(tmp)
    try:
        with _sigterm_as_exit():
            out["start_s"] = round(cluster.start(deadline), 3)
            out["config"] = {
                "nodes": len(NODES),
                "cpus_per_node": 1,
                "ports": cluster.ports,
                "scheduler_parameters": SCHEDULER_PARAMETERS,
            }
            out["rss_idle"] = cluster.rss()
            out["sbatch"] = _sbatch_latency(cluster, plan.sbatch_latency, deadline)
            out["srun"] = _srun_latency(cluster, plan.srun_latency, deadline)
            # throughput gets what is left, split evenly between the two series
            left = max(10.0, deadline - time.monotonic())
            out["throughput"] = _sbatch_throughput(
                cluster, plan.throughput, plan.submit_threads, time.monotonic() + left / 2
            )
            out["rss_after_throughput"] = cluster.rss()
            out["array"] = _array_throughput(cluster, plan.array, max(deadline, time.monotonic() + 10))
            out["rss"] = cluster.rss()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        out["teardown"] = cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        out["wall_s"] = round(time.monotonic() - t_start, 1)
    return out


# -- how it enters dispatch's table -------------------------------------------------------------
def peers(slurm: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Rows for dispatch's comparison table: name -> (latency summary, throughput dict)."""
    if not isinstance(slurm, dict) or slurm.get("skipped"):
        return {}
    return {
        "slurm sbatch": ((slurm.get("sbatch") or {}).get("latency"), slurm.get("throughput")),
        "slurm srun": ((slurm.get("srun") or {}).get("latency"), None),
        "slurm array": (None, slurm.get("array")),
    }


def describe(slurm: dict[str, Any]) -> str:
    """One markdown paragraph: how the Slurm peer ran."""
    if not isinstance(slurm, dict):
        return f"Slurm: {slurm}."
    if slurm.get("skipped"):
        return f"Slurm skipped: {slurm['skipped']}."
    tp, arr = slurm.get("throughput") or {}, slurm.get("array") or {}
    rss = (slurm.get("rss") or {}).get("total_kib")
    text = (
        f"Slurm ({slurm.get('version')}, throwaway cluster on loopback: own munged, slurmctld, "
        "2 slurmd × 1 CPU, "
        f"`cons_tres`, `linuxproc`, `SchedulerParameters={SCHEDULER_PARAMETERS}`; up in "
        f"{slurm.get('start_s')} s): `slurm sbatch` = `sbatch --wrap '{PAYLOAD}'` one at a time, timestamp "
        f"read from its output file; `slurm srun` = `srun date +%s.%N`; throughput: {tp.get('count')} "
        f"`sbatch --wrap true` from {tp.get('submit_threads')} threads, and `slurm array` = one "
        f"`sbatch --array=1-{arr.get('count')}`, first submit -> `squeue` empty "
        f"(polled every {POLL_S * 1000:.0f} ms)"
        + (" (TIMED OUT)" if tp.get("timed_out") or arr.get("timed_out") else "")
        + "."
    )
    if rss:
        text += f" Slurm daemons' RSS (slurmctld + 2 slurmd + munged) after its run: {rss} KiB."
    if slurm.get("error"):
        text += f" Error: {slurm['error']}."
    return text


def report_line(slurm: dict[str, Any]) -> str:
    if not isinstance(slurm, dict):
        return f"slurm: {slurm}"
    if slurm.get("skipped"):
        return f"slurm skipped: {slurm['skipped']}"
    rss = (slurm.get("rss") or {}).get("total_kib")
    line = f"slurm ({slurm.get('version')}): up in {slurm.get('start_s')} s, daemons' RSS {rss} KiB"
    line += f", {slurm.get('wall_s')} s in all"
    return line + (f"; error: {slurm['error']}" if slurm.get("error") else "")


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    args = [a for a in argv if not a.startswith("--")]
    data = measure(SlurmPlan.make(quick))
    text = json.dumps(data, indent=2)
    if args:
        Path(args[0]).write_text(text + "\n")
    print(text)
    return 1 if data.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
