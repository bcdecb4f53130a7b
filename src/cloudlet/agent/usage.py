"""Resources and usage from /proc, cgroup v1 files and os.statvfs; GPUs via nvidia-smi if present."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
NVIDIA_SMI_ARGS = ["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]


def _read(path: Path | str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _meminfo() -> dict[str, int]:
    """/proc/meminfo in kB."""
    out: dict[str, int] = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0])
    return out


def own_cgroup(controller: str) -> Path | None:
    """This process's cgroup v1 directory for `controller`, when it is not the root."""
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") and path not in ("", "/"):
            candidate = CGROUP_ROOT / controller / path.lstrip("/")
            if candidate.is_dir():
                return candidate
    return None


def _cgroup_int(controller: str, name: str) -> int | None:
    cg = own_cgroup(controller)
    raw = _read(cg / name) if cg else None
    try:
        return int(raw.strip()) if raw else None
    except ValueError:
        return None


def find_nvidia_smi() -> str | None:
    for d in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(d, "nvidia-smi")
        if d and os.access(candidate, os.X_OK):
            return candidate
    return None


def gpu_stats() -> list[tuple[float, float]]:
    """[(utilization %, memory used MiB)] per GPU; [] when nvidia-smi is absent or fails."""
    exe = find_nvidia_smi()
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, *NVIDIA_SMI_ARGS], capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    stats = []
    for line in out.stdout.splitlines():
        try:
            util, mem = (float(x.strip()) for x in line.split(",")[:2])
        except ValueError:
            continue
        stats.append((util, mem))
    return stats


def _cap(seen: float, limit: float | None) -> float:
    return seen if limit is None else min(seen, limit)


def resources(
    node_dir: Path, vcpus: float | None, memory_gb: float | None, gpus: int | None
) -> dict[str, Any]:
    """What the agent sees, capped by the size's resources."""
    seen_cpus: float = len(os.sched_getaffinity(0))
    quota, period = _cgroup_int("cpu", "cpu.cfs_quota_us"), _cgroup_int("cpu", "cpu.cfs_period_us")
    if quota and period and quota > 0:
        seen_cpus = min(seen_cpus, quota / period)
    mem_gb = _meminfo().get("MemTotal", 0) / 1024**2
    limit = _cgroup_int("memory", "memory.limit_in_bytes")
    if limit and limit < 1 << 60:
        mem_gb = min(mem_gb, limit / 1024**3)
    try:
        st = os.statvfs(node_dir)
        disk_gb = st.f_blocks * st.f_frsize / 1024**3
    except OSError:
        disk_gb = 0.0
    return {
        "vcpus": round(_cap(seen_cpus, vcpus), 2),
        "memory_gb": round(_cap(mem_gb, memory_gb), 2),
        "gpus": int(_cap(len(gpu_stats()), gpus)),
        "disk_gb": round(disk_gb, 1),
    }


class UsageSampler:
    """cpu_percent between two samples (of this node's cgroup if it has one, else the host)."""

    def __init__(self, node_dir: Path, vcpus: float | None = None) -> None:
        self.node_dir = node_dir
        self.vcpus = vcpus
        self._last: tuple[float, float] | None = None

    def _cpu_sample(self) -> tuple[float, float] | None:
        """(busy cpu-seconds, wall seconds)."""
        usage_ns = _cgroup_int("cpuacct", "cpuacct.usage")
        if usage_ns is not None:
            return usage_ns / 1e9, time.monotonic() * (self.vcpus or len(os.sched_getaffinity(0)))
        first = (_read("/proc/stat") or "").split("\n", 1)[0].split()
        if len(first) < 5 or first[0] != "cpu":
            return None
        ticks = [int(x) for x in first[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        return (sum(ticks) - idle) / hz, sum(ticks) / hz

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        now = self._cpu_sample()
        cpu = 0.0
        if now and self._last and now[1] > self._last[1]:
            cpu = 100.0 * (now[0] - self._last[0]) / (now[1] - self._last[1])
        self._last = now
        out["cpu_percent"] = round(max(0.0, min(cpu, 100.0)), 1)
        used = _cgroup_int("memory", "memory.usage_in_bytes")
        if used is None:
            info = _meminfo()
            used = (info.get("MemTotal", 0) - info.get("MemAvailable", 0)) * 1024
        out["memory_mb"] = round(used / 1024**2, 1)
        try:
            st = os.statvfs(self.node_dir)
            out["disk_mb"] = round((st.f_blocks - st.f_bfree) * st.f_frsize / 1024**2, 1)
        except OSError:
            out["disk_mb"] = 0.0
        gpus = gpu_stats()
        if gpus:
            out["gpu_percent"] = round(sum(u for u, _ in gpus) / len(gpus), 1)
            out["gpu_memory_mb"] = round(sum(m for _, m in gpus), 1)
        return out
