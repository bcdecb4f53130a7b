"""Per-run resource samples: CPU, memory and I/O of each run's process tree (from /proc), the node's
disk and network, and GPU utilisation and memory through NVML where a GPU is present.

A run's processes are the run's launcher and its descendants. The node's cgroup (when the provider
made one) also holds the agent and every other run of the node, so a run's own numbers come from
its process tree: CPU is utime+stime (+ the reaped children's), memory the tree's resident set.
Without a GPU (no NVML library, no driver, no device) a sample says ``"gpu": false`` and carries
no GPU fields: absent, not zeros.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
HZ = os.sysconf("SC_CLK_TCK")
MAX_BUFFERED = 2000  # samples kept while the server is away (about 3 h of one run at 5 s)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (field 3, the state, is index 0)."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """`root` and its live descendants (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def tree_counters(pids: Iterable[int]) -> dict[str, float]:
    """cpu seconds, resident bytes, read and written bytes of these processes."""
    cpu = rss = read = write = 0.0
    for pid in pids:
        fields = _stat_fields(pid)
        if not fields or len(fields) < 15:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of stat, indexes 11-14 here.
        cpu += sum(int(x) for x in fields[11:15]) / HZ
        statm = (_read(f"/proc/{pid}/statm") or "").split()
        if len(statm) > 1:
            rss += int(statm[1]) * PAGE
        for line in (_read(f"/proc/{pid}/io") or "").splitlines():
            key, _, value = line.partition(":")
            if key == "read_bytes":
                read += int(value)
            elif key == "write_bytes":
                write += int(value)
    return {"cpu_s": cpu, "rss": rss, "read": read, "write": write}


def network_bytes() -> tuple[int, int]:
    """(received, sent) bytes of the node's interfaces but loopback."""
    rx = tx = 0
    for line in (_read("/proc/net/dev") or "").splitlines()[2:]:
        name, _, rest = line.partition(":")
        cols = rest.split()
        if name.strip() != "lo" and len(cols) > 8:
            rx, tx = rx + int(cols[0]), tx + int(cols[8])
    return rx, tx


class Nvml:
    """GPU utilisation and memory through NVML (``nvidia-ml-py``), imported on first use; if the
    library, the driver or a device is missing, `read` answers None from then on."""

    def __init__(self) -> None:
        self._handles: list[Any] | None = None
        self._nvml: Any = None
        self.reason = ""

    def _open(self) -> list[Any]:
        if self._handles is None:
            self._handles = []
            try:
                import pynvml

                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                self._nvml = pynvml
                self.reason = "" if count else "no GPU device"
            except Exception as exc:  # ImportError, NVMLError (no driver, no library)
                self.reason = f"no GPU ({type(exc).__name__}: {exc})"
        return self._handles

    def read(self) -> dict[str, float] | None:
        handles = self._open()
        if not handles:
            return None
        try:
            utils = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
            used = [self._nvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
        except Exception as exc:  # a device lost mid-run: report none rather than zeros
            self.reason = f"NVML failed: {exc}"
            return None
        return {
            "gpu_percent": sum(utils) / len(utils),
            "gpu_memory_bytes": float(sum(used)),
            "gpu_count": float(len(handles)),
        }


class RunMonitor:
    """Samples the running runs every `interval_s` in a thread; the poll takes the buffered samples."""

    def __init__(
        self,
        runs: Callable[[], list[tuple[str, int]]],
        node_dir: Path,
        interval_s: float = 5.0,
        gpu: Nvml | None = None,
    ) -> None:
        self.runs = runs  # (run id, launcher pid) of the running runs
        self.node_dir = node_dir
        self.interval_s = interval_s
        self.gpu = gpu or Nvml()
        self._buffer: deque[dict[str, Any]] = deque(maxlen=MAX_BUFFERED)
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, dict[str, float]]] = {}
        self._last_net: tuple[float, tuple[int, int]] | None = None

    def sample_once(self, now: float | None = None) -> list[dict[str, Any]]:
        """One sample per running run (a run's first look only sets its baseline)."""
        now = time.monotonic() if now is None else now
        wall = time.time()
        net = network_bytes()
        net_rates = {}
        if self._last_net is not None and now > self._last_net[0]:
            dt = now - self._last_net[0]
            net_rates = {
                "net_rx_bps": max(0, net[0] - self._last_net[1][0]) / dt,
                "net_tx_bps": max(0, net[1] - self._last_net[1][1]) / dt,
            }
        self._last_net = (now, net)
        try:
            st = os.statvfs(self.node_dir)
            disk = float((st.f_blocks - st.f_bfree) * st.f_frsize)
        except OSError:
            disk = None
        gpu = self.gpu.read()
        out, seen = [], set()
        for run_id, pid in self.runs():
            seen.add(run_id)
            counters = tree_counters(process_tree(pid))
            last = self._last.get(run_id)
            self._last[run_id] = (now, counters)
            if last is None or now <= last[0]:
                continue
            dt = now - last[0]
            sample: dict[str, Any] = {
                "run": run_id,
                "at": wall,
                "cpu_percent": max(0.0, counters["cpu_s"] - last[1]["cpu_s"]) * 100 / dt,
                "memory_bytes": counters["rss"],
                "read_bps": max(0.0, counters["read"] - last[1]["read"]) / dt,
                "write_bps": max(0.0, counters["write"] - last[1]["write"]) / dt,
                "disk_used_bytes": disk,
                **net_rates,
                "gpu": gpu is not None,
                **(gpu or {}),
            }
            out.append(sample)
        for gone in set(self._last) - seen:
            del self._last[gone]
        with self._lock:
            self._buffer.extend(out)
        return out

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            taken = list(self._buffer)
            self._buffer.clear()
        return taken

    def give_back(self, samples: list[dict[str, Any]]) -> None:
        """Samples a failed poll did not deliver: sent with the next one (oldest dropped first)."""
        with self._lock:
            self._buffer.extendleft(reversed(samples))

    def loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.sample_once()
            except OSError:
                continue  # /proc raced with an exiting process: the next round sees it
