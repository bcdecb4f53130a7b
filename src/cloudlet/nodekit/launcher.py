"""The node's launcher: one process, started once per node inside one ``bwrap`` sandbox (the
node's fixed outer part, with the capabilities to make namespaces and mounts), that forks each
job run into its own mount, PID and IPC namespaces with only that run's paths bound
(docs/isolation.md). It replaces a ``bwrap`` + ``setpriv`` start per run. Standard library only:
it runs as a script (``python -I -S launcher.py FD``) and imports nothing of cloudlet but its
sibling ``launch_root.py`` (a run's root), which is standard library only too.

Protocol, over a ``SOCK_SEQPACKET`` socket pair the agent made (one JSON message a packet):

- launcher → agent ``{"op": "ready"}`` once, when it serves;
- agent → launcher ``{"op": "run", "id", "argv", "cwd", "env", "uid", "gid", "root_inside",
  "privileged", "ops", "fixed"}`` with descriptors (SCM_RIGHTS): the run's stdout pipe first, then
  the descriptors its ``fdbind`` ops name by index; the first ``fixed`` ops are the node's fixed
  part of a root, the same for every run;
- launcher → agent ``{"op": "started", "id", "spare"}``, sent with SCM_CREDENTIALS naming the
  run's PID 1 (the kernel translates it into the agent's PID namespace; ``spare``: made ahead),
  then ``{"op": "exit", "id", "status"}`` (an exit code; 128+N for a signal N).

A run is two processes before its command runs: the launcher's child, PID 1 of a new PID
namespace (*reaper*: makes the run's mount and IPC namespaces, builds the root, pivots into it,
forwards SIGTERM to every process of the run and ignores it itself, reaps), and the user's process
(drops to the sandbox user, execs the command). The launcher keeps one reaper made ahead, the
*spare*: its namespaces and the fixed part of its root are made before any request, at the
lowest priority, raised when the launcher hands it the next request over a socket pair of the
two. A reaper says on it when its command was spawned (the launcher then prepares the next
spare) and, once it has killed and reaped all that the run left, its exit code (reported before
the reaper's namespaces are torn down). The reaper
dies with the launcher (PR_SET_PDEATHSIG), and when it ends the kernel kills every process left
in the run's PID namespace: a killed launcher takes its runs and its spare with it, and a run's
daemonised leftovers end with the run. The launcher forks with its collector frozen and off: a
fork copies few pages.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any, NoReturn

if __name__ == "__main__":  # run as a script (-I -S): its sibling from the package's root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))))
from cloudlet.nodekit.launch_root import (  # the sibling: standard library only too
    CLONE_NEWIPC,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    NEW_ROOT,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    build_root,
    check,
    dev_template,
    learn_own_view,
    learned,
    libc,
    mount,
    pivot,
    prctl,
    unshare,
    unsupported,
)
from cloudlet.nodekit.launch_root import (
    HOST_VIEW as HOST_VIEW,  # (the agent's sandbox binds the host there)
)

MAX_MESSAGE = 1 << 20
MAX_FDS = 64
# The next spare is prepared when a run ends, or this long after its command was spawned if it
# runs on: not while a short run is still starting or ending (on a busy node, its fork and
# faults would compete with them for the CPU).
SPARE_AFTER_S = 0.05
SPARE_NICE = 19  # a spare is made at this niceness: it never competes with a run's start or end
END_WAIT_S = 1.0  # a run's PID 1 waits this long for its leftovers to die before it tells
CAPABILITIES = (
    *("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_CHROOT"),
    *("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_CHOWN"),
    "CAP_SETFCAP",  # a nested user namespace that maps the launcher's uid 0 (unprivileged agent)
    "CAP_SYS_NICE",  # a spare is made at the lowest priority and raised when handed a request
)
RESET_SIGNALS = (
    *(signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT),
    *(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD),
)


def _die_with_launcher(alive: int) -> None:
    """Die with the launcher (a PID 1's ``getppid`` is 0: its parent is outside its namespace,
    so whether the launcher died before the request took effect is asked of ``alive``, the read
    end of a pipe only the launcher holds open, and never writes)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    readable, _, _ = select.select([alive], [], [], 0)
    if readable:  # end of file: the launcher is gone
        os._exit(137)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class _Trace:
    """Per-step wall and CPU time of a run's start (a request's ``trace``: bench/launcher_steps.py)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.steps: list[list[Any]] = []
        self.last = (time.perf_counter_ns(), time.thread_time_ns())

    def __call__(self, step: str) -> None:
        if self.on:
            now = (time.perf_counter_ns(), time.thread_time_ns())
            self.steps.append([step, now[0] - self.last[0], now[1] - self.last[1]])
            self.last = (time.perf_counter_ns(), time.thread_time_ns())

    def skip(self) -> None:
        self.last = (time.perf_counter_ns(), time.thread_time_ns())

    def write(self, out: int, command: Any) -> None:
        if self.on:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            report = {
                "steps": self.steps,
                "utime": usage.ru_utime,
                "stime": usage.ru_stime,
                "minflt": usage.ru_minflt,
                "command_cpu": command.ru_utime + command.ru_stime,
            }
            os.write(out, f"cloudlet-trace {json.dumps(report)}\n".encode())


# -- the user's process ------------------------------------------------------------------------
def _map_ids(inner_uid: int, inner_gid: int, outer_uid: int, outer_gid: int) -> None:
    """A nested user namespace (as ``unshare --user --map-root-user`` makes) in which this
    process is ``inner_uid``; ``outer_*``: who it is in the namespace it leaves."""
    unshare(CLONE_NEWUSER)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{inner_uid} {outer_uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{inner_gid} {outer_gid} 1")


def _become_user(request: dict[str, Any]) -> None:
    uid, gid, root_inside = int(request["uid"]), int(request["gid"]), bool(request["root_inside"])
    if request.get("privileged", True):  # real root: drop to the sandbox user, as setpriv does
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        # Leaving root made it undumpable (its /proc/self root's), as setpriv's exec would undo.
        prctl(PR_SET_DUMPABLE, 1)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if root_inside:
            _map_ids(0, 0, uid, gid)
        return
    # In the launcher's user namespace (uid 0 there is the agent's user): a nested one, in which
    # the run is the agent's user (as bwrap --unshare-user makes it) or root.
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    _map_ids(0 if root_inside else uid, 0 if root_inside else gid, 0, 0)


def _exec_user(request: dict[str, Any], out: int) -> None:
    try:
        prctl(PR_SET_DUMPABLE, 1)  # its own /proc/self files, to write its id maps
        # What the launcher and Python ignore (SIGTERM, SIGPIPE, SIGXFSZ) an exec would keep ignored.
        for sig in RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, 1 << 16)
        _become_user(request)
        os.chdir(request["cwd"])
        argv = list(request["argv"])
        os.execvpe(argv[0], argv, dict(request["env"]))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"cloudlet-launcher: cannot start the run: {exc}\n".encode())
    os._exit(127)


def _spawn_user(request: dict[str, Any], out: int, alive: int, trace: _Trace) -> subprocess.Popen[bytes]:
    """Start the command without another fork of this Python (a fork copies its pages): PID 1
    becomes the sandbox user itself, then spawns it (vfork + exec). As a real root that left
    root, it stays undumpable: no process of the run can read its memory."""
    uid, gid = int(request["uid"]), int(request["gid"])
    if request.get("privileged", True):
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    else:  # the agent's user, in a user namespace nested in the launcher's (as bwrap makes it)
        _map_ids(uid, gid, 0, 0)
    trace("become the user")
    _die_with_launcher(alive)  # a change of credentials cleared it
    os.close(alive)
    # Its memory is a copy of the launcher's (other runs' requests included): no process of the
    # run, the same user, may read it (ptrace, /proc/1/mem, /proc/1/environ).
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    trace("pdeathsig, prctl")
    # subprocess's vfork: handlers Python set go back to the default, so do SIGPIPE and SIGXFSZ.
    # (Not os.posix_spawn: glibc 2.36's leaves its internal signals 32 and 33 ignored in the command.)
    # (The caller holds on to the object: its collection would reap the process the reaper waits for.)
    return subprocess.Popen(
        list(request["argv"]),
        cwd=request["cwd"],
        env=dict(request["env"]),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=out,
        close_fds=True,
        restore_signals=True,
    )


def _default_inherited_ignores() -> None:
    """Every signal the launcher was started ignoring goes back to its default, once, before any
    spare is forked: an exec keeps what is ignored, so a run would otherwise inherit whatever its
    agent's starter ignored (a non-interactive shell's ``&`` ignores SIGINT and SIGQUIT, ``nohup``
    SIGHUP). What the launcher itself ignores (SIGTERM) the run's PID 1 handles, and its exec
    defaults."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)


# -- the run's PID 1 --------------------------------------------------------------------------
def _spare(handoff: socket.socket, alive: int, fixed: list[list[Any]]) -> NoReturn:
    """A run's PID 1 made ahead of its run (the *spare*): the fork, its namespaces and the node's
    fixed part of a root (``fixed``, the launcher's last request's) are done before the request
    comes, which then only has the run's own binds left to make. Its launcher hands it the request
    over ``handoff`` (closed instead when the spare is not wanted: it ends)."""
    trace = _Trace(True)  # (reported only if the request asks)
    failed: BaseException | None = None
    try:
        _die_with_launcher(alive)
        os.setsid()
        trace("pdeathsig+setsid")
        unshare(CLONE_NEWNS | CLONE_NEWIPC)  # a copy of the launcher's mounts, all private (main)
        trace("unshare(NEWNS|NEWIPC)")
        mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        trace("root tmpfs")
        build_root(NEW_ROOT, fixed, [], trace)
    except BaseException as exc:  # told to the run it is handed (it has no output before)
        failed = exc
    try:
        data, fds, _, _ = socket.recv_fds(handoff, MAX_MESSAGE, MAX_FDS)
    except OSError:
        data, fds = b"", []
    if not data or not fds:  # not wanted (or the launcher is gone): nothing of any run ran here
        os._exit(0)
    trace.skip()  # the wait for a request is no run's
    request = json.loads(data)
    trace.on = bool(request.get("trace"))
    _reaper(request, fds[0], fds[1:], alive, handoff, trace, len(fixed), failed)


def _reaper(
    request: dict[str, Any],
    out: int,
    fds: list[int],
    alive: int,
    handoff: socket.socket,
    trace: _Trace,
    built: int,
    failed: BaseException | None,
) -> NoReturn:
    """PID 1 of the run, its first ``built`` steps done as a spare: finish its root, start the
    user's process (then tell the launcher, which prepares the next spare), forward SIGTERM to
    every process of the run (ignoring it itself), reap, and end with the user's process."""
    try:
        if failed is not None:
            raise failed
        build_root(NEW_ROOT, request["ops"][built:], fds, trace)
        for fd in fds:
            os.close(fd)
        pivot(NEW_ROOT)
        trace("pivot_root+detach")
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(out, f"cloudlet-launcher: cannot build the run's sandbox: {exc}\n".encode())
        os._exit(1)
    signal.signal(signal.SIGTERM, lambda *_: _forward(signal.SIGTERM))
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: _forward(number))
    if request["root_inside"]:  # its own user namespace: made by a fork that then execs
        prctl(PR_SET_DUMPABLE, 0)  # (the fork makes itself dumpable again to map its ids)
        user = os.fork()
        if user == 0:
            _exec_user(request, out)
        os.close(alive)
    else:
        try:
            spawned = _spawn_user(request, out, alive, trace)
            user = spawned.pid
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.write(out, f"cloudlet-launcher: cannot start the run: {exc}\n".encode())
            os._exit(127)
    trace("spawn user")
    with contextlib.suppress(OSError):  # the launcher's cue to prepare the next spare
        handoff.send(b"spawned")
    if not trace.on:  # (a traced run reports on it once its command ended)
        os.close(out)
    while True:
        try:
            pid, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == user:
            trace("wait for the command")
            trace.write(out, usage)
            _end(handoff, _exit_code(status))


def _end(handoff: socket.socket, code: int) -> NoReturn:
    """End the run: every process left in its PID namespace killed and reaped, then its exit told
    to the launcher before this PID 1 exits, whose namespaces' teardown (its mounts, a copy of the
    launcher's memory: ~1 ms, more under load) then delays nobody."""
    _forward(signal.SIGKILL)
    signal.signal(signal.SIGALRM, _give_up)
    signal.setitimer(signal.ITIMER_REAL, END_WAIT_S)
    try:
        while True:
            os.wait()
    except ChildProcessError:  # all gone: the run has ended
        with contextlib.suppress(OSError):
            handoff.send(b"exit %d" % code)
    except TimeoutError:  # one it may not kill (or stuck in the kernel): ended by its exit below
        pass
    os._exit(code)


def _give_up(*_: Any) -> None:
    raise TimeoutError


def _forward(sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(-1, sig)  # from PID 1: every process of the namespace but itself


# -- the launcher's loop -----------------------------------------------------------------------
class _Spare:
    """A run's PID 1 made ahead (``_spare``), seen from the launcher: its pid, the launcher's end
    of its hand-off socket, the fixed steps it built, what the launcher had made then, and whether
    it was made at ``SPARE_NICE``."""

    def __init__(
        self, pid: int, handoff: socket.socket, fixed: list[list[Any]], made: int, nice: bool
    ) -> None:
        self.pid, self.handoff, self.fixed, self.made, self.nice = pid, handoff, fixed, made, nice


class Launcher:
    """Single-threaded: reads requests, hands each to a spare (made ahead, or now when none is
    ready), prepares the next spare once the last one's command runs, reports the runs' exits;
    never blocks on a run."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.runs: dict[int, str] = {}  # a run's PID 1 → its id
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.alive_r, self.alive_w = os.pipe2(os.O_CLOEXEC)
        # Its own PID namespace, to go back to after making each run's (a fork made after
        # unshare(CLONE_NEWPID) is PID 1 of a new one: no process in between).
        self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.selector = selectors.DefaultSelector()
        self.spare: _Spare | None = None  # ready for the next request
        self.handed: dict[int, _Spare] = {}  # handed a request, their command not yet spawned
        self.fixed: list[list[Any]] | None = None  # the node's fixed steps, from the last request
        self.made = 0  # /dev templates and views learned: a spare forked before a new one lacks it
        self.spare_due: float | None = None  # when to prepare the next spare (monotonic)
        # Spares made ahead at SPARE_NICE, raised when handed a request; off for good once raising
        # one is refused (no CAP_SYS_NICE where it counts: a launcher under an unprivileged agent).
        self.nice_spares = True

    def serve(self) -> None:
        _default_inherited_ignores()
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopped by its agent closing the socket
        self.selector.register(self.channel, selectors.EVENT_READ, "request")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "child")
        self._send({"op": "ready"})
        while True:
            wait = None if self.spare_due is None else max(0.0, self.spare_due - time.monotonic())
            events = self.selector.select(wait)
            if self.spare_due is not None and time.monotonic() >= self.spare_due:
                self._prepare_spare()
            for key, _ in events:
                if key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                    self._reap()
                elif isinstance(key.data, _Spare):
                    self._spare_spoke(key.data)
                elif not self._receive():
                    return  # the agent is gone: so are the runs and the spare (they die with it)

    def _receive(self) -> bool:
        data, fds, _, _ = socket.recv_fds(self.channel, MAX_MESSAGE, MAX_FDS)
        if not data:
            return False
        try:
            request = json.loads(data)
        except ValueError:
            self._close(fds)
            return True
        if request.get("op") == "run":
            self._start(request, data, fds)
        else:
            self._close(fds)
        return True

    def _learn(self, ops: list[list[Any]]) -> None:
        """What runs' roots take from the launcher's own namespace, made here once and kept."""
        known = learned()
        for op in ops:
            if op[0] == "dev":
                dev_template(list(op[1]))
            elif op[0] == "bind":
                learn_own_view(op[1])
        if learned() != known:
            self.made += 1

    def _start(self, request: dict[str, Any], data: bytes, fds: list[int]) -> None:
        if not fds:
            self._send({"op": "exit", "id": request.get("id"), "status": 1})
            return
        ops = request.get("ops", [])
        fixed = ops[: int(request.get("fixed", 0))]
        spare, self.spare, ahead = self.spare, None, False
        try:
            self._learn(ops)
            self.fixed = fixed
            if spare is not None and (spare.fixed != fixed or spare.made != self.made):
                self._drop(spare)  # built for another root, or before a template it needs
            elif spare is not None:
                with contextlib.suppress(OSError):  # (one that died: a new one below)
                    self._hand(spare, data, fds)
                    ahead = True
            if not ahead:
                spare = self._fork_spare(fixed)
                self._hand(spare, data, fds)
        except OSError as exc:
            if spare is not None:
                self._drop(spare)
            with contextlib.suppress(OSError):
                os.write(fds[0], f"cloudlet-launcher: cannot start the run: {exc}\n".encode())
            self._close(fds)
            self._send({"op": "exit", "id": request.get("id"), "status": 1})
            return
        self._close(fds)
        assert spare is not None
        self.handed[spare.pid] = spare
        self.runs[spare.pid] = str(request["id"])
        # The kernel puts the pid into the agent's PID namespace (the launcher may name its child's).
        started = json.dumps({"op": "started", "id": request["id"], "spare": ahead}).encode()
        creds = struct.pack("3i", spare.pid, os.getuid(), os.getgid())
        self.channel.sendmsg([started], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])

    def _hand(self, spare: _Spare, data: bytes, fds: list[int]) -> None:
        try:
            if spare.nice:  # its run (and what it starts) at the launcher's own priority
                try:
                    os.setpriority(os.PRIO_PROCESS, spare.pid, os.getpriority(os.PRIO_PROCESS, 0))
                except PermissionError:
                    self.nice_spares = False
                    raise
            socket.send_fds(spare.handoff, [data], fds)
        except OSError:
            self._drop(spare)
            raise

    def _fork_spare(self, fixed: list[list[Any]], *, ahead: bool = False) -> _Spare:
        """A PID 1 for the next request (``ahead``: made at ``SPARE_NICE``), or for this one."""
        nice = ahead and self.nice_spares
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            unshare(CLONE_NEWPID)
            pid = -1
            try:
                pid = os.fork()
            finally:
                if pid != 0:
                    check(libc.setns(self.own_pid_ns, CLONE_NEWPID), "setns")
        except OSError:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # No launcher's end of a hand-off may stay open here: a spare ends when its closes.
            for other in (self.channel, ours, *(s.handoff for s in self.handed.values())):
                other.close()
            if self.spare is not None:
                self.spare.handoff.close()
            os.close(self.alive_w)
            _spare(theirs, self.alive_r, fixed)
        theirs.close()
        if nice:
            # Lowered here, not by the spare itself: a spare that lowered itself could do so after
            # ``_hand`` raised it, and its run would then run at SPARE_NICE (seen under load).
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, SPARE_NICE)
        spare = _Spare(pid, ours, fixed, self.made, nice)
        self.selector.register(ours, selectors.EVENT_READ, spare)
        return spare

    def _spare_spoke(self, spare: _Spare) -> None:
        """A handed spare spawned its command: prepare the next spare now, off the run's start;
        or its run ended: report it now (its PID 1 ends after, off the critical path). An
        unhanded spare that ends (killed) is dropped."""
        try:
            said = spare.handoff.recv(64)
        except OSError:
            said = b""
        if self.handed.get(spare.pid) is not spare:
            if self.spare is spare:
                self.spare = None
            self._drop(spare)
        elif said == b"spawned":
            if self.spare is None and self.spare_due is None:
                self.spare_due = time.monotonic() + SPARE_AFTER_S
        else:  # "exit N", or the end of a PID 1 that said nothing (its exit is reaped)
            del self.handed[spare.pid]
            self._drop(spare)
            run_id = self.runs.pop(spare.pid, None) if said.startswith(b"exit ") else None
            if run_id is not None:
                self._send({"op": "exit", "id": run_id, "status": int(said.split()[1])})
            self._prepare_spare()

    def _prepare_spare(self) -> None:
        self.spare_due = None
        if self.spare is None and self.fixed is not None:
            with contextlib.suppress(OSError):  # the next run then forks one itself
                self.spare = self._fork_spare(self.fixed, ahead=True)

    def _drop(self, spare: _Spare) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(spare.handoff)
        spare.handoff.close()  # an unhanded spare ends (reaped with the runs)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run_id = self.runs.pop(pid, None)
            if run_id is not None:
                self._send({"op": "exit", "id": run_id, "status": _exit_code(status)})

    def _send(self, message: dict[str, Any]) -> None:
        self.channel.sendmsg([json.dumps(message).encode()])

    @staticmethod
    def _close(fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def main(argv: list[str]) -> int:
    why = unsupported()
    if why is not None:
        print(f"cloudlet-launcher: {why}", file=sys.stderr)
        return 2  # before "ready": the agent falls back to a bwrap per run
    channel = socket.socket(fileno=int(argv[1]))
    os.umask(0o022)
    # Once, not per run: no mount a run makes propagates anywhere, nor one made elsewhere into it.
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    os.makedirs(NEW_ROOT, mode=0o755, exist_ok=True)
    # Each run's PID 1 is a fork of this process: no collector pass may touch (copy) its pages.
    gc.disable()
    gc.freeze()
    Launcher(channel).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
