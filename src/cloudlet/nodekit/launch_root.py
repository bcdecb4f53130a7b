"""A job run's root, built by its PID 1 in the node's launcher (``launcher.py``, which runs it
as a sibling: standard library only, nothing of cloudlet): a fresh tmpfs with the launcher's
system folders bound read-only, a ``/dev`` from a template the launcher made once, ``/proc`` of the
run's PID namespace, and each of the run's binds found again through the host's view as the very
same inode (docs/isolation.md, "Job runs: one launcher per node")."""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from typing import Any

HOST_VIEW = "/.cloudlet-host"  # where the launcher sees the host's root (never in a run's root)
# The launcher's folder a run's root is built on (in the run's own namespace; made by the launcher).
# Not /tmp: its tmpfs would hide the launcher's own binds under /tmp (an interpreter or a cloudlet
# there) from the run's PID 1 that binds them.
NEW_ROOT = "/.cloudlet-root"
DEV_TEMPLATES = "/.cloudlet-dev"  # the launcher's templates of a run's /dev (never in a run's root)
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "fd": "/proc/self/fd",
    "core": "/proc/kcore",
    "ptmx": "pts/ptmx",
}
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

libc = ctypes.CDLL(None, use_errno=True)


class LaunchError(OSError):
    pass


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise LaunchError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    result = libc.mount(encode(source), target.encode(), encode(fstype), ctypes.c_ulong(flags), encode(data))
    check(result, f"mount {source or fstype} on {target}")


def _syscall(name: str, *args: Any) -> int:
    number = SYSCALLS[platform.machine()][name]
    return int(libc.syscall(ctypes.c_long(number), *args))


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
    check(result, f"read-only {path}")


def unshare(flags: int) -> None:
    check(libc.unshare(flags), "unshare")


def prctl(option: int, value: int) -> None:
    check(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), "prctl")


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
    mount(source, target, None, MS_BIND | MS_REC)
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
    mount(dev_template(devices), dev, None, MS_BIND | MS_REC)
    mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


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
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755")
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
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in _proc_knobs:
        path = f"{proc}/{name}"
        mount(path, path, None, MS_BIND | MS_REC)
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
            mount("tmpfs", _here(root, op[1]), "tmpfs", MS_NOSUID | MS_NODEV, f"mode={op[2]}")
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


def pivot(root: str) -> None:
    os.chdir(root)
    check(_syscall("pivot_root", b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def learned() -> tuple[int, int]:
    """How many ``/dev`` templates and views of its own the launcher has learned (a run's PID 1
    forked before one was learned lacks it)."""
    return len(_dev_templates), len(_own_view)
