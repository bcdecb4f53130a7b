"""``cloudlet compute show-setup-log`` and ``cloudlet compute connect-ssh`` (compute instances)."""

from __future__ import annotations

import os
import shlex
import shutil
from enum import StrEnum
from typing import Annotated, Any, cast

import typer

from cloudlet.cli.state import CliState
from cloudlet.client._config import ConfigurationError

NameOpt = Annotated[str, typer.Option("-n", "--name", help="Compute instance name.")]


class Script(StrEnum):
    creation = "creation"
    startup = "startup"


def _state(ctx: typer.Context) -> CliState:
    return cast(CliState, ctx.find_root().obj)


def show_setup_log(
    ctx: typer.Context,
    name: NameOpt,
    script: Annotated[Script | None, typer.Option("--script", help="Only this script's log.")] = None,
) -> None:
    """Show the setup scripts' results and logs (the creation script runs once per OS disk, the
    startup script at every start)."""
    st = _state(ctx)
    doc: dict[str, Any] = st.rest.get(f"{st.compute_path(name)}/setup-logs")
    scripts: dict[str, Any] = doc.get("scripts") or {}
    if script is not None:
        if script.value not in scripts:
            raise ConfigurationError(f"instance '{name}' has no {script.value} script")
        scripts = {script.value: scripts[script.value]}
    if st.output.value != "table":
        st.emit({**doc, "scripts": scripts})
        return
    if not scripts:
        typer.echo(f"instance '{name}' has no setup scripts")
    for kind, status in scripts.items():
        code = status.get("exit_code")
        typer.echo(f"== {kind} script: {status.get('state')}" + (f" (exit code {code})" if code else ""))
        typer.echo(f"== {status.get('log')}")
        typer.echo(status.get("log_text") or "")


def ssh_command(
    settings: dict[str, Any],
    name: str,
    key_file: str | None,
    command: list[str] | None,
    options: list[str] | None = None,
) -> list[str]:
    """The ``ssh`` command line for an instance's ``ssh_settings`` (as ``compute show`` gives it)."""
    argv = ["ssh", "-p", str(settings["ssh_port"])]
    if key_file:
        argv += ["-i", key_file, "-o", "IdentitiesOnly=yes"]
    for option in options or []:
        argv += ["-o", option]
    # The host key belongs to the instance (kept on its OS disk), not to the port, which changes
    # at every start: known_hosts records it under the instance's name.
    argv += ["-o", f"HostKeyAlias=cloudlet-instance-{name}", "-o", "StrictHostKeyChecking=accept-new"]
    argv.append(f"{settings['admin_username']}@{settings.get('host') or '127.0.0.1'}")
    return argv + list(command or [])


def connect_ssh(
    ctx: typer.Context,
    name: NameOpt,
    private_key_file: Annotated[
        str | None, typer.Option("--private-key-file", help="The private key of ssh_settings.ssh_key_value.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the ssh command; do not run it.")] = False,
    ssh_option: Annotated[
        list[str] | None,
        typer.Option("--ssh-option", help="An ssh -o option, e.g. UserKnownHostsFile=/tmp/kh (repeatable)."),
    ] = None,
    command: Annotated[list[str] | None, typer.Argument(help="A command to run instead of a shell.")] = None,
) -> None:
    """SSH to a running compute instance with SSH enabled (also for VS Code Remote-SSH)."""
    st = _state(ctx)
    shown: dict[str, Any] = st.rest.get(st.compute_path(name))
    settings = shown.get("ssh_settings") or {}
    if not shown.get("ssh_public_access_enabled"):
        raise ConfigurationError(
            f"instance '{name}' has SSH disabled; create it with ssh_public_access_enabled: true and "
            "ssh_settings.ssh_key_value (your public key)"
        )
    if not settings.get("ssh_port"):
        why = settings.get("ssh_error") or f"the instance is {shown.get('state')}"
        raise ConfigurationError(
            f"SSH to '{name}' is not ready ({why}); start it: cloudlet compute start -n {name}"
        )
    argv = ssh_command(settings, name, private_key_file, command, ssh_option)
    if dry_run:
        typer.echo(shlex.join(argv))
        return
    ssh = shutil.which("ssh")
    if ssh is None:
        raise ConfigurationError("no ssh client found; install OpenSSH (e.g. apt-get install openssh-client)")
    os.execv(ssh, argv)


def register(app: typer.Typer) -> None:
    app.command("show-setup-log")(show_setup_log)
    app.command("connect-ssh")(connect_ssh)
