"""A compute instance's home on its OS disk, made ready at every start (standard library only).

- ``~/.venv``: the user's Python environment, layered over the agent's interpreter (a ``.pth``
  file adds the agent's site-packages, so Jupyter, ipykernel and pip are there); ``pip install``
  in a terminal or ``%pip install`` in a notebook installs into it, so packages survive stop and
  start. The notebook kernel ``python3`` runs this environment's Python.
- ``~/mnt`` → the temp disk; ``~/cloudfiles/code`` → the workspace file share (as on Azure).
- azure-ai-ml, as on an Azure ML instance: ``~/.azureml/ca.pem`` (the server's CA,
  ``$CLOUDLET_AZUREML_CA``) and a ``config.json`` in the owner's share folder (the Jupyter working
  directory, where ``MLClient.from_config()`` looks), unless the user has one there.

The home belongs to the instance's user, so this runs as that user, in the instance's sandbox
(``python -m cloudlet.agent.home HOME TEMP_DISK [SHARE]``, started by ``agent/apps.py``): a link
the user left in the home can then only lead where the user may go anyway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from cloudlet.nodekit import trust


def user_venv(home: Path, python: str = sys.executable) -> Path:
    """``~/.venv`` layered over the agent's interpreter; made once, refreshed on every start."""
    venv = home / ".venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    base = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # As site dirs (``site.addsitedir``), so their own .pth files count too: an interpreter whose
    # packages come through a .pth of its site-packages (an SSH host's venv layered over another).
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in sorted(base))
    (site / "_cloudlet_base.pth").write_text(lines)
    for name in ("pip", "pip3"):  # the venv has no pip of its own: use the layered one, into the venv
        script = venv / "bin" / name
        script.unlink(missing_ok=True)
        script.write_text(f'#!/bin/sh\nexec "{venv / "bin" / "python"}" -m pip "$@"\n')
        script.chmod(0o755)
    return venv


def kernelspec(home: Path, venv: Path) -> None:
    """The user-level ``python3`` kernel (it shadows the server's own) runs the user's venv."""
    spec = home / ".local" / "share" / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    doc = {
        "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    (spec / "kernel.json").write_text(json.dumps(doc, indent=1))


def link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        if path.is_symlink() and os.readlink(path) == str(target):
            return
        if path.is_dir() and not path.is_symlink():
            return  # the user made a real folder of that name: leave it
        path.unlink()
    path.symlink_to(target)


CA_FILE = ".azureml/ca.pem"


def azureml_files(home: Path, env: Mapping[str, str]) -> None:
    """The CAs azure-ai-ml trusts (``REQUESTS_CA_BUNDLE``: the system's and cloudlet's) and the
    workspace's ``config.json``."""
    ca = env.get("CLOUDLET_AZUREML_CA")
    if ca:  # the system's CAs too: REQUESTS_CA_BUNDLE replaces requests' trust store
        trust.write_bundle(home / CA_FILE, ca)
    config, folder = env.get("CLOUDLET_AZUREML_CONFIG"), env.get("CLOUDLET_SHARE_USER_DIR")
    if config and folder and Path(folder).is_dir() and not (Path(folder) / "config.json").exists():
        (Path(folder) / "config.json").write_text(json.dumps(json.loads(config), indent=2) + "\n")


def prepare(
    home: Path,
    temp_disk: Path,
    share: Path | None,
    python: str = sys.executable,
    env: Mapping[str, str] = os.environ,
) -> Path:
    """Everything above; returns the user's venv."""
    venv = user_venv(home, python)
    kernelspec(home, venv)
    link(home / "mnt", temp_disk)
    if share is not None:
        link(home / "cloudfiles" / "code", share)
    azureml_files(home, env)
    return venv


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m cloudlet.agent.home HOME TEMP_DISK [SHARE]", file=sys.stderr)
        return 2
    share = Path(argv[2]) if len(argv) == 3 else None
    try:
        prepare(Path(argv[0]), Path(argv[1]), share)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else ""
        print(f"could not prepare the home: {exc} {detail or ''}".strip(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
