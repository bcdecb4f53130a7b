"""A real OpenSSH server for one compute instance (standard library only).

``start_sshd(state_dir, owner_public_key)`` writes, in ``state_dir`` (keep it on the instance's
OS disk so the host key survives stop/start): host keys (made once with ssh-keygen), an
``authorized_keys`` holding only the owner's key, and an ``sshd_config`` that allows public-key
logins for one user and nothing else. It runs ``sshd -D`` as a child in its own session on
``listen`` (127.0.0.1 by default, or the instance's namespace address) and a free port, waits for
the SSH banner, and returns the port and pid. ``stop_sshd`` stops it, also from a fresh agent
process via the pid file.

With ``wrap`` (the instance's sandbox) sshd runs as the instance's unprivileged user, which is
then the only user it can log in. The state directory is that user's (``owner``): the agent writes
the files there without following links, ssh-keygen runs in the sandbox, and the sshd is stopped
by its process group (``stop_sshd_handle``): its pid file holds a pid of the sandbox's namespace.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cloudlet.nodekit import safe_paths

KEY_PREFIXES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-", "sk-ssh-ed25519@", "sk-ecdsa-sha2-")
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")
# Below the ephemeral range (32768–60999), where a client socket in TIME-WAIT could hold a port.
PORT_RANGE = (20000, 32000)
READY_TIMEOUT_S = 10.0
# Ed25519 only: every current OpenSSH client has it, and an RSA key takes ~1 s to generate.
HOST_KEY_TYPES = ("ed25519",)
Wrap = Callable[[Sequence[str]], list[str]]


class SshdError(RuntimeError):
    pass


@dataclass(frozen=True)
class SshdHandle:
    pid: int
    port: int
    host: str
    state_dir: Path
    started_in_s: float
    sandboxed: bool = False  # pid is the sandbox's outer process, the leader of sshd's group

    @property
    def config_path(self) -> Path:
        return self.state_dir / "sshd_config"


def sshd_binary() -> str | None:
    found = shutil.which("sshd")
    return found or next((p for p in SSHD_CANDIDATES if os.access(p, os.X_OK)), None)


def check_public_key(key: str) -> str:
    """One OpenSSH public key line, or SshdError saying what is wrong."""
    line = key.strip()
    if "\n" in line or not line.startswith(KEY_PREFIXES) or len(line.split()) < 2:
        raise SshdError(
            "ssh_settings.ssh_key_value must be one OpenSSH public key line, e.g. 'ssh-ed25519 AAAA… me@host'"
        )
    return line


def start_sshd(
    state_dir: Path,
    owner_public_key: str,
    *,
    user: str = "root",
    listen: str = "127.0.0.1",
    port: int | None = None,
    set_env: Mapping[str, str] | None = None,
    wrap: Wrap | None = None,
    owner: tuple[int, int] | None = None,
) -> SshdHandle:
    """Start sshd for one instance; only ``owner_public_key`` may log in, as ``user``.
    ``set_env`` is set in every session (``SetEnv``, e.g. ``HOME`` = the OS disk). ``wrap`` starts
    ssh-keygen and sshd in a sandbox; ``owner`` is the uid/gid its files must have."""
    binary = sshd_binary()
    if binary is None:
        raise SshdError("OpenSSH server not installed: apt-get install -y openssh-server")
    started = time.monotonic()
    if owner is not None:
        safe_paths.chown_tree(str(state_dir), *owner, create=True)
    else:
        os.close(safe_paths.open_path(str(state_dir), create=True, directory=True))
    if wrap is None:
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)  # root's sshd refuses to start without it
    _host_keys(state_dir, wrap)
    _write(state_dir / "authorized_keys", check_public_key(owner_public_key) + "\n", owner)
    if wrap is None:
        stop_sshd(state_dir)  # a leftover from a crashed agent would hold the pid file
    last_error = ""
    for candidate in [port] if port else _candidate_ports(listen):
        _write(state_dir / "sshd_config", _config(state_dir, user, listen, candidate, set_env or {}), owner)
        process = _spawn(binary, state_dir, wrap)
        if _wait_banner(process, listen, candidate):
            took = time.monotonic() - started
            return SshdHandle(process.pid, candidate, listen, state_dir, took, sandboxed=wrap is not None)
        last_error = _reap(process, state_dir)
    raise SshdError(f"sshd did not start: {last_error}")


def stop_sshd_handle(handle: SshdHandle, timeout_s: float = 5.0) -> None:
    """Stop the sshd ``start_sshd`` returned (its sessions too, when sandboxed)."""
    if not handle.sandboxed:
        stop_sshd(handle.state_dir, timeout_s)
        return
    _signal_group(handle.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(handle.pid):
        time.sleep(0.02)
    _signal_group(handle.pid, signal.SIGKILL)
    _alive(handle.pid)  # reap it


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _write(path: Path, text: str, owner: tuple[int, int] | None) -> None:
    """A private file (0600) in the state directory, never written through a link."""
    fd = safe_paths.open_file(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        if owner is not None:
            os.fchown(handle.fileno(), *owner)
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def stop_sshd(state_dir: Path, timeout_s: float = 5.0) -> bool:
    """Stop the sshd whose pid file is in ``state_dir``; True if one was running."""
    pid = _read_pid(state_dir / "sshd.pid")
    if pid is None or not _is_sshd(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.02)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / "sshd.pid").unlink()
    return True


def _host_keys(state_dir: Path, wrap: Wrap | None) -> None:
    for kind in HOST_KEY_TYPES:
        key = state_dir / f"ssh_host_{kind}_key"
        try:
            present = safe_paths.owner_of(str(key)) is not None
        except safe_paths.UnsafePath:  # a link left where the key goes: make a real key instead
            key.unlink()
            present = False
        if not present:
            argv = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "cloudlet-instance", "-f", str(key)]
            subprocess.run(
                wrap(argv) if wrap else argv,
                check=True,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                start_new_session=True,
            )


def _config(state_dir: Path, user: str, listen: str, port: int, set_env: Mapping[str, str]) -> str:
    lines = [
        f"ListenAddress {listen}",
        f"Port {port}",
        *(f"HostKey {state_dir / f'ssh_host_{kind}_key'}" for kind in HOST_KEY_TYPES),
        f"PidFile {state_dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {state_dir / 'authorized_keys'}",
        f"AllowUsers {user}",
        "PermitRootLogin prohibit-password" if user == "root" else "PermitRootLogin no",
        "PubkeyAuthentication yes",
        "AuthenticationMethods publickey",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitEmptyPasswords no",
        "UsePAM no",
        # The state directory may sit under a world-writable parent (e.g. /tmp in tests).
        "StrictModes no",
        "X11Forwarding no",
        "PrintMotd no",
        # VS Code Remote needs SFTP and TCP forwarding.
        "AllowTcpForwarding yes",
        "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE",
        *(f'SetEnv "{k}={v}"' for k, v in set_env.items()),
    ]
    return "\n".join(lines) + "\n"


def _spawn(binary: str, state_dir: Path, wrap: Wrap | None) -> subprocess.Popen[bytes]:
    log = state_dir / "sshd.log"
    # sshd re-executes itself, so it must be started by absolute path; -D keeps it our child.
    argv = [binary, "-D", "-f", str(state_dir / "sshd_config"), "-E", str(log)]
    return subprocess.Popen(
        wrap(argv) if wrap else argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_banner(process: subprocess.Popen[bytes], host: str, port: int) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1) as conn:
            if conn.recv(64).startswith(b"SSH-"):
                return True
        time.sleep(0.02)
    return False


def _reap(process: subprocess.Popen[bytes], state_dir: Path) -> str:
    if process.poll() is None:
        process.kill()
    process.wait()
    try:  # the state directory may be the instance user's: never read through a link
        return safe_paths.read_bytes(str(state_dir / "sshd.log"), 500, from_end=True).decode(errors="replace")
    except OSError:
        return f"exit code {process.returncode}"


def _candidate_ports(host: str, tries: int = 8) -> list[int]:
    ports: list[int] = []
    while len(ports) < tries:
        port = random.randint(*PORT_RANGE)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        ports.append(port)
    return ports


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    # Reap it if it is our child, so it does not linger as a zombie that looks alive.
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _is_sshd(pid: int) -> bool:
    # A stale pid file may name a pid that now belongs to someone else: never signal that.
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "sshd"
    except OSError:
        return False
