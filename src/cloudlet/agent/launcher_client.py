"""The agent's side of the node's launcher (nodekit/launcher.py): starts it once, hands it each
job run, and gives the runner a handle with the ``Popen`` surface it uses (``pid``, ``stdout``,
``poll``, ``wait``) plus ``send_signal``. A launcher that dies ends its runs as lost (its runs die
with it) and is started again for the next run; one that cannot start at all leaves the node on a
``bwrap`` per run (``node_launcher``), with a notice in the agent's log."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cloudlet.agent.config import log
from cloudlet.nodekit.sandbox import Bind, Sandbox, user_environment

READY_TIMEOUT_S = 10.0
STARTED_TIMEOUT_S = 30.0
LOST_EXIT = 128 + signal.SIGKILL
MAX_MESSAGE = 1 << 16
CREDENTIALS = struct.calcsize("3i")
OFF = ("0", "off", "no", "false")


class LauncherUnavailable(RuntimeError):
    """The launcher could not start, or could not take this run (the caller uses a bwrap)."""


class LaunchedRun:
    """One run in the launcher. ``pid``: its PID 1 on the host (whose process tree is the run);
    ``returncode``: its exit code once it ended; ``lost``: it ended because the launcher died."""

    def __init__(self, run_id: str, stdout_fd: int) -> None:
        self.run_id = run_id
        self.pid = 0
        self.stdout = open(stdout_fd, "rb", buffering=0)  # noqa: SIM115 - the runner closes it
        self.returncode: int | None = None
        self.lost = False
        self.spare = False  # started in a PID 1 the launcher made ahead (nodekit/launcher.py)
        self._pidfd: int | None = None
        self._started = threading.Event()
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"run {self.run_id}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """To the run's PID 1: a SIGTERM it forwards to every process of the run, a SIGKILL that
        ends them all. Through a pidfd: never to a process that took a reused pid."""
        if self._pidfd is None or self._ended.is_set():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(self._pidfd, sig)

    def _start(self, pid: int) -> None:
        self.pid = pid
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(pid)
        self._started.set()

    def _end(self, code: int, *, lost: bool = False) -> None:
        self.returncode, self.lost = code, lost
        self._started.set()
        self._ended.set()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None


class _Connection:
    """One launcher process and its socket; reads its reports on a thread of its own."""

    def __init__(self, sandbox: Sandbox) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.socket = ours
        self.runs: dict[str, LaunchedRun] = {}
        self.lock = threading.Lock()
        self.alive = True
        try:
            self.process = subprocess.Popen(
                sandbox.launcher_argv(theirs.fileno()),
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env=user_environment(os.environ),  # the node's tags, no secrets
            )
        except OSError as exc:
            ours.close()
            raise LauncherUnavailable(f"cannot start the launcher: {exc}") from exc
        finally:
            theirs.close()
        ours.settimeout(READY_TIMEOUT_S)
        try:
            ready = ours.recv(MAX_MESSAGE)
        except OSError:
            ready = b""
        if not ready or json.loads(ready).get("op") != "ready":
            self.close()
            raise LauncherUnavailable(f"the launcher did not start (exit {self.process.poll()})")
        ours.settimeout(None)
        self.reader = threading.Thread(target=self._read, name="launcher", daemon=True)
        self.reader.start()

    def send(self, run: LaunchedRun, request: dict[str, Any], fds: Sequence[int]) -> None:
        data = json.dumps(request).encode()
        with self.lock:
            if not self.alive:
                raise LauncherUnavailable("the launcher has ended")
            self.runs[run.run_id] = run
        try:
            socket.send_fds(self.socket, [data], list(fds))
        except OSError as exc:  # e.g. EMSGSIZE: an environment too large for one message
            with self.lock:
                self.runs.pop(run.run_id, None)
            raise LauncherUnavailable(f"the launcher cannot take the run: {exc}") from exc

    def _read(self) -> None:
        space = socket.CMSG_SPACE(CREDENTIALS)
        while True:
            try:
                data, ancillary, _, _ = self.socket.recvmsg(MAX_MESSAGE, space)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self.lock:
                run = self.runs.get(str(message.get("id")))
                if run is not None and message.get("op") == "exit":
                    del self.runs[run.run_id]
            if run is None:
                continue
            if message.get("op") == "started":
                pids = [
                    struct.unpack("3i", d[:CREDENTIALS])[0]
                    for _, kind, d in ancillary
                    if kind == socket.SCM_CREDENTIALS
                ]
                run.spare = bool(message.get("spare"))
                run._start(pids[0] if pids else 0)
            elif message.get("op") == "exit":
                run._end(int(message.get("status", 1)))
        with self.lock:
            self.alive = False
            lost, self.runs = list(self.runs.values()), {}
        if lost:
            log(f"the node's launcher ended (exit {self.process.poll()}): {len(lost)} run(s) lost")
        for run in lost:
            run._end(LOST_EXIT, lost=True)

    def close(self) -> None:
        with self.lock:
            self.alive = False
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(2.0)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class LauncherClient:
    """The node's launcher, started at the node's first job run (a node that runs none, such as
    an instance's or a replica's, never pays its interpreter's start) and restarted on demand."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._lock = threading.Lock()
        self._connection: _Connection | None = None
        # Why its first start failed: the node then stays on a bwrap per run (not retried per run).
        self._refused: LauncherUnavailable | None = None
        self._serial = 0
        # The launcher dies with the thread that started it (bwrap --die-with-parent is a
        # parent-death signal, which follows the thread): so it is started by one that lives as
        # long as this client, never by a run's thread that ends with the run.
        self._starts: queue.Queue[list[Any] | None] = queue.Queue()
        self._keeper = threading.Thread(target=self._keep, name="launcher-keeper", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        while (job := self._starts.get()) is not None:
            done, result = job
            try:
                result.append(_Connection(self.sandbox))
            except LauncherUnavailable as exc:
                result.append(exc)
            done.set()

    def _new_connection(self) -> _Connection:
        done, result = threading.Event(), list[Any]()
        self._starts.put([done, result])
        done.wait()
        if isinstance(result[0], LauncherUnavailable):
            raise result[0]
        connection: _Connection = result[0]
        return connection

    @property
    def pid(self) -> int | None:
        """The launcher's outer ``bwrap`` (tests kill it to check that runs are reported lost)."""
        connection = self._connection
        return connection.process.pid if connection is not None and connection.alive else None

    def start(self) -> None:
        with self._lock:
            self._current()

    def _current(self) -> _Connection:
        if self._refused is not None:
            raise self._refused
        if self._connection is None or not self._connection.alive:
            restarted = self._connection is not None
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            try:
                self._connection = self._new_connection()
            except LauncherUnavailable as exc:
                if not restarted:
                    self._refused = exc
                    log(f"notice: {exc}; each job run starts in a bwrap of its own")
                raise
            if restarted:
                log("the node's launcher was started again")
        return self._connection

    def launch(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str],
        binds: Sequence[Bind] = (),
    ) -> LaunchedRun:
        """Start ``argv`` in a sandbox of its own; wait until the launcher reports its pid."""
        plan = self.sandbox.launch_plan(argv, cwd=cwd, env=env, binds=binds)
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        with self._lock:
            self._serial += 1
            run = LaunchedRun(f"r{self._serial}", read_end)
        plan.request["id"] = run.run_id
        try:
            with self._lock:
                connection = self._current()
            connection.send(run, plan.request, [write_end, *plan.fds])
        except BaseException:
            run.stdout.close()
            raise
        finally:
            os.close(write_end)
            for fd in plan.owned:
                os.close(fd)
        if not run._started.wait(STARTED_TIMEOUT_S):
            log(f"the launcher did not report run {run.run_id} started")
        return run

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self._starts.put(None)


def node_launcher(sandbox: Sandbox, env: Mapping[str, str] | None = None) -> LauncherClient | None:
    """The launcher for the node's job runs; None (each run in a bwrap of its own) when the
    sandbox is off or ``CLOUDLET_LAUNCHER=off``. One that cannot start (a notice in the log) leaves
    the node's runs each in a bwrap of its own (``runner._launch`` on ``LauncherUnavailable``)."""
    env = os.environ if env is None else env
    if not sandbox.enabled or (env.get("CLOUDLET_LAUNCHER") or "").strip().lower() in OFF:
        return None
    return LauncherClient(sandbox)  # started by the first run: a node that runs no job pays nothing
