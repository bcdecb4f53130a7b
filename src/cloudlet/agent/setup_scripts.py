"""Creation and startup scripts of a compute instance (standard library only).

``setup_scripts.creation_script`` runs once per OS disk (a marker in the OS disk records success);
``startup_script`` runs at every start. A script is a file in the workspace share (``path``) or an
inline ``command``; Azure's REST names (``script_source_path``, ``script_data``,
``script_arguments``) are read too. When both a path and a command are given, the command is the
script's arguments, as Azure's CLI does.

Output (stdout and stderr interleaved) goes to ``<os disk>/logs/<kind>_script.log``, which
survives stop/start; the result carries its tail. A script that outlives its timeout is stopped
with its whole process group (SIGTERM, then SIGKILL).

The OS disk is the instance user's: the agent (root) opens, writes and reads the log and the
marker there without following a link the user may have left (``nodekit/safe_paths.py``), and
``wrap`` runs the script in the instance's sandbox.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cloudlet.nodekit import safe_paths

Kind = Literal["creation", "startup"]
Wrap = Callable[[Sequence[str]], list[str]]
Status = Literal["ok", "failed", "timed_out", "skipped", "missing"]
TAIL_BYTES = 4000
KILL_GRACE_S = 3.0
MARKER_DIR = ".cloudlet"


@dataclass(frozen=True)
class ScriptSpec:
    path: str | None = None  # relative to the share root
    command: str | None = None  # inline shell command, or the arguments when a path is given
    timeout_minutes: float = 30

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> ScriptSpec | None:
        """From ``setup_scripts.<kind>_script`` (YAML or REST names); None when absent."""
        if not doc:
            return None
        path = doc.get("path") or doc.get("script_source_path")
        command = doc.get("command") or doc.get("script_arguments")
        if not path and doc.get("script_data"):
            command = str(doc["script_data"])
        timeout = doc.get("timeout_minutes") or 30
        return cls(path=path or None, command=command or None, timeout_minutes=float(timeout))


@dataclass(frozen=True)
class ScriptResult:
    kind: Kind
    status: Status
    exit_code: int | None
    duration_s: float
    log_path: Path | None
    tail: str  # the last TAIL_BYTES of the log

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "skipped")

    def describe(self) -> str:
        what = f"{self.kind} script"
        if self.status == "failed":
            return f"{what} failed with exit code {self.exit_code}; see {self.log_path}"
        if self.status == "timed_out":
            return f"{what} timed out after {self.duration_s:.0f} s and was stopped; see {self.log_path}"
        if self.status == "missing":
            return f"{what} not found: {self.tail}"
        if self.status == "skipped":
            return f"{what} already ran on this OS disk"
        return f"{what} succeeded in {self.duration_s:.1f} s"


def run_setup_scripts(
    creation: ScriptSpec | None,
    startup: ScriptSpec | None,
    os_disk: Path,
    share_root: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    prefix: Sequence[str] = (),
) -> list[ScriptResult]:
    """What the agent calls on every instance start: the creation script if this OS disk has not
    run it successfully yet, then the startup script. Stops at the first failure."""
    options: dict[str, Any] = {"env": env, "timeout_s": timeout_s, "prefix": prefix}
    results: list[ScriptResult] = []
    if creation is not None:
        results.append(run_script("creation", creation, os_disk, share_root, **options))
    if startup is not None and all(r.ok for r in results):
        results.append(run_script("startup", startup, os_disk, share_root, **options))
    return results


def run_script(
    kind: Kind,
    spec: ScriptSpec,
    os_disk: Path,
    share_root: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    prefix: Sequence[str] = (),
    wrap: Wrap | None = None,
    owner: tuple[int, int] | None = None,
) -> ScriptResult:
    """Run one script in ``share_root`` with its log on the OS disk. ``timeout_s`` overrides
    ``spec.timeout_minutes`` (tests); ``prefix`` goes before the command (e.g. ``["nsenter", …]``).
    ``wrap`` turns the command into the one to start (the instance's sandbox); with it ``env`` is
    the script's whole environment, without it ``env`` is added to the agent's. ``owner``: the
    uid/gid the log and marker files the agent makes must have (the instance's user)."""
    marker = os_disk / MARKER_DIR / "creation_script.done"
    if kind == "creation" and _exists(marker):
        return ScriptResult(kind, "skipped", 0, 0.0, log_path(os_disk, kind), "")
    try:
        argv = [*prefix, *_argv(spec, share_root)]
    except FileNotFoundError as exc:
        return ScriptResult(kind, "missing", None, 0.0, None, str(exc))
    log = log_path(os_disk, kind)
    _make_dir(log.parent, owner)
    limit = timeout_s if timeout_s is not None else spec.timeout_minutes * 60
    full_env = dict(env or {}) if wrap is not None else {**os.environ, **(env or {})}
    status, code, took = _execute(argv, share_root, log, limit, full_env, owner, wrap)
    if kind == "creation" and status == "ok":
        _make_dir(marker.parent, owner)
        safe_paths.write_bytes(str(marker), f"{time.time():.0f}\n".encode())
    return ScriptResult(kind, status, code, took, log, read_tail(log))


def _exists(path: Path) -> bool:
    try:
        return safe_paths.owner_of(str(path)) is not None
    except safe_paths.UnsafePath:
        return False


def _make_dir(path: Path, owner: tuple[int, int] | None) -> None:
    if owner is None:
        os.close(safe_paths.open_path(str(path), create=True, directory=True))
    else:
        safe_paths.chown_tree(str(path), *owner, create=True)


def log_path(os_disk: Path, kind: Kind) -> Path:
    return os_disk / "logs" / f"{kind}_script.log"


def read_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        return safe_paths.read_bytes(str(path), limit, from_end=True).decode("utf-8", "replace")
    except OSError:
        return ""


def _argv(spec: ScriptSpec, share_root: Path) -> list[str]:
    if spec.path:
        script = _inside(share_root, spec.path)
        if not script.is_file():
            raise FileNotFoundError(f"{spec.path} (looked in {share_root}); upload it to the share")
        return ["bash", str(script), *shlex.split(spec.command or "")]
    if spec.command:
        return ["bash", "-c", spec.command]
    raise FileNotFoundError("the script has neither 'path' nor 'command'")


def _inside(root: Path, relative: str) -> Path:
    # A script path names a file in the share; never one elsewhere on the machine.
    resolved = (root / relative.lstrip("/")).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise FileNotFoundError(f"{relative} is outside the share")
    return resolved


def _execute(
    argv: list[str],
    cwd: Path,
    log: Path,
    limit_s: float,
    env: Mapping[str, str],
    owner: tuple[int, int] | None,
    wrap: Wrap | None,
) -> tuple[Status, int | None, float]:
    started = time.monotonic()
    fd = safe_paths.open_file(str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    if owner is not None:
        os.fchown(fd, *owner)
    with os.fdopen(fd, "ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n".encode())
        out.flush()
        # Its own session, so a timeout can stop the script and everything it started.
        process = subprocess.Popen(
            wrap(argv) if wrap else argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _stop_group(process)
            out.write(f"--- timed out after {limit_s:g} s; stopped\n".encode())
            return "timed_out", None, time.monotonic() - started
        out.write(f"--- exit code {code}\n".encode())
    return ("ok" if code == 0 else "failed"), code, time.monotonic() - started


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    _signal_group(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=KILL_GRACE_S)
    # Children may outlive the leader (or ignore SIGTERM): SIGKILL the whole group regardless.
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
