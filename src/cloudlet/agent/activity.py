"""What is happening on a compute instance, for idle shutdown (standard library only).

``ActivityCollector.collect()`` asks the instance's Jupyter server (REST: ``/api/kernels``,
``/api/terminals``, ``/api/sessions``) and counts established SSH connections to the instance's
sshd port in ``/proc/net/tcp{,6}``. It returns a JSON-ready mapping that the control plane turns
into ``cloudlet.domain.compute.idleness.ActivityReport`` (``report_from_wire``)::

    {"collected_at": iso, "jupyter_reachable": bool, "errors": [...],
     "kernels": [{"id", "name", "execution_state", "last_activity", "notebook"}],
     "terminals": [{"name", "last_activity"}],
     "ssh": {"sessions": n, "last_activity": iso | null}}

SSH "last activity" is the last time the collector saw a session open, so closing the last session
starts the idle count from then; the collector keeps that instant between calls.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TCP_ESTABLISHED = "01"
PROC_NET = Path("/proc/net")


@dataclass
class ActivityCollector:
    jupyter_url: str | None  # e.g. http://127.0.0.1:8888/instances/ci1/lab (its base_url included)
    jupyter_token: str | None = None
    ssh_port: int | None = None
    proc_net: Path = PROC_NET  # /proc/<pid>/net to look inside another network namespace
    timeout_s: float = 3.0
    _ssh_last_seen: datetime | None = field(default=None, init=False)

    def collect(self, now: datetime | None = None) -> dict[str, Any]:
        now = now or datetime.now(UTC)
        report: dict[str, Any] = {
            "collected_at": now.isoformat(),
            "jupyter_reachable": True,
            "errors": [],
            "kernels": [],
            "terminals": [],
        }
        if self.jupyter_url:
            self._jupyter(report)
        sessions = count_ssh_sessions(self.ssh_port, self.proc_net) if self.ssh_port else 0
        if sessions:
            self._ssh_last_seen = now
        last = self._ssh_last_seen.isoformat() if self._ssh_last_seen else None
        report["ssh"] = {"sessions": sessions, "last_activity": last}
        return report

    def _jupyter(self, report: dict[str, Any]) -> None:
        try:
            kernels = self._get("/api/kernels")
            sessions = self._get("/api/sessions")
            terminals = self._terminals()
        except (OSError, ValueError) as exc:  # URLError is an OSError; bad JSON a ValueError
            report["jupyter_reachable"] = False
            report["errors"].append(f"jupyter: {exc}")
            return
        notebooks = {s["kernel"]["id"]: s.get("path") for s in sessions if s.get("kernel")}
        report["kernels"] = [
            {
                "id": k["id"],
                "name": k.get("name"),
                "execution_state": k.get("execution_state", "unknown"),
                "last_activity": k.get("last_activity"),
                "notebook": notebooks.get(k["id"]),
            }
            for k in kernels
        ]
        report["terminals"] = [
            {"name": t.get("name"), "last_activity": t.get("last_activity")} for t in terminals
        ]

    def _terminals(self) -> list[dict[str, Any]]:
        # A server without the terminals extension answers 404: no terminals, not an error.
        try:
            return list(self._get("/api/terminals"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def _get(self, path: str) -> Any:
        assert self.jupyter_url is not None
        request = urllib.request.Request(self.jupyter_url.rstrip("/") + path)
        if self.jupyter_token:
            request.add_header("Authorization", f"token {self.jupyter_token}")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read().decode())


def count_ssh_sessions(port: int, proc_net: Path = PROC_NET) -> int:
    """Established TCP connections whose local port is ``port`` (IPv4 and IPv6)."""
    total = 0
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_net / name).read_text().splitlines()[1:]
        except OSError:
            continue
        total += sum(1 for line in lines if _established_on(line, port))
    return total


def _established_on(line: str, port: int) -> bool:
    # "  sl  local_address rem_address   st ...": local is HEXIP:HEXPORT, state 01 = ESTABLISHED.
    parts = line.split()
    if len(parts) < 4 or parts[3] != TCP_ESTABLISHED:
        return False
    try:
        return int(parts[1].rsplit(":", 1)[1], 16) == port
    except (IndexError, ValueError):
        return False
