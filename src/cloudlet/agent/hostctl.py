"""``python -m cloudlet.agent.hostctl``: the host side of an SSH host's nodes (standard library only).

The control plane installs the agent package on a host (``providers/ssh_hosts.py``) and drives its
nodes through this tool over SSH, one command per call, each answering one JSON line:

- ``start NODE_DIR``: start the node whose environment is ``NODE_DIR/env.json`` (written by the
  control plane, mode 600), supervised: by systemd (``systemd-run --user``, ``Restart=on-failure``)
  where the user has a systemd manager, else by a watchdog process (``watch``, detached in its own
  session) that restarts the agent when it dies, unless it exited cleanly (0: terminated, revoked,
  orphaned) or ``NODE_DIR/stop`` exists. Idempotent: a node already running is left alone.
- ``stop NODE_DIR``: stop its supervisor, its agent and every process tagged with its node id
  (SIGTERM, SIGKILL after 2 s), then remove its ``work``/``mnt``/``os`` folders.
- ``list AGENT_DIR INSTALLATION``: the live nodes of that installation under ``AGENT_DIR/nodes``.
- ``log NODE_DIR BYTES``: the tail of the node's agent log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENV_FILE = "env.json"
AGENT_LOG = "agent.log"
WATCHDOG_PID = "watchdog.pid"
AGENT_PID = "agent.pid"
STOP_FILE = "stop"
SYSTEMD_UNIT = "unit"
RESTART_DELAY_S = 1.0
MAX_RESTARTS = 20  # in a row without a minute of uptime: give up (the node goes lost)
TERM_WAIT_S = 2.0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _pid(path: Path) -> int | None:
    raw = _read(path).strip()
    return int(raw) if raw.isdigit() else None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    state = raw.rpartition(b")")[2].split()
    return bool(state) and state[0] != b"Z"


def node_env(node_dir: Path) -> dict[str, str]:
    data = json.loads(_read(node_dir / ENV_FILE) or "{}")
    return {str(k): str(v) for k, v in data.items()}


def tagged_pids(node_id: str) -> list[int]:
    """This user's live processes whose environment carries ``CLOUDLET_NODE_ID=node_id``."""
    needle = f"CLOUDLET_NODE_ID={node_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in raw.split(b"\0") and alive(int(entry)):
            found.append(int(entry))
    return found


def _systemd_user() -> bool:
    if not os.path.isdir("/run/systemd/system") or shutil.which("systemd-run") is None:
        return False
    probe = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True, text=True)
    return probe.stdout.strip() in ("running", "degraded")


def _agent_argv(env: dict[str, str]) -> list[str]:
    return [env.get("CLOUDLET_PYTHON") or sys.executable, "-m", "cloudlet.agent"]


# -- start / watch ------------------------------------------------------------------------------
def start(node_dir: Path) -> dict[str, Any]:
    env = node_env(node_dir)
    running = _pid(node_dir / WATCHDOG_PID)
    if alive(running):
        return {"started": False, "supervisor": "watchdog", "pid": running}
    (node_dir / STOP_FILE).unlink(missing_ok=True)
    for sub in ("os", "mnt", "work"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    if _systemd_user():
        unit = f"cloudlet-{env.get('CLOUDLET_NODE_ID', node_dir.name)}"
        env_file = node_dir / "agent.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        env_file.chmod(0o600)
        subprocess.run(
            [
                *("systemd-run", "--user", "--collect", f"--unit={unit}"),
                *("-p", "Restart=on-failure", "-p", f"RestartSec={RESTART_DELAY_S:g}"),
                *("-p", f"EnvironmentFile={env_file}", "-p", f"WorkingDirectory={node_dir}"),
                *("-p", f"StandardOutput=append:{node_dir / AGENT_LOG}", "-p", "StandardError=inherit"),
                *_agent_argv(env),
            ],
            check=True,
            capture_output=True,
        )
        (node_dir / SYSTEMD_UNIT).write_text(unit)
        return {"started": True, "supervisor": "systemd", "unit": unit}
    pid = os.fork()
    if pid == 0:  # the watchdog: its own session, no terminal, outlives this SSH command
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        try:
            watch(node_dir)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        started = _pid(node_dir / WATCHDOG_PID)
        if alive(started) and _pid(node_dir / AGENT_PID):
            return {"started": True, "supervisor": "watchdog", "pid": started}
        time.sleep(0.005)
    raise SystemExit(f"the watchdog of {node_dir} did not start")


def watch(node_dir: Path) -> None:
    """Run the agent; restart it when it dies (not when it exits 0 or ``stop`` exists)."""
    (node_dir / WATCHDOG_PID).write_text(str(os.getpid()))
    env = node_env(node_dir)
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    restarts = 0
    while not stopping and not (node_dir / STOP_FILE).exists():
        began = time.monotonic()
        with open(node_dir / AGENT_LOG, "ab") as log:
            proc = subprocess.Popen(
                _agent_argv(env),
                env=env,
                cwd=node_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (node_dir / AGENT_PID).write_text(str(proc.pid))
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:
                continue
        if stopping or code == 0:
            break
        restarts = 0 if time.monotonic() - began > 60 else restarts + 1
        if restarts > MAX_RESTARTS:
            break
        with open(node_dir / AGENT_LOG, "ab") as log:
            log.write(f"cloudlet-watchdog: agent exited with {code}; restarting\n".encode())
        time.sleep(RESTART_DELAY_S)
    (node_dir / WATCHDOG_PID).unlink(missing_ok=True)


# -- stop ---------------------------------------------------------------------------------------
def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop(node_dir: Path) -> dict[str, Any]:
    env = node_env(node_dir)
    node_id = env.get("CLOUDLET_NODE_ID") or node_dir.name
    if node_dir.is_dir():
        (node_dir / STOP_FILE).write_text("")
    unit = _read(node_dir / SYSTEMD_UNIT).strip()
    if unit:
        subprocess.run(["systemctl", "--user", "stop", unit], capture_output=True)
    first = [p for p in (_pid(node_dir / WATCHDOG_PID), _pid(node_dir / AGENT_PID)) if alive(p)]
    _kill([p for p in first if p is not None], signal.SIGTERM)
    deadline = time.monotonic() + TERM_WAIT_S
    while time.monotonic() < deadline and any(alive(p) for p in first):
        time.sleep(0.02)
    for _ in range(20):
        left = [p for p in {*first, *tagged_pids(node_id)} if p is not None and alive(p)]
        if not left:
            break
        _kill(left, signal.SIGKILL)
        time.sleep(0.05)
    for sub in ("work", "mnt", "os"):
        shutil.rmtree(node_dir / sub, ignore_errors=True)
    for name in (ENV_FILE, "agent.env", WATCHDOG_PID, AGENT_PID):
        (node_dir / name).unlink(missing_ok=True)
    return {"stopped": node_id}


# -- list / log ---------------------------------------------------------------------------------
def list_nodes(agent_dir: Path, installation: str) -> list[dict[str, Any]]:
    found = []
    for node_dir in sorted((agent_dir / "nodes").glob("*")):
        env = node_env(node_dir) if (node_dir / ENV_FILE).exists() else {}
        if not env or env.get("CLOUDLET_INSTALLATION") != installation:
            continue
        watchdog, agent = _pid(node_dir / WATCHDOG_PID), _pid(node_dir / AGENT_PID)
        unit = _read(node_dir / SYSTEMD_UNIT).strip()
        if not (alive(watchdog) or alive(agent) or unit):
            continue
        found.append(
            {
                "node_id": env.get("CLOUDLET_NODE_ID", node_dir.name),
                "node_dir": str(node_dir),
                "watchdog_pid": watchdog,
                "agent_pid": agent if alive(agent) else None,
                "vcpus": float(env.get("CLOUDLET_NODE_VCPUS") or 0),
                "memory_gb": float(env.get("CLOUDLET_NODE_MEMORY_GB") or 0),
                "gpus": int(float(env.get("CLOUDLET_NODE_GPUS") or 0)),
                "size": env.get("CLOUDLET_NODE_SIZE", ""),
                "whole_host": env.get("CLOUDLET_WHOLE_HOST") == "1",
            }
        )
    return found


def log_tail(node_dir: Path, tail_bytes: int) -> str:
    path = node_dir / AGENT_LOG
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - tail_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    command, path = argv[0], Path(argv[1]).expanduser()
    if command == "start":
        answer: Any = start(path)
    elif command == "watch":
        watch(path)
        return 0
    elif command == "stop":
        answer = stop(path)
    elif command == "list" and len(argv) == 3:
        answer = list_nodes(path, argv[2])
    elif command == "log" and len(argv) == 3:
        answer = {"log": log_tail(path, int(argv[2]))}
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
