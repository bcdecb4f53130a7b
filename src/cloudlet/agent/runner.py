"""Runs: one supervising thread per process, output spooled to a file, one sender thread for logs,
"running" reports and exits (retried with backoff while the control plane is unreachable).

The exit report's answer may hold the node's next run: it starts at once, without waiting for
the long poll. A run is reported running only once it has lived ``REPORT_RUNNING_AFTER_S``: a
run that ends sooner is reported once, by its exit, which carries its start time."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudlet.agent import remote_data, run_reports
from cloudlet.agent.client import AgentClient, Backoff, HTTPStatusError, Revoked, Unreachable
from cloudlet.agent.config import log
from cloudlet.agent.interfaces import collective_interface
from cloudlet.agent.launcher_client import LaunchedRun, LauncherClient, LauncherUnavailable
from cloudlet.agent.run_reports import CHUNK, REPORT_RUNNING_AFTER_S
from cloudlet.agent.runstate import Run, exit_code_of, killpg, signal_group
from cloudlet.nodekit.safe_paths import UnsafePath
from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox, user_environment

BATCH_S = 0.1
KILL_AFTER_S = 1.0
LEFTOVER_GRACE_S = 2.0
FETCH_DEADLINE_S = 60.0
DONE_MEMORY = 1024
DEFAULT_ARTIFACTS = ("outputs", "logs")  # folders of a run's working directory kept after it
DOWNLOAD_FAILED = "download_failed"  # the exit reason of a run whose http(s) input failed
UPLOAD_FAILED = "upload_failed"  # ... of a run whose data (no shared disk) could not be uploaded
RUN_VENV = ".cloudlet-venv"  # the run's own venv, in its working directory (nodekit/envs.py: overlay)
SIGNAL_RACE_S = 1.0  # how long a run killed by SIGTERM waits to learn whether the node got it too
LOST = "lost"  # the exit reason of a run whose launcher died (the node's problem, not the run's)

Process = subprocess.Popen[bytes] | LaunchedRun


@dataclass(frozen=True)
class Staged:
    """A run ready to launch: its command and environment with paths put in, the sandbox's binds,
    the mounts' file descriptors to pass, and its remote data (no shared filesystem)."""

    command: str
    env: dict[str, str]
    binds: list[Bind]
    fds: tuple[int, ...]
    remote: tuple[remote_data.RemoteData, dict[str, str]] | None


def _signal(proc: Process, sig: int, spare: int | None) -> None:
    """A launched run's PID 1 forwards a SIGTERM to all of the run and dies of a SIGKILL with
    all of it; a bwrap's process group gets it all but ``spare`` (runstate.signal_group)."""
    if isinstance(proc, LaunchedRun):
        proc.send_signal(sig)
    else:
        signal_group(proc.pid, sig, spare)


def _put_paths(text: str, paths: dict[str, str]) -> str:
    """TEXT with each placeholder of ``paths`` (http(s) inputs; server paths of a node without
    the server's disk) replaced by its local path, longest first (a path inside another)."""
    for placeholder in sorted(paths, key=len, reverse=True):
        text = text.replace(placeholder, paths[placeholder])
    return text


class RunManager:
    def __init__(
        self,
        client: AgentClient,
        work_dir: Path,
        on_change: Callable[[], None] = lambda: None,
        sandbox: Sandbox | None = None,
        signal_means: str | None = None,
        shared_filesystem: bool = True,
        launcher: LauncherClient | None = None,
    ) -> None:
        self.client = client
        # The node's launcher starts job runs (agent/launcher_client.py); None: a bwrap per run.
        self.launcher = launcher
        # False: the server's paths are not on this host; a run's mounts move over HTTP.
        self.shared_filesystem = shared_filesystem
        self._remote: dict[str, remote_data.RemoteData] = {}  # runs' local copies of their mounts
        # A SIGTERM to the node (an engine preempting its allocation signals every process of it,
        # the runs' too) ends runs with this reason instead of "canceled"/their exit (config.py).
        self.signal_means = signal_means
        self._signalled = threading.Event()
        self.work_dir = work_dir
        self.on_change = on_change
        self.sandbox = sandbox or Sandbox(Policy(), hostname="", state_dir=work_dir)
        self.revoked = threading.Event()
        # The server takes a run's last log chunk inside its exit report (said at registration).
        self.exit_carries_log = False
        self._runs: dict[str, Run] = {}
        self._done: dict[str, None] = {}  # recently acknowledged runs: a repeated start is ignored
        self._cond = threading.Condition()
        self._sender_stop = threading.Event()
        self._sender = threading.Thread(target=self._send_loop, name="sender", daemon=True)
        self._sender.start()

    # -- queries -------------------------------------------------------------------------------
    def statuses(self) -> list[dict[str, Any]]:
        with self._cond:
            return [r.status() for r in self._runs.values()]

    def held(self) -> list[str]:
        """Ids of the runs this agent has (running, or ended and not yet acknowledged)."""
        with self._cond:
            return list(self._runs)

    def running(self) -> list[Run]:
        with self._cond:
            return [r for r in self._runs.values() if not r.exited]

    def pending(self) -> int:
        """Runs whose logs or exit are not yet acknowledged."""
        with self._cond:
            return len(self._runs)

    # -- commands ------------------------------------------------------------------------------
    def start(self, spec: dict[str, Any]) -> None:
        if not spec.get("run"):
            log(f"ignoring a run spec without a run id: {spec!r}")
            return
        with self._cond:
            if str(spec["run"]) in self._runs or str(spec["run"]) in self._done:
                return  # already started: start is idempotent
            run = Run(spec, self.work_dir)
            self._runs[run.run_id] = run
        run.thread = threading.Thread(target=self._supervise, args=(run,), name=run.run_id, daemon=True)
        run.thread.start()

    def cancel(self, run_id: str, reason: str = "canceled") -> None:
        with self._cond:
            run = self._runs.get(run_id)
        if run is not None and not run.exited:
            run.request_stop(reason)

    def stop_all(self, reason: str = "canceled", wait_s: float = KILL_AFTER_S + 0.5) -> None:
        runs = self.running()
        for run in runs:
            run.request_stop(reason)
        deadline = time.monotonic() + wait_s
        for run in runs:
            if run.thread is not None:
                run.thread.join(max(0.0, deadline - time.monotonic()))

    def flush(self, deadline: float) -> bool:
        """Wait until every log chunk and exit is acknowledged or `deadline` passes."""
        while time.monotonic() < deadline and not self.revoked.is_set():
            with self._cond:
                if not self._runs:
                    return True
                self._cond.notify_all()
                self._cond.wait(0.05)
        return self.pending() == 0

    def close(self) -> None:
        self._sender_stop.set()
        with self._cond:
            self._cond.notify_all()
        if self.launcher is not None:
            self.launcher.close()

    # -- one run -------------------------------------------------------------------------------
    def _supervise(self, run: Run) -> None:
        try:
            run.cwd.mkdir(parents=True, exist_ok=True)
            run.spool.parent.mkdir(parents=True, exist_ok=True)
            with open(run.spool, "ab") as spool:
                self._execute(run, spool.fileno())
        except Exception as exc:  # the run fails, the agent does not
            log(f"run {run.run_id} failed to start: {exc!r}")
            with contextlib.suppress(OSError):
                self._note(run, f"cloudlet-agent: run failed to start: {exc}\n".encode())
            if not run.exited:
                self._finish(run, 1, run.stop_reason or "exited")
        finally:
            data = self._remote.pop(run.run_id, None)
            if data is not None:  # no more uploads; the copies go (kept when the upload failed)
                data.close(keep=run.reason == UPLOAD_FAILED)

    def _note(self, run: Run, data: bytes) -> None:
        with open(run.spool, "ab") as f:
            f.write(data)
        with self._cond:
            run.written += len(data)
            self._cond.notify_all()

    def _fetch_code(self, run: Run, url: str) -> None:
        archive = run.spool.with_suffix(".code.tar.gz")
        backoff, deadline = Backoff(), time.monotonic() + FETCH_DEADLINE_S
        while True:
            try:
                self.client.download(url, str(archive))
                break
            except (Unreachable, HTTPStatusError) as exc:
                transient = isinstance(exc, Unreachable) or exc.status >= 500
                if not transient or time.monotonic() > deadline or run.stop_requested.wait(backoff.next()):
                    raise RuntimeError(f"could not fetch the code snapshot: {exc}") from exc
        try:
            with tarfile.open(archive, "r:*") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(run.cwd, filter="data")
                else:  # Python < 3.11.4 (a host's system Python): the same rules, checked here
                    tar.extractall(run.cwd, members=remote_data.data_members(tar))
        finally:
            archive.unlink(missing_ok=True)

    def _execute(self, run: Run, spool_fd: int) -> None:
        """Stage the run (code, inputs, data, environment, mounts), launch it in the sandbox,
        relay its output until it ends, then send back its data and report its exit."""
        staged = self._stage(run)
        if staged is None:
            return  # the run has ended (a download failed, a stop came first)
        proc = self._launch(run, staged)
        assert proc.stdout is not None
        run.pid = proc.pid or None
        self.on_change()
        if staged.remote is not None:
            interval = remote_data.checkpoint_interval(run.spec.get("env") or {}, os.environ)
            staged.remote[0].keep_checkpoints(interval)
        # The sandbox's outer bwrap leads the group: spared by SIGTERM (see nodekit/sandbox.py).
        self._relay(run, proc, spool_fd, proc.pid if self.sandbox.enabled else None)
        exit_code, reason = exit_code_of(proc.wait()), run.stop_reason or "exited"
        if isinstance(proc, LaunchedRun) and proc.lost:
            self._note(run, b"cloudlet-agent: the node's launcher ended: the run was lost\n")
            reason = LOST
        if staged.remote is not None:
            exit_code, reason = self._push_data(run, staged.remote[0], exit_code, reason)
        self._finish(run, exit_code, reason)

    def _stage(self, run: Run) -> Staged | None:
        spec = run.spec
        if not isinstance(spec.get("command"), str) or not spec["command"]:
            raise ValueError("the run spec has no command")
        if spec.get("cwd_code"):
            self._fetch_code(run, str(spec["cwd_code"]))
        self.sandbox.hand_over(run.cwd, recursive=bool(spec.get("cwd_code")))  # its code, as extracted
        downloaded = self._download_inputs(run)
        if downloaded is None:
            return None
        paths, binds = downloaded
        remote = None if self.shared_filesystem else self._pull_data(run)
        if isinstance(remote, str):
            return None
        if remote is not None:
            paths.update(remote[1])
        env = {k: _put_paths(v, paths) for k, v in self._environment(run).items()}
        binds.append(Bind(str(run.cwd), writable=True))
        environment = spec.get("environment")
        kind = environment.get("kind", "python") if isinstance(environment, dict) else "python"
        if kind != "python" and not self._prepare_environment(run, env):
            return None
        if env.get("CLOUDLET_ENVIRONMENT"):  # the environment cache is the agent's: no user links
            binds += self.sandbox.venv_binds(env["CLOUDLET_ENVIRONMENT"])
        if run.stop_requested.is_set():
            self._finish(run, 128 + signal.SIGTERM, run.stop_reason or "canceled")
            return None
        mounts = self._mounts(run, env, paths)
        self._default_artifacts(run, paths)
        command = _put_paths(spec["command"], paths)
        fds = tuple(b.fd for b in mounts if b.fd is not None)
        return Staged(command, env, binds + mounts, fds, remote)

    def _launch(self, run: Run, staged: Staged) -> Process:
        """In the node's launcher; in a bwrap of its own where there is none (or it cannot take
        this run), and with no sandbox when the sandbox is off."""
        try:
            if self.launcher is not None:
                argv = ["bash", "-c", staged.command]
                try:
                    return self.launcher.launch(argv, cwd=run.cwd, env=staged.env, binds=staged.binds)
                except LauncherUnavailable as exc:
                    log(f"run {run.run_id}: {exc}; it starts in a bwrap of its own")
            return subprocess.Popen(
                self.sandbox.wrap(["bash", "-c", staged.command], cwd=run.cwd, binds=staged.binds),
                cwd=run.cwd,
                env=staged.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=staged.fds,
                bufsize=0,
            )
        finally:
            for fd in staged.fds:
                os.close(fd)

    def _relay(self, run: Run, proc: Process, spool_fd: int, spare: int | None) -> None:
        """Spool the output until the pipe closes; stop the run on its timeout or when asked
        (SIGTERM, then SIGKILL), and kill what is left of its process group once it exits."""
        assert proc.stdout is not None
        timeout_s = float(run.spec.get("timeout_s") or 0)
        started = time.monotonic()
        kill_at: float | None = None
        exited_at: float | None = None
        fd = proc.stdout.fileno()
        eof = False
        while not eof:
            readable, _, _ = select.select([fd], [], [], BATCH_S)
            if readable:
                data = os.read(fd, CHUNK)
                eof = not data
                if data:
                    self._spool(run, spool_fd, data)
            now = time.monotonic()
            if exited_at is not None:
                if now - exited_at > LEFTOVER_GRACE_S:
                    break  # something outside the group still holds the pipe
                continue
            if timeout_s and now - started >= timeout_s and not run.stop_requested.is_set():
                run.request_stop("timeout")
            if run.stop_requested.is_set() and kill_at is None:
                _signal(proc, signal.SIGTERM, spare)
                kill_at = now + KILL_AFTER_S
            if kill_at is not None and now >= kill_at:
                _signal(proc, signal.SIGKILL, spare)
                kill_at = float("inf")
            if proc.poll() is not None:
                exited_at = now
                if not isinstance(proc, LaunchedRun):  # a launched run's namespace died with it
                    killpg(proc.pid, signal.SIGKILL)  # leftovers in the run's process group
        proc.stdout.close()

    def _spool(self, run: Run, spool_fd: int, data: bytes) -> None:
        os.write(spool_fd, data)
        with self._cond:
            run.written += len(data)
            if run.written - run.sent_raw >= CHUNK:
                self._cond.notify_all()

    def _pull_data(self, run: Run) -> tuple[remote_data.RemoteData, dict[str, str]] | str:
        """Download the run's mounts (no shared disk): the transfers and server path → local
        path; "ended" when the run has ended (a download failed, or it was stopped)."""

        def note(text: str) -> None:
            self._note(run, text.encode())

        root = self.work_dir.parent / "data" / run.run_id
        data = remote_data.RemoteData(self.client, run.run_id, run.spec, root, note)
        self._remote[run.run_id] = data
        try:
            mapping = data.pull(run.stop_requested)
        except (remote_data.TransferFailed, OSError, tarfile.TarError) as exc:
            if run.stop_requested.is_set():
                self._finish(run, 128 + signal.SIGTERM, run.stop_reason or "canceled")
            else:
                note(f"cloudlet-agent: the run's data could not be downloaded from the server: {exc}\n")
                self._finish(run, 1, DOWNLOAD_FAILED)
            return "ended"
        for copy in data.copies:
            if copy.writable:
                self.sandbox.hand_over(copy.local, recursive=True)  # the job writes its outputs
        return data, mapping

    def _push_data(
        self, run: Run, data: remote_data.RemoteData, exit_code: int, reason: str
    ) -> tuple[int, str]:
        """Upload what the run wrote (no shared disk); a run that succeeded fails when it cannot."""
        try:
            data.finish()
        except (remote_data.TransferFailed, OSError) as exc:
            why = f"cloudlet-agent: the run's outputs could not be uploaded to the server: {exc}\n"
            self._note(run, why.encode())
            log(f"run {run.run_id}: upload failed: {exc}")
            if exit_code == 0 and reason == "exited":
                return 1, UPLOAD_FAILED
        return exit_code, reason

    def _environment(self, run: Run) -> dict[str, str]:
        """An allowlist of the agent's environment (never its token), the spec's variables, and a
        HOME the job can write: its working directory."""
        env = user_environment(os.environ)
        env.update(collective_interface(os.environ.get("CLOUDLET_NODE_ADDRESS", "")))
        env.update({str(k): str(v) for k, v in (run.spec.get("env") or {}).items()})
        user = self.sandbox.user_name()
        env.update({"HOME": str(run.cwd), "USER": user, "LOGNAME": user, "SHELL": "/bin/bash"})
        env["CLOUDLET_RUN_ID"] = run.run_id
        return env

    def _download_inputs(self, run: Run) -> tuple[dict[str, str], list[Bind]] | None:
        """Download (or find in the node's cache) the spec's http(s) inputs (``downloads``):
        their placeholders → the paths the command sees, and read-only binds of their cache
        folders. None when the run has ended (a download failed or the run was stopped)."""
        items = [d for d in run.spec.get("downloads") or [] if isinstance(d, dict) and d.get("url")]
        if not items:
            return {}, []
        # Imported on first use: the idle agent stays small.
        from cloudlet.agent import blob_folders, downloads

        root = downloads.cache_root(self.work_dir.parent)
        paths: dict[str, str] = {}
        binds: list[Bind] = []
        for item in items:
            url, name = str(item["url"]), str(item.get("input") or "?")
            try:
                note = lambda text: self._note(run, text.encode())  # noqa: E731
                seen, folder = blob_folders.fetch_input(
                    url, str(item.get("type")), root, note=note, stop=run.stop_requested
                )
            except downloads.DownloadFailed as exc:
                if run.stop_requested.is_set():
                    self._finish(run, 128 + signal.SIGTERM, run.stop_reason or "canceled")
                    return None
                self._note(run, f"cloudlet-agent: input '{name}': cannot download {url}: {exc}\n".encode())
                self._finish(run, 1, DOWNLOAD_FAILED)
                return None
            paths[str(item.get("placeholder") or "")] = str(seen)
            binds.append(Bind(str(folder)))  # the agent's cache (never the user's to write): a path bind
        return {k: v for k, v in paths.items() if k}, binds

    def _default_artifacts(self, run: Run, paths: dict[str, str]) -> None:
        """``./outputs`` and ``./logs`` in the working directory, as on Azure ML: links to the
        attempt's default artifacts folders (``default_artifacts``, among the rw ``mounts``, so
        they are kept when the run ends); plain folders when an older control plane named none."""
        base = run.spec.get("default_artifacts")
        for folder in DEFAULT_ARTIFACTS:
            link = run.cwd / folder
            if os.path.lexists(link):
                self._note(
                    run,
                    f"cloudlet-agent: warning: ./{folder} came with the code snapshot: it is used as it "
                    f"is and not kept as the job's {folder}\n".encode(),
                )
            elif isinstance(base, str) and base:
                os.symlink(_put_paths(os.path.join(base, folder), paths), link)
            else:
                self.sandbox.hand_over(link, create=True)

    def _mounts(self, run: Run, env: dict[str, str], paths: dict[str, str]) -> list[Bind]:
        """The datastore paths the spec names (``mounts``; the checkpoint dir also when an older
        control plane did not list it), as descriptor binds; writable ones made and handed to the
        sandbox user. A missing read-only path is left out: the job sees it missing, as before."""
        wanted: dict[str, bool] = {}
        for mount in run.spec.get("mounts") or []:
            if isinstance(mount, dict) and mount.get("path"):
                path = os.path.normpath(paths.get(str(mount["path"]), str(mount["path"])))
                wanted[path] = wanted.get(path, False) or mount.get("mode") == "rw"
        checkpoints = env.get("CLOUDLET_CHECKPOINT_DIR")
        if checkpoints:
            wanted.setdefault(os.path.normpath(checkpoints), True)
        binds: list[Bind] = []
        for path, writable in wanted.items():
            try:
                if self.sandbox.enabled:
                    bind = self.sandbox.open_bind(path, writable=writable)
                    if bind is not None:
                        binds.append(bind)
                elif writable:
                    os.makedirs(path, exist_ok=True)
            except UnsafePath:  # a symlink planted on the way: the run fails rather than mount elsewhere
                for fd in (b.fd for b in binds if b.fd is not None):
                    os.close(fd)
                raise
            except OSError as exc:  # e.g. a node without the datastore: the job sees the path only
                self._note(run, f"cloudlet-agent: warning: cannot mount {path}: {exc}\n".encode())
        return binds

    def _prepare_environment(self, run: Run, env: dict[str, str]) -> bool:
        """Build or reuse the run's environment (its output goes to the run's log) and add its
        variables to ``env``. False when the run has ended (the build failed or was canceled)."""
        from cloudlet.nodekit import envs  # imported on first use: the idle agent stays small

        if run.stop_requested.is_set():
            return True  # the caller ends the run as canceled

        def note(text: str) -> None:
            self._note(run, text.encode())

        try:
            cache = envs.cache_root(self.work_dir.parent)
            spec = run.spec["environment"]
            stop, sandbox = run.stop_requested, self.sandbox
            added = envs.prepare(spec, cache, note, stop=stop, base_env=env, sandbox=sandbox, image_venv=True)
            if added.get("VIRTUAL_ENV"):  # the run's own venv over the shared one: `pip install` works
                cached, own = Path(added["VIRTUAL_ENV"]), run.cwd / RUN_VENV
                added = {**envs.overlay(cached, own, env), "CLOUDLET_ENVIRONMENT": str(cached)}
                self.sandbox.hand_over(own, recursive=True)
            env.update(added)
        except envs.Canceled:
            self._finish(run, 128 + signal.SIGTERM, run.stop_reason or "canceled")
            return False
        except envs.BuildFailed as exc:
            note(f"cloudlet-agent: the job's environment could not be prepared: {exc}\n")
            self._finish(run, 1, run.stop_reason or "exited")
            return False
        return True

    def signalled(self) -> None:
        """The agent got SIGTERM (from its signal handler: only sets a flag)."""
        self._signalled.set()

    def _meant_by_signal(self, exit_code: int, reason: str) -> str:
        """REASON, or ``signal_means`` for a run the node's SIGTERM ended: stopped by the agent
        after the signal, or killed by the same signal (which may reach the run first: wait for
        the agent's handler a moment)."""
        # LOST too: the same signal reaches the node's launcher, whose death ends its runs.
        if self.signal_means is None or reason not in ("exited", "canceled", LOST):
            return reason
        if reason == "canceled" and self._signalled.is_set():
            return self.signal_means
        by_signal = exit_code in (128 + signal.SIGTERM, 128 + signal.SIGKILL)
        if by_signal and self._signalled.wait(SIGNAL_RACE_S):
            return self.signal_means
        return reason

    def _finish(self, run: Run, exit_code: int, reason: str) -> None:
        reason = self._meant_by_signal(exit_code, reason)
        with self._cond:
            run.ended_at = time.time()
            run.reason = reason
            run.exit_code = exit_code
            self._cond.notify_all()
        log(f"run {run.run_id} ended: exit {exit_code} ({reason})")
        self.on_change()

    # -- sending -------------------------------------------------------------------------------
    def _send_loop(self) -> None:
        backoff = Backoff()
        while not self._sender_stop.is_set():
            with self._cond:
                self._cond.wait(self._next_wait())
                runs = list(self._runs.values())
            try:
                for run in runs:
                    self._send_run(run)
                backoff.reset()
            except Unreachable as exc:
                delay = backoff.next()
                log(f"control plane unreachable, retrying in {delay:.1f} s: {exc}")
                self._sender_stop.wait(delay)
            except Revoked:
                self.revoked.set()
                self.on_change()
                return

    def _next_wait(self) -> float:
        """Sleep until the next batch, or until a fresh run is due to be reported running."""
        now, wait = time.time(), BATCH_S
        for run in self._runs.values():
            if not run.running_reported and not run.exited:
                wait = min(wait, max(0.0, run.started_at + REPORT_RUNNING_AFTER_S - now))
        return wait

    def _send_run(self, run: Run) -> None:
        run_reports.report_running(self.client, run)
        exited, tail = run_reports.send_logs(self.client, run, self._cond, self.exit_carries_log)
        if not exited or (tail is None and run.sent_raw < run.written):
            return
        answer = run_reports.send_exit(self.client, run, tail)
        with self._cond:
            self._runs.pop(run.run_id, None)
            self._done[run.run_id] = None
            while len(self._done) > DONE_MEMORY:
                del self._done[next(iter(self._done))]
            self._cond.notify_all()
        run.spool.unlink(missing_ok=True)
        starts = answer.get("start") if isinstance(answer, dict) else None
        for spec in starts or []:
            if isinstance(spec, dict):
                self.start(spec)
        self.on_change()
