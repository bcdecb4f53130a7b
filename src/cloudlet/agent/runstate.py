"""A run's bookkeeping: status, stop requests, byte counters for its spooled output."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any


def utf8_cut(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 sequence."""
    n = len(data)
    for i in range(n - 1, max(n - 4, 0) - 1, -1):
        b = data[i]
        if b & 0xC0 == 0x80:  # continuation byte: keep looking for its lead byte
            continue
        if b >> 5 == 0b110:
            need = 2
        elif b >> 4 == 0b1110:
            need = 3
        elif b >> 3 == 0b11110:
            need = 4
        else:
            need = 1  # ASCII, or an invalid byte sent as is
        return i if i + need > n else n
    return n


def exit_code_of(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class Run:
    def __init__(self, spec: dict[str, Any], work_dir: Path) -> None:
        self.spec = spec
        self.run_id: str = str(spec["run"])
        self.cwd = work_dir / self.run_id
        self.spool = work_dir / ".logs" / f"{self.run_id}.log"
        self.pid: int | None = None
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.exit_code: int | None = None
        self.reason = "exited"
        self.written = 0  # bytes in the spool
        self.sent_raw = 0  # spool bytes acknowledged by the server
        self.sent_text = 0  # offset in the server's log (bytes of the UTF-8 text sent)
        self.stop_reason: str | None = None
        self.stop_requested = threading.Event()
        self.thread: threading.Thread | None = None
        self.running_reported = False  # the server was told (after REPORT_RUNNING_AFTER_S)

    @property
    def exited(self) -> bool:
        return self.exit_code is not None

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run_id,
            "state": "exited" if self.exited else "running",
            "pid": self.pid,
            "started_at": self.started_at,
        }
        if self.exited:
            out["exit_code"] = self.exit_code
            out["ended_at"] = self.ended_at
        return out

    def request_stop(self, reason: str) -> None:
        if not self.stop_requested.is_set():
            self.stop_reason = reason
            self.stop_requested.set()


def killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_group(pgid: int, sig: int, spare: int | None = None) -> None:
    """``killpg``, except that ``spare`` (a sandbox's outer ``bwrap``, which would die of a SIGTERM
    and take the job with it before the job could act on it) is left out. SIGKILL goes to all."""
    if spare is None or sig == signal.SIGKILL:
        killpg(pgid, sig)
        return
    for pid in group_members(pgid):
        if pid != spare:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is ``pgid`` (from ``/proc/<pid>/stat``)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append(int(entry))
    return members
