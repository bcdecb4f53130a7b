"""The sandbox a node's user processes run in: jobs, environment builds, an instance's apps,
setup scripts and sshd (docs/isolation.md). Standard library only, like the rest of the agent.

The provider says what to do in the agent's environment:

- ``CLOUDLET_SANDBOX``: ``bwrap`` (bubblewrap) or ``none`` (unset: ``none``; the local provider
  always sets it);
- ``CLOUDLET_SANDBOX_UID``, ``_GID``: the unprivileged host user they run as (default 65534);
- ``CLOUDLET_SANDBOX_ROOT=1``: they are root *inside* a user namespace mapped to that user
  (a compute instance's ``enable_root_access``).

With ``bwrap`` and an agent running as root, a real-root ``bwrap`` builds the mount namespace
(host paths such as the interpreter's prefix are reachable only by root), then ``setpriv`` drops
to the sandbox user inside it (and ``unshare --user --map-root-user`` after it gives root-inside).
``bwrap`` is never given ``--unshare-user`` as real root: that would map uid 0 to host root. An
agent that is not root gets what an unprivileged user namespace allows: the same file-system and
process isolation, under its own uid.

The sandbox sees the system folders read-only (``/usr``, ``/etc`` with a generated ``passwd``,
``group`` and ``hosts``, ``/opt``; ``/sys`` on a host with GPUs), the agent's interpreter
read-only (a job's ``python`` is the agent's), its own ``/dev`` (GPU devices bound in), ``/proc``
of its own PID namespace, a private ``/tmp`` and ``/dev/shm``, and the binds it is given —
nothing else of the host.

Job runs start in the node's launcher (nodekit/launcher.py: ``launcher_argv`` starts it in the fixed
part, ``launch_plan`` gives it each run's root as steps); the rest, and job runs where there is no
launcher, get a ``bwrap`` per process (``wrap``).

Signals: the agent stops a run with SIGTERM, then SIGKILL, to its process group, which holds the
outer ``bwrap`` too. That ``bwrap`` would die of the SIGTERM at once and take the job with it
(``--die-with-parent``) before it could checkpoint, so the SIGTERM goes to every member of the
group but the outer ``bwrap`` (``runstate.signal_group``; the sandbox's PID 1 ignores it, as a PID
namespace's init does), and the SIGKILL to the whole group. When the sandbox's PID 1 ends, the
kernel kills what is left inside it, daemonised leftovers too.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudlet.nodekit import safe_paths

MODES = ("bwrap", "none")
DEFAULT_UID = DEFAULT_GID = 65534
USER_NAME = "azureuser"  # as on Azure ML compute
SYSTEM_DIRS = ("/usr", "/etc", "/opt")
MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEVICE_GLOBS = ("/dev/nvidia*", "/dev/infiniband", "/dev/kfd", "/dev/dri")
TMPFS_DIRS = ("/dev", "/dev/shm", "/proc", "/tmp")


# What a user process gets of the agent's environment: an allowlist (the node's secrets, its
# directory and the agent's own settings stay behind). The caller adds HOME, USER and its own.
PASSED_ENV = (
    *("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED"),
    # node tags: how the provider finds a node's processes (list_nodes, terminate)
    *("CLOUDLET_INSTALLATION", "CLOUDLET_NODE_ID", "CLOUDLET_OPERATION_ID", "CLOUDLET_INSTANCE"),
    *("CLOUDLET_NODE_SIZE", "CLOUDLET_NODE_TIER", "CLOUDLET_NODE_VCPUS", "CLOUDLET_NODE_MEMORY_GB"),
    "CLOUDLET_NODE_GPUS",
)
PASSED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "SSL_CERT_", "UV_", "PIP_")


def user_environment(agent_env: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted part of the agent's environment, for a user process."""
    return {k: v for k, v in agent_env.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)}


class SandboxError(RuntimeError):
    """The sandbox is misconfigured or its tools are missing; the message names the fix."""


@dataclass(frozen=True)
class Bind:
    """A host path the sandbox sees at the same place. ``fd``: bind this descriptor (a path walked
    with ``safe_paths.open_path``) rather than the path, which a user could have changed since."""

    path: str
    writable: bool = False
    fd: int | None = None


@dataclass(frozen=True)
class Policy:
    mode: str = "none"
    uid: int = DEFAULT_UID
    gid: int = DEFAULT_GID
    root_inside: bool = False
    privileged: bool = field(default_factory=lambda: os.geteuid() == 0)

    @property
    def enabled(self) -> bool:
        return self.mode == "bwrap"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Policy:
        env = os.environ if env is None else env
        mode = (env.get("CLOUDLET_SANDBOX") or "none").strip().lower()
        if mode not in MODES:
            raise SandboxError(f"CLOUDLET_SANDBOX must be one of {', '.join(MODES)}, got {mode!r}")
        uid, gid = (
            _id(env, "CLOUDLET_SANDBOX_UID", DEFAULT_UID),
            _id(env, "CLOUDLET_SANDBOX_GID", DEFAULT_GID),
        )
        if mode == "bwrap" and os.geteuid() == 0 and (uid == 0 or gid == 0):
            raise SandboxError("CLOUDLET_SANDBOX_UID/GID must name an unprivileged user, not 0")
        root = (env.get("CLOUDLET_SANDBOX_ROOT") or "").strip().lower() in ("1", "true", "yes")
        return cls(mode=mode, uid=uid, gid=gid, root_inside=root)


def _id(env: Mapping[str, str], name: str, default: int) -> int:
    raw = (env.get(name) or "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise SandboxError(f"{name} must be a number, got {raw!r}") from None


def interpreter_paths(python: str = sys.executable) -> list[str]:
    """What the agent's interpreter needs to run: its prefixes, the folder of the real executable,
    and the folder that holds the ``cloudlet`` package when it is not installed in a prefix."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(python))}
    # <root>/cloudlet/nodekit/sandbox.py: found from this file, so the agent needs no other module.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    paths.add(package_root)
    return sorted(p for p in paths if p and os.path.isdir(p))


def is_under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def identity_files(uid: int, gid: int, home: str, hostname: str, hosts: str = "") -> dict[str, str]:
    """``/etc/passwd``, ``group`` and ``hosts`` for the sandbox: its user (``azureuser``, home =
    ``home``, shell bash) and root, so ``getpwuid``, sshd and ``whoami`` work; its hostname."""
    passwd = [
        f"root:x:0:0:root:{home}:/bin/bash",
        f"{USER_NAME}:x:{uid}:{gid}:cloudlet user:{home}:/bin/bash",
    ]
    group = ["root:x:0:", f"{USER_NAME}:x:{gid}:"]
    if uid != DEFAULT_UID:
        passwd.append(f"nobody:x:{DEFAULT_UID}:{DEFAULT_GID}:nobody:/nonexistent:/usr/sbin/nologin")
    if gid != DEFAULT_GID:
        group.append(f"nogroup:x:{DEFAULT_GID}:")
    lines = [line for line in hosts.splitlines() if line.strip()]
    lines.append(f"127.0.0.1\t{hostname}")
    return {
        "passwd": "\n".join(passwd) + "\n",
        "group": "\n".join(group) + "\n",
        "hosts": "\n".join(lines) + "\n",
    }


@dataclass
class LaunchPlan:
    """A run for the node's launcher (nodekit/launcher.py): its request, and the descriptors to
    send with it (the binds' ``fdbind`` indexes); ``owned``: those opened here, to close once sent."""

    request: dict[str, Any]
    fds: list[int]
    owned: list[int]


class Sandbox:
    """Wraps argvs for one node. The fixed part of the ``bwrap`` command is built once (a tiny job's
    start is a hot path); ``wrap`` adds the binds, the working directory and the user switch."""

    def __init__(
        self,
        policy: Policy,
        *,
        hostname: str,
        state_dir: Path,
        home: str = "/tmp",
        python: str = sys.executable,
    ) -> None:
        self.policy = policy
        self.hostname = hostname
        self.home = home
        self._outer: list[str] = []
        self._covered: list[str] = []  # host folders the fixed part binds (their insides exist)
        self._made: set[str] = set(TMPFS_DIRS)  # folders the fixed part makes in the sandbox
        # Whose symlinks a path may cross: root's; also the agent's own when it is not root.
        self._trusted = (0,) if policy.privileged else (0, os.getuid())
        self._inner_user: list[str] = []
        self._inner_root: list[str] = []
        self._fixed_ops: list[list[Any]] = []  # the launcher's steps for the fixed part
        self._python = python
        if policy.enabled:
            self._build(state_dir, python)

    @classmethod
    def from_env(cls, node_dir: Path, node_id: str, env: Mapping[str, str] | None = None) -> Sandbox:
        env = os.environ if env is None else env
        home = env.get("CLOUDLET_OS_DISK") or "/tmp"
        return cls(Policy.from_env(env), hostname=node_id, state_dir=node_dir / "sandbox", home=home)

    # -- who the processes are -------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    @property
    def visible(self) -> tuple[str, ...]:
        """Host folders every sandbox of this node sees (read-only): a path under one needs no bind."""
        return tuple(self._covered)

    def venv_binds(self, venv: str | Path) -> list[Bind]:
        """Read-only binds for a venv the sandbox runs from: the venv, and its base interpreter's
        prefix where the sandbox does not see it already (one ``CLOUDLET_PYTHONS`` lists, outside
        the system folders: without it the venv's ``python`` link dangles inside)."""
        binds = [Bind(str(venv))]
        python = os.path.realpath(os.path.join(str(venv), "bin", "python"))
        if self.enabled and not is_under(python, self.visible):
            binds.append(Bind(os.path.dirname(os.path.dirname(python))))
        return binds

    @property
    def owner(self) -> tuple[int, int]:
        """The host uid/gid that the sandbox user's files have."""
        if self.enabled and self.policy.privileged:
            return self.policy.uid, self.policy.gid
        return os.getuid(), os.getgid()

    def uid_inside(self, root_inside: bool | None = None) -> int:
        """The uid the processes see for themselves (0 for root-inside)."""
        root = self.policy.root_inside if root_inside is None else root_inside
        if not self.enabled:
            return os.geteuid()
        return 0 if root else self.owner[0]

    def user_name(self, root_inside: bool | None = None) -> str:
        if not self.enabled:
            import pwd

            return pwd.getpwuid(os.geteuid()).pw_name
        return "root" if self.uid_inside(root_inside) == 0 else USER_NAME

    def hand_over(self, path: str | Path, *, recursive: bool = False, create: bool = False) -> None:
        """Give ``path`` to the sandbox user (walked without following users' symlinks; made first
        when ``create``). Only a root agent changes owners: otherwise they are the same user."""
        if self.enabled and self.policy.privileged:
            uid, gid = self.owner
            safe_paths.chown_tree(str(path), uid, gid, recursive=recursive, create=create)
        elif create:
            os.makedirs(path, exist_ok=True)

    def open_bind(self, path: str, *, writable: bool) -> Bind | None:
        """A datastore path (a user may have planted symlinks on its way) as a descriptor bind;
        a writable one is made and handed to the sandbox user, a missing read-only one is None."""
        try:
            fd = safe_paths.open_path(path, trusted=self._trusted)
        except FileNotFoundError:
            if not writable:
                return None
            fd = safe_paths.open_path(path, create=True, directory=True, trusted=self._trusted)
        if writable and self.policy.privileged:
            try:
                os.chown(safe_paths.proc_path(fd), *self.owner)
            except OSError:
                os.close(fd)
                raise
        return Bind(path, writable, fd)

    # -- argv ----------------------------------------------------------------------------------
    def wrap(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        binds: Sequence[Bind] = (),
        root_inside: bool | None = None,
    ) -> list[str]:
        """``argv`` to run inside the sandbox, in ``cwd``, seeing ``binds`` (pass the descriptors
        of fd binds to ``Popen(pass_fds=...)``). ``argv`` unchanged when the sandbox is off."""
        if not self.enabled:
            return list(argv)
        root = self.policy.root_inside if root_inside is None else root_inside
        args = list(self._outer)
        if not self.policy.privileged:  # an unprivileged user namespace, under the agent's own uid
            args += ["--unshare-user", *(["--uid", "0", "--gid", "0"] if root else [])]
        covered, made = list(self._covered), set(self._made)
        for bind in sorted(binds, key=lambda b: (b.path.count("/"), b.path)):
            path = os.path.normpath(bind.path)
            args += _parents(path, covered, made)
            if bind.fd is not None:
                args += ["--bind-fd" if bind.writable else "--ro-bind-fd", str(bind.fd), path]
            else:
                args += ["--bind" if bind.writable else "--ro-bind", path, path]
            covered.append(path)
        args += ["--chdir", str(cwd), "--"]
        args += self._inner_root if root else self._inner_user
        args += argv
        return args

    def launch_plan(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str],
        binds: Sequence[Bind] = (),
        root_inside: bool | None = None,
    ) -> LaunchPlan:
        """What ``wrap`` gives bwrap, as a request for the node's launcher: the same root (the
        fixed part, then each bind after its missing parents), every bind as a descriptor (path
        binds opened here) with the host path it names."""
        root = self.policy.root_inside if root_inside is None else root_inside
        ops = list(self._fixed_ops)
        fds: list[int] = []
        owned: list[int] = []
        covered, made = list(self._covered), set(self._made)
        try:
            for bind in sorted(binds, key=lambda b: (b.path.count("/"), b.path)):
                path = os.path.normpath(bind.path)
                ops += [["dir", folder] for folder in _parent_dirs(path, covered, made)]
                fd = bind.fd
                if fd is None:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                    owned.append(fd)
                ops.append(["fdbind", len(fds), path, os.readlink(f"/proc/self/fd/{fd}"), bind.writable])
                fds.append(fd)
                covered.append(path)
        except OSError:
            for fd in owned:
                os.close(fd)
            raise
        uid, gid = self.owner
        request = {
            "op": "run",
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "uid": uid,
            "gid": gid,
            "root_inside": root,
            "privileged": self.policy.privileged,
            "ops": ops,
            # The first steps are the node's fixed part: the launcher builds them ahead (its spare).
            "fixed": len(self._fixed_ops),
        }
        return LaunchPlan(request, fds, owned)

    def launcher_argv(self, channel_fd: int) -> list[str]:
        """The node's launcher in the fixed part of the sandbox, which keeps the capabilities to
        make namespaces and mounts (inside its own user namespace when the agent is not root),
        with the host's root at ``HOST_VIEW`` to find the runs' binds again (never in a run's root)."""
        from cloudlet.nodekit import launcher

        if not self.enabled:
            raise SandboxError("the launcher runs only in a sandbox")
        args = list(self._outer)
        if not self.policy.privileged:
            args += ["--unshare-user", "--uid", "0", "--gid", "0"]
        args += ["--bind", "/", launcher.HOST_VIEW]
        for capability in launcher.CAPABILITIES:
            args += ["--cap-add", capability]
        return [*args, "--", self._python, "-I", "-S", launcher.__file__, str(channel_fd)]

    def _build(self, state_dir: Path, python: str) -> None:
        tools = {name: shutil.which(name) for name in ("bwrap", "setpriv", "unshare")}
        needed = ("bwrap", "setpriv", "unshare") if self.policy.privileged else ("bwrap",)
        missing = [name for name in needed if not tools[name]]
        if missing:
            raise SandboxError(
                f"the sandbox needs {', '.join(missing)}: apt-get install bubblewrap util-linux"
            )
        outer = [str(tools["bwrap"])]
        # The same root as steps for the launcher (nodekit/launcher.py); the identity files come
        # with its /etc, over which they are bound.
        ops: list[list[Any]] = []
        covered: list[str] = []
        devices = sorted({device for pattern in DEVICE_GLOBS for device in glob.glob(pattern)})
        # Every bind costs bwrap a pass over the mount table (~0.3-0.5 ms a job): /sys only
        # where GPU libraries need it (NVML, the CUDA driver read the PCI devices there).
        for path in (*SYSTEM_DIRS, *(["/sys"] if devices else [])):
            if os.path.isdir(path):
                outer += ["--ro-bind", path, path]
                ops.append(["bind", path, False])
                covered.append(path)
        for path in MERGED_USR:
            if os.path.islink(path):
                outer += ["--symlink", os.readlink(path), path]
                ops.append(["symlink", os.readlink(path), path])
            elif os.path.isdir(path):
                outer += ["--ro-bind", path, path]
                ops.append(["bind", path, False])
                covered.append(path)
        for name, path in self._identity(state_dir).items():
            outer += ["--ro-bind", path, f"/etc/{name}"]
        outer += ["--dev", "/dev"]
        for device in devices:  # GPUs (and RDMA): the node's processes may use them
            outer += ["--dev-bind", device, device]
        outer += ["--perms", "1777", "--tmpfs", "/dev/shm", "--proc", "/proc"]
        outer += ["--perms", "1777", "--tmpfs", "/tmp"]
        ops += [["dev", devices], ["proc"], ["tmpfs", "/tmp", "1777"]]
        made = set(TMPFS_DIRS)
        for path in interpreter_paths(python):
            if not is_under(path, covered):
                folders = _parent_dirs(path, covered, made)
                outer += [arg for folder in folders for arg in ("--perms", "0755", "--dir", folder)]
                ops += [["dir", folder] for folder in folders]
                outer += ["--ro-bind", path, path]
                ops.append(["bind", path, False])
                covered.append(path)
        outer += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        outer += ["--hostname", self.hostname, "--die-with-parent"]
        self._outer, self._covered, self._made, self._fixed_ops = outer, covered, made, ops
        if self.policy.privileged:
            uid, gid = self.policy.uid, self.policy.gid
            drop = [str(tools["setpriv"]), f"--reuid={uid}", f"--regid={gid}"]
            drop += ["--clear-groups", "--no-new-privs"]  # no setuid binary gives privileges back
            self._inner_user = drop
            self._inner_root = [*drop, str(tools["unshare"]), "--user", "--map-root-user"]

    def _identity(self, state_dir: Path) -> dict[str, str]:
        """Write the sandbox's passwd, group and hosts once per node (root-owned, outside any
        sandbox's view); return where they are. A file already there with the same text is left
        as it is: another sandbox of the same folder (a deployment's next replica, started while
        the last one's bwrap is still binding these files) would otherwise replace a file that
        bwrap is binding, and that bwrap fails ("/newroot/etc/group (deleted)")."""
        try:
            hosts = Path("/etc/hosts").read_text()
        except OSError:
            hosts = "127.0.0.1\tlocalhost\n"
        uid, gid = self.owner
        files = identity_files(uid, gid, self.home, self.hostname, hosts)
        state_dir.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, text in files.items():
            path = state_dir / name
            paths[name] = str(path)
            try:
                if path.read_text() == text:
                    continue
            except OSError:
                pass
            tmp = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")  # writers race
            tmp.write_text(text)
            tmp.chmod(0o644)
            tmp.replace(path)
        return paths


def _parents(path: str, covered: Sequence[str], made: set[str]) -> list[str]:
    """``--dir`` (mode 0755) for each missing ancestor of ``path``: bwrap would make them 0700 and
    root-owned, which the unprivileged user could not pass through."""
    return [
        arg for folder in _parent_dirs(path, covered, made) for arg in ("--perms", "0755", "--dir", folder)
    ]


def _parent_dirs(path: str, covered: Sequence[str], made: set[str]) -> list[str]:
    """The missing ancestors of ``path``, outermost first (added to ``made``): empty scaffolding."""
    parent = os.path.dirname(path)
    chain: list[str] = []
    while parent not in ("/", "") and parent not in made and not is_under(parent, covered):
        chain.append(parent)
        parent = os.path.dirname(parent)
    chain.reverse()
    made.update(chain)
    return chain
