"""Where the Slurm provider's commands run: on this host, or on a login node over SSH.

Both runners do the same three things: run a Slurm command, write a file (the placeholder's
script and its agent environment, mode 0600/0700) and remove a node's directories. ``SshRunner``
uses OpenSSH's client (``ssh``, key authentication only, ``BatchMode``) with a shared master
connection (``ControlMaster``/``ControlPersist``), so the sweep's ``squeue`` every 2 s costs one
round trip, not a handshake; the host key is checked against ``known_hosts`` when given, else
learned on first use (``accept-new``) into the server's own known-hosts file.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from cloudlet.providers.base import ProviderError

COMMAND_TIMEOUT_S = 30.0
CONTROL_PERSIST_S = 120


class Runner(Protocol):
    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]: ...

    def write_file(self, path: str, text: str, mode: int) -> None: ...

    def remove(self, paths: list[str]) -> None: ...


def _completed(
    name: str, argv: list[str], env: Mapping[str, str] | None, check: bool, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            argv,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProviderError(f"{name} failed: {exc}") from exc
    if check and proc.returncode != 0:
        raise ProviderError(f"{name} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc


class LocalRunner:
    """Commands on this host (``sbatch`` on PATH or in ``bin_dir``), with ``SLURM_CONF`` if given."""

    def __init__(self, bin_dir: str | None = None, slurm_conf: str | None = None) -> None:
        self.bin_dir, self.slurm_conf = bin_dir, slurm_conf

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_"))}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        name = argv[0]
        found = shutil.which(name, path=self.bin_dir) if self.bin_dir else shutil.which(name)
        if found is None:
            where = self.bin_dir or "PATH"
            raise ProviderError(f"{name} is not on {where}: install Slurm's client commands (slurm-client)")
        return _completed(name, [found, *argv[1:]], self._env(), check)

    def write_file(self, path: str, text: str, mode: int) -> None:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(path, mode)
        except OSError as exc:
            raise ProviderError(f"cannot write {path}: {exc}") from exc

    def remove(self, paths: list[str]) -> None:
        for path in paths:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)


SLURM_COMMANDS = frozenset({"sbatch", "squeue", "scancel", "sinfo", "scontrol"})


def remote_command(argv: list[str], bin_dir: str | None, slurm_conf: str | None) -> str:
    """The shell command line a login node runs for ARGV (Slurm's commands from BIN_DIR, with
    SLURM_CONF), every word quoted."""
    if argv[0] not in SLURM_COMMANDS:
        return shlex.join(argv)
    program = f"{bin_dir.rstrip('/')}/{argv[0]}" if bin_dir else argv[0]
    prefix = f"SLURM_CONF={shlex.quote(slurm_conf)} " if slurm_conf else ""
    return prefix + shlex.join([program, *argv[1:]])


class SshRunner:
    """Commands on a login node: ``ssh [-i KEY] -p PORT USER@ADDRESS -- <command>``."""

    def __init__(
        self,
        address: str,
        port: int,
        user: str,
        identity_file: str | None,
        known_hosts: str | None,
        own_known_hosts: Path,
        bin_dir: str | None = None,
        slurm_conf: str | None = None,
    ) -> None:
        self.target = f"{user}@{address}"
        self.bin_dir, self.slurm_conf = bin_dir, slurm_conf
        key = hashlib.sha256(f"{user}@{address}:{port}".encode()).hexdigest()[:16]
        control = Path(tempfile.gettempdir()) / f"cl-ssh-{key}"  # short: a socket path has ~100 bytes
        checking = "yes" if known_hosts else "accept-new"
        self.options = [
            *("-p", str(port)),
            *(("-i", identity_file, "-o", "IdentitiesOnly=yes") if identity_file else ()),
            *("-o", "BatchMode=yes", "-o", "PasswordAuthentication=no"),
            # Debian's ssh_config turns GSSAPI on: with no krb5.conf it asks DNS for a realm first,
            # which hangs where the resolver does not answer.
            *("-o", "GSSAPIAuthentication=no"),
            *("-o", f"StrictHostKeyChecking={checking}"),
            *("-o", f"UserKnownHostsFile={known_hosts or own_known_hosts}"),
            *("-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=10"),
            *("-o", "ControlMaster=auto", "-o", f"ControlPath={control}"),
            *("-o", f"ControlPersist={CONTROL_PERSIST_S}"),
        ]

    def _remote(
        self, command: str, check: bool, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        ssh = shutil.which("ssh")
        if ssh is None:
            raise ProviderError("ssh is not installed: the Slurm login node is reached with OpenSSH's client")
        proc = _completed("ssh", [ssh, *self.options, self.target, "--", command], None, False, stdin)
        if proc.returncode == 255:  # ssh's own failure: the login node, not the command
            raise ProviderError(
                f"cannot reach the Slurm login node {self.target}: {proc.stderr.strip()[-300:]}"
            )
        if check and proc.returncode != 0:
            name = command.split()[0] if command.split() else "command"
            raise ProviderError(
                f"{name} on {self.target} exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
            )
        return proc

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._remote(remote_command(argv, self.bin_dir, self.slurm_conf), check)

    def write_file(self, path: str, text: str, mode: int) -> None:
        quoted, parent = shlex.quote(path), shlex.quote(os.path.dirname(path) or "/")
        command = f"umask 077 && mkdir -p {parent} && cat > {quoted} && chmod {mode:o} {quoted}"
        self._remote(f"sh -c {shlex.quote(command)}", True, stdin=text)

    def remove(self, paths: list[str]) -> None:
        if paths:
            self._remote(shlex.join(["rm", "-rf", "--", *paths]), True)
