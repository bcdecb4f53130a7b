"""The node's launcher: one process, started once per node inside one ``bwrap`` sandbox (the
node's fixed outer part, with the capabilities to make namespaces and mounts), that forks each
job run into its own mount, PID and IPC namespaces with only that run's paths bound
(docs/isolation.md). It replaces a ``bwrap`` + ``setpriv`` start per run. Standard library only:
it runs as a script (``python -I -S launcher.py FD``) and imports nothing of cloudlet.

Protocol, over a ``SOCK_SEQPACKET`` socket pair the agent made (one JSON message a packet):

- launcher → agent ``{"op": "ready"}`` once, when it serves;
- agent → launcher ``{"op": "run", "id", "argv", "cwd", "env", "uid", "gid", "root_inside",
  "privileged", "ops"}`` with descriptors (SCM_RIGHTS): the run's stdout pipe first, then the
  descriptors its ``fdbind`` ops name by index;
- launcher → agent ``{"op": "started", "id"}``, sent with SCM_CREDENTIALS naming the run's PID 1
  (the kernel translates it into the agent's PID namespace), then ``{"op": "exit", "id",
  "status"}`` (an exit code; 128+N for a signal N).

A run is two processes before its command runs: the launcher's child, PID 1 of a new PID
namespace (*reaper*: makes the run's mount and IPC namespaces, builds the root, pivots into it,
forwards SIGTERM to every process of the run and ignores it itself, reaps), and the user's process
(drops to the sandbox user, execs the command). The reaper dies with the launcher
(PR_SET_PDEATHSIG), and when it ends the kernel kills every process left in the run's PID
namespace: a killed launcher takes its runs with it, and a run's daemonised leftovers end with
the run. The launcher forks with its collector frozen and off: a fork copies few pages.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import platform
import resource
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

HOST_VIEW = "/.cloudlet-host"  # where the launcher sees the host's root (never in a run's root)
NEW_ROOT = "/tmp"  # the launcher's folder a run's root is built on (in the run's own namespace)
DEV_TEMPLATES = "/.cloudlet-dev"  # the launcher's templates of a run's /dev (never in a run's root)
MAX_MESSAGE = 1 << 20
MAX_FDS = 64
CAPABILITIES = (
    *("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SYS_CHROOT"),
    *("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_CHOWN"),
    "CAP_SETFCAP",  # a nested user namespace that maps the launcher's uid 0 (unprivileged agent)
)
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "fd": "/proc/self/fd",
    "core": "/proc/kcore",
    "ptmx": "pts/ptmx",
}
RESET_SIGNALS = (
    *(signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT),
    *(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD),
)
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")  # as bwrap's --proc covers them
# Those this kernel has (a run's /proc is another instance of the launcher's): asked once.
_proc_knobs = [name for name in PROC_READ_ONLY if os.path.exists(f"/proc/{name}")]

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x08000000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
AT_RECURSIVE, MOUNT_ATTR_RDONLY = 0x8000, 0x1
SYSCALLS = {  # pivot_root and mount_setattr have no glibc wrapper
    "x86_64": {"pivot_root": 155, "mount_setattr": 442},
    "aarch64": {"pivot_root": 41, "mount_setattr": 442},
}

_libc = ctypes.CDLL(None, use_errno=True)


class LaunchError(OSError):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise LaunchError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    result = _libc.mount(encode(source), target.encode(), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {source or fstype} on {target}")


def _syscall(name: str, *args: Any) -> int:
    number = SYSCALLS[platform.machine()][name]
    return int(_libc.syscall(ctypes.c_long(number), *args))


def unsupported() -> str | None:
    """Why this host cannot run the launcher (the agent then starts a bwrap per run), or None."""
    if platform.machine() not in SYSCALLS:
        return f"no system call numbers for {platform.machine()}"
    if _syscall("mount_setattr", -1, b"", 0, None, ctypes.c_size_t(0)) != 0 and ctypes.get_errno() == 38:
        return "the kernel has no mount_setattr (Linux 5.12+)"  # ENOSYS
    return None


def _read_only(path: str, *, recursive: bool = True) -> None:
    """Make the mount at ``path`` (and every mount below it, if ``recursive``) read-only (one
    ``mount_setattr``)."""
    attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY, 0, 0, 0)  # attr_set, attr_clr, propagation, userns_fd
    buf = ctypes.create_string_buffer(attr, len(attr))
    flags = AT_RECURSIVE if recursive else 0
    result = _syscall("mount_setattr", -100, path.encode(), flags, buf, ctypes.c_size_t(len(attr)))
    _check(result, f"read-only {path}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), "prctl")


def _die_with_launcher(alive: int) -> None:
    """Die with the launcher (a PID 1's ``getppid`` is 0: its parent is outside its namespace,
    so whether the launcher died before the request took effect is asked of ``alive``, the read
    end of a pipe only the launcher holds open, and never writes)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    readable, _, _ = select.select([alive], [], [], 0)
    if readable:  # end of file: the launcher is gone
        os._exit(137)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


# -- a run's root ------------------------------------------------------------------------------
def _here(root: str, path: str) -> str:
    return root + path


def _bind(source: str, target: str, *, writable: bool, own_view: bool = False) -> None:
    """Bind ``source`` (recursively) at ``target``; read-only unless ``writable``. ``own_view``:
    a folder of the launcher's own view, read-only there, mounts below it included (bwrap's
    --ro-bind), which a bind copies: made read-only again only if it is not."""
    is_dir, read_only = _own_view[source] if own_view else (os.path.isdir(source), False)
    if is_dir:
        _folder(target)
    else:
        _folder(os.path.dirname(target))
        # A file may already be there, inside a folder bound read-only before it (a uri_file
        # input in a uri_folder input's folder): bound over as it is, as bwrap does.
        if not os.path.lexists(target):
            with open(target, "a"):
                pass
    _mount(source, target, None, MS_BIND | MS_REC)
    if not writable and not read_only:
        _read_only(target)


_own_view: dict[str, tuple[bool, bool]] = {}


def learn_own_view(path: str) -> None:
    """Whether ``path`` of the launcher's view is a folder and a read-only mount: asked once, in
    the launcher, not by every run (its view does not change)."""
    if path not in _own_view:
        _own_view[path] = (os.path.isdir(path), bool(os.statvfs(path).f_flag & os.ST_RDONLY))


def _folder(path: str) -> None:
    """``path`` as a folder (mode 0755: the launcher's umask is 022), its parents too."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(path, mode=0o755, exist_ok=True)


def _dev(root: str, devices: list[str]) -> None:
    """A ``/dev`` of its own: the launcher's template for these devices (one recursive bind: the
    usual nodes, the node's GPU devices, the links), a private ``/dev/shm`` and a fresh ``devpts``
    instance mounted on it."""
    dev = _here(root, "/dev")
    os.mkdir(dev, 0o755)
    _mount(dev_template(devices), dev, None, MS_BIND | MS_REC)
    _mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


_dev_templates: dict[tuple[str, ...], str] = {}


def dev_template(devices: list[str]) -> str:
    """The fixed part of a run's ``/dev``, made once (per device list) in the launcher's own mount
    namespace, which each run's namespace copies: a tmpfs with the usual nodes and the GPU devices
    bound from the launcher's ``/dev``, the links, and the empty ``shm`` and ``pts`` a run mounts
    its own on. The tmpfs is read-only (no run may add to it: every run's ``/dev`` is this one);
    the device binds on it stay writable (a read-only mount never stops a device's writes, but
    its own flags are kept)."""
    key = tuple(devices)
    made = _dev_templates.get(key)
    if made is not None:
        return made
    dev = f"{DEV_TEMPLATES}/{len(_dev_templates)}"
    os.makedirs(dev, mode=0o755)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755")
    for name in DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            _bind(f"/dev/{name}", f"{dev}/{name}", writable=True)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/shm", 0o755)
    os.mkdir(f"{dev}/pts", 0o755)
    for device in devices:
        _bind(device, dev + device.removeprefix("/dev"), writable=True)
    _read_only(dev, recursive=False)
    _dev_templates[key] = dev
    return dev


def _proc(root: str) -> None:
    """``/proc`` of the run's PID namespace (the caller is its PID 1), its knobs read-only."""
    proc = _here(root, "/proc")
    os.makedirs(proc, mode=0o555, exist_ok=True)
    _mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in _proc_knobs:
        path = f"{proc}/{name}"
        _mount(path, path, None, MS_BIND | MS_REC)
        _read_only(path)


def _fd_bind(fd: int, path: str, host_path: str, root: str, *, writable: bool) -> None:
    """Bind what the agent's descriptor ``fd`` names. A descriptor of the agent's namespace cannot
    be bound here: the same object is found again through the host's view (named by the path the
    agent read from the descriptor) and must be the very same inode, or the run does not start."""
    again = os.open(HOST_VIEW + host_path, os.O_PATH | os.O_CLOEXEC)
    try:
        want, got = os.fstat(fd), os.fstat(again)
        if (want.st_dev, want.st_ino) != (got.st_dev, got.st_ino):
            raise LaunchError(0, f"{path} changed while the run was being started")
        _bind(f"/proc/self/fd/{again}", _here(root, path), writable=writable)
    finally:
        os.close(again)


def build_root(root: str, ops: list[list[Any]], fds: list[int], trace: Any = None) -> None:
    """Carry out the agent's plan (``Sandbox.launch_ops``) on the fresh tmpfs ``root``."""
    for op in ops:
        kind = op[0]
        if kind == "bind":  # a folder of the launcher's own view (system folders, the interpreter)
            _bind(op[1], _here(root, op[1]), writable=bool(op[2]), own_view=True)
        elif kind == "symlink":
            os.symlink(op[1], _here(root, op[2]))
        elif kind == "dir":
            _folder(_here(root, op[1]))
        elif kind == "tmpfs":
            _folder(_here(root, op[1]))
            _mount("tmpfs", _here(root, op[1]), "tmpfs", MS_NOSUID | MS_NODEV, f"mode={op[2]}")
        elif kind == "dev":
            _dev(root, list(op[1]))
        elif kind == "proc":
            _proc(root)
        elif kind == "fdbind":
            _fd_bind(fds[int(op[1])], op[2], op[3], root, writable=bool(op[4]))
        else:
            raise LaunchError(0, f"unknown step {kind!r}")
        if trace is not None:
            trace(f"{kind} {op[1] if len(op) > 1 and isinstance(op[1], str) else ''}")


def _pivot(root: str) -> None:
    os.chdir(root)
    _check(_syscall("pivot_root", b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


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
    _unshare(CLONE_NEWUSER)
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
        _prctl(PR_SET_DUMPABLE, 1)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if root_inside:
            _map_ids(0, 0, uid, gid)
        return
    # In the launcher's user namespace (uid 0 there is the agent's user): a nested one, in which
    # the run is the agent's user (as bwrap --unshare-user makes it) or root.
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _map_ids(0 if root_inside else uid, 0 if root_inside else gid, 0, 0)


def _exec_user(request: dict[str, Any], out: int) -> None:
    try:
        _prctl(PR_SET_DUMPABLE, 1)  # its own /proc/self files, to write its id maps
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
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
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


# -- the run's PID 1 --------------------------------------------------------------------------
def _reaper(request: dict[str, Any], out: int, fds: list[int], alive: int) -> None:
    """PID 1 of the run: build its root, start the user's process, forward SIGTERM to every
    process of the run (ignoring it itself), reap, and end with the user's process."""
    trace = _Trace(bool(request.get("trace")))
    try:
        _die_with_launcher(alive)
        os.setsid()
        trace("pdeathsig+setsid")
        _unshare(CLONE_NEWNS | CLONE_NEWIPC)  # a copy of the launcher's mounts, all private (main)
        trace("unshare(NEWNS|NEWIPC)")
        _mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        trace("root tmpfs")
        build_root(NEW_ROOT, request["ops"], fds, trace)
        for fd in fds:
            os.close(fd)
        _pivot(NEW_ROOT)
        trace("pivot_root+detach")
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(out, f"cloudlet-launcher: cannot build the run's sandbox: {exc}\n".encode())
        os._exit(1)
    signal.signal(signal.SIGTERM, lambda *_: _forward(signal.SIGTERM))
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: _forward(number))
    if request["root_inside"]:  # its own user namespace: made by a fork that then execs
        _prctl(PR_SET_DUMPABLE, 0)  # (the fork makes itself dumpable again to map its ids)
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
            os._exit(_exit_code(status))  # the kernel kills the rest of the PID namespace


def _forward(sig: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(-1, sig)  # from PID 1: every process of the namespace but itself


# -- the launcher's loop -----------------------------------------------------------------------
class Launcher:
    """Single-threaded: reads requests, forks holders, reports their exits; never blocks on a run."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.runs: dict[int, str] = {}  # a run's PID 1 → its id
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.alive_r, self.alive_w = os.pipe2(os.O_CLOEXEC)
        # Its own PID namespace, to go back to after making each run's (a fork made after
        # unshare(CLONE_NEWPID) is PID 1 of a new one: no process in between).
        self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopped by its agent closing the socket
        selector = selectors.DefaultSelector()
        selector.register(self.channel, selectors.EVENT_READ, "request")
        selector.register(self.wake_r, selectors.EVENT_READ, "child")
        self._send({"op": "ready"})
        while True:
            for key, _ in selector.select():
                if key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                    self._reap()
                elif not self._receive():
                    return  # the agent is gone: so are the runs (they die with the launcher)

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
            self._start(request, fds)
        else:
            self._close(fds)
        return True

    def _start(self, request: dict[str, Any], fds: list[int]) -> None:
        if not fds:
            self._send({"op": "exit", "id": request.get("id"), "status": 1})
            return
        try:
            for op in request.get("ops", ()):
                if op[0] == "dev":  # made here, in the launcher's namespace: kept for every run
                    dev_template(list(op[1]))
                elif op[0] == "bind":
                    learn_own_view(op[1])
            _unshare(CLONE_NEWPID)
            pid = -1
            try:
                pid = os.fork()
            finally:
                if pid != 0:
                    _check(_libc.setns(self.own_pid_ns, CLONE_NEWPID), "setns")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.write(fds[0], f"cloudlet-launcher: cannot start the run: {exc}\n".encode())
            self._close(fds)
            self._send({"op": "exit", "id": request.get("id"), "status": 1})
            return
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.channel.close()
            os.close(self.alive_w)
            _reaper(request, fds[0], fds[1:], self.alive_r)
        self._close(fds)
        self.runs[pid] = str(request["id"])
        # The kernel puts the pid into the agent's PID namespace (the launcher may name its child's).
        started = json.dumps({"op": "started", "id": request["id"]}).encode()
        creds = struct.pack("3i", pid, os.getuid(), os.getgid())
        self.channel.sendmsg([started], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])

    def _reap(self) -> None:
        while self.runs:
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
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Each run's PID 1 is a fork of this process: no collector pass may touch (copy) its pages.
    gc.disable()
    gc.freeze()
    Launcher(channel).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
