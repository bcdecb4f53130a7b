"""SSH hosts for tests: network namespaces ``clssh1..N`` on the bridge ``brssh`` (10.77.1.0/24).

Each host is a network namespace with its own veth into the bridge (host ``i`` is ``10.77.1.(10+i)``;
the bridge, i.e. the machine itself, is ``10.77.1.1``), its own ``sshd`` (own host key, own
``authorized_keys``, ``PasswordAuthentication no``, ``UsePAM no``) and its own unprivileged login
user ``clsshu<i>`` whose home (its agent directory) is its own. Namespaces share the file system
with the machine, so the per-host user and home keep the hosts' agents apart.

``ssh_hosts(n, root)`` is a context manager yielding the hosts; it removes leftovers of an earlier
(crashed) run by name first and tears everything down at the end. Needs root, ``ip`` (iproute2)
and ``sshd`` (openssh-server): ``scripts/setup-tests.sh`` installs them. ``missing()`` says what is not
there (tests skip with it; under CI=true the suite's conftest turns a skip into a failure).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "brssh"
PREFIX = "clssh"
SUBNET = "10.77.1"
BRIDGE_ADDRESS = f"{SUBNET}.1"
USER_PREFIX = "clsshu"
SSHD = "/usr/sbin/sshd"
SSHD_READY_S = 10.0


@dataclass(frozen=True)
class HostNet:
    """Names and subnet of one set of hosts (each test module its own, so they can run at once)."""

    bridge: str = BRIDGE
    prefix: str = PREFIX  # namespaces <prefix>1..N, veths v<prefix>1..N
    subnet: str = SUBNET  # "a.b.c": host i is a.b.c.(10+i), the bridge a.b.c.1
    user_prefix: str = USER_PREFIX

    @property
    def bridge_address(self) -> str:
        return f"{self.subnet}.1"


SSH_NET = HostNet()


@dataclass(frozen=True)
class SshHost:
    index: int
    namespace: str
    address: str
    port: int
    user: str
    home: Path  # the login user's home: its agent directory lives under it
    identity_file: Path  # the private key that logs in as ``user``
    sshd_pid: int

    def as_config(self) -> dict[str, object]:
        """This host as an entry of an SSH location's ``hosts:``."""
        return {
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "identity_file": str(self.identity_file),
        }


def missing() -> str | None:
    """Why SSH hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "SSH hosts in network namespaces need root"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed: run scripts/setup-tests.sh"
    if not os.path.exists(SSHD):
        return "sshd (openssh-server) is not installed: run scripts/setup-tests.sh"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is not installed: run scripts/setup-tests.sh (openssh-server brings it)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def cleanup(net: HostNet = SSH_NET) -> None:
    """Remove every namespace, veth and the bridge this module makes, and their sshds (by name)."""
    PREFIX, BRIDGE = net.prefix, net.bridge
    listed = _run("ip", "netns", "list", check=False).stdout.split("\n")
    for line in listed:
        name = line.split(" ", 1)[0].strip()
        if name.startswith(PREFIX) and name[len(PREFIX) :].isdigit():
            for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run("ip", "netns", "delete", name, check=False)
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0] if ":" in line else ""
        if name.startswith("v" + PREFIX):
            _run("ip", "link", "delete", name, check=False)
    _run("ip", "link", "delete", BRIDGE, check=False)


def _ensure_user(name: str, home: Path) -> None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        _run("useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash", name)
        entry = pwd.getpwnam(name)
    if entry.pw_dir != str(home):
        _run("usermod", "--home", str(home), name)
    # The account must be usable for public-key logins ('!' locks it for sshd without PAM).
    _run("usermod", "-p", "*", name)
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    home.chmod(0o755)


def _keygen(path: Path) -> None:
    if not path.exists():
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path))


def _wait_port(address: str, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SSHD_READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited early: {log.read_text(errors='replace')}")
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5) as sock:
            if sock.recv(4).startswith(b"SSH-"):
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd on {address}:{port} did not answer: {log.read_text(errors='replace')}")


def _add_host(
    index: int, root: Path, port: int, net: HostNet = SSH_NET
) -> tuple[SshHost, subprocess.Popen[bytes]]:
    PREFIX, BRIDGE, USER_PREFIX = net.prefix, net.bridge, net.user_prefix
    ns, address = f"{PREFIX}{index}", f"{net.subnet}.{10 + index}"
    veth = f"v{PREFIX}{index}"
    _run("ip", "netns", "add", ns)
    _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _run("ip", "link", "set", veth, "master", BRIDGE, "up")
    _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
    _run("ip", "-n", ns, "link", "set", "eth0", "up")
    _run("ip", "-n", ns, "link", "set", "lo", "up")
    host_dir = root / ns
    host_dir.mkdir(parents=True, exist_ok=True)
    host_dir.chmod(0o755)
    user, home = f"{USER_PREFIX}{index}", host_dir / "home"
    _ensure_user(user, home)
    _keygen(host_dir / "host_key")
    _keygen(host_dir / "id_login")
    keys = host_dir / "authorized_keys"
    keys.write_text((host_dir / "id_login.pub").read_text())
    keys.chmod(0o644)
    config = host_dir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                f"ListenAddress {address}",
                f"HostKey {host_dir / 'host_key'}",
                f"AuthorizedKeysFile {keys}",
                f"PidFile {host_dir / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "UsePAM no",
                "StrictModes no",
                f"AllowUsers {user}",
                "Subsystem sftp internal-sftp",
                "MaxStartups 100:30:200",
                "MaxSessions 100",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    log = host_dir / "sshd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    host = SshHost(index, ns, address, port, user, home, host_dir / "id_login", proc.pid)
    return host, proc


@contextlib.contextmanager
def ssh_hosts(count: int, root: Path, port: int = 22, net: HostNet = SSH_NET) -> Iterator[list[SshHost]]:
    """``count`` SSH hosts (their files under ``root``) on ``net``; torn down on exit, leftovers
    of an earlier run removed on entry."""
    reason = missing()
    if reason:
        raise RuntimeError(reason)
    BRIDGE, BRIDGE_ADDRESS = net.bridge, net.bridge_address
    cleanup(net)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        hosts = []
        for i in range(1, count + 1):
            host, proc = _add_host(i, root, port, net)
            hosts.append(host)
            procs.append(proc)
        for host, proc in zip(hosts, procs, strict=True):
            _wait_port(host.address, host.port, proc, root / host.namespace / "sshd.log")
        yield hosts
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        kill_host_processes([f"{net.user_prefix}{i}" for i in range(1, count + 1)])
        cleanup(net)


@contextlib.contextmanager
def temporary_hosts(count: int, prefix: str, net: HostNet = SSH_NET) -> Iterator[list[SshHost]]:
    """``ssh_hosts`` with their files in a fresh folder under /var/tmp (readable by the hosts'
    users, unlike pytest's tmp_path), removed afterwards: a test module's hosts fixture."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    root.chmod(0o755)
    try:
        with ssh_hosts(count, root, net=net) as made:
            yield made
    finally:
        shutil.rmtree(root, ignore_errors=True)


def kill_host_processes(users: list[str]) -> None:
    """SIGKILL every process of these login users (agents and their runs)."""
    uids = set()
    for user in users:
        with contextlib.suppress(KeyError):
            uids.add(pwd.getpwnam(user).pw_uid)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{entry}").st_uid in uids:
                os.kill(int(entry), signal.SIGKILL)


def host_processes(user: str, needle: str) -> list[int]:
    """Pids of ``user``'s processes whose command line holds ``needle``."""
    uid = pwd.getpwnam(user).pw_uid
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            if needle.encode() in cmdline:
                found.append(int(entry))
    return found


def host_python(root: Path) -> str:
    """A Python the hosts' login users can run that sees this environment's packages (torch,
    JupyterLab): a venv of the system's ``python3`` (this interpreter's may live where they
    cannot read, e.g. under /root) with a ``.pth`` naming this environment's site-packages. The
    same minor version is required (checked)."""
    import sys
    import sysconfig

    target = root / "host-python"
    system = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    if not (target / "bin" / "python").exists():
        _run(system, "-m", "venv", "--without-pip", str(target))
    found = _run(str(target / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])").stdout
    if found.strip() != str(sys.version_info[:2]):
        raise RuntimeError(f"{system} is Python {found.strip()}, this environment {sys.version_info[:2]}")
    purelib = _run(
        str(target / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    )
    (Path(purelib.stdout.strip()) / "cloudlet-test-env.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    for path in [root, *target.rglob("*")]:
        with contextlib.suppress(OSError):
            path.chmod(path.stat().st_mode | 0o055 if path.is_dir() else path.stat().st_mode | 0o044)
    return str(target / "bin" / "python")
