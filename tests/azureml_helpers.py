"""The official azure-ai-ml SDK in a venv of its own (``.cache/azure-ai-ml-<version>/``, made by
scripts/setup-tests.sh or here when missing), and running SDK scripts as a user would: a subprocess
with only the variables of ``cloudlet azureml env`` and a ``config.json``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SDK_VERSION = "1.35.2"
ROOT = Path(__file__).resolve().parents[1]
SDK_VENV = ROOT / ".cache" / f"azure-ai-ml-{SDK_VERSION}"
SDK_PACKAGES = (f"azure-ai-ml=={SDK_VERSION}", "azure-identity")


def sdk_python() -> Path:
    """The SDK venv's interpreter (not resolved: the venv's own path is what makes it the venv)."""
    python = SDK_VENV / "bin" / "python"
    if _works(python):
        return python
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is missing, so the azure-ai-ml venv cannot be made: run scripts/setup.sh")
    try:
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(SDK_VENV)], check=True)
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", str(python), *SDK_PACKAGES], check=True, timeout=600
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(
            f"could not install azure-ai-ml {SDK_VERSION} into {SDK_VENV} ({exc}): run scripts/setup-tests.sh"
        )
    if not _works(python):
        pytest.skip(f"{python} cannot import azure.ai.ml: run scripts/setup-tests.sh")
    return python


# The interpreters found to import the SDK: a probe imports all of azure.ai.ml (~1.5 s of CPU),
# and every SDK script asks for the interpreter, so each test process probes it once.
_WORKING: set[Path] = set()


def _works(python: Path) -> bool:
    if python in _WORKING:
        return True
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import azure.ai.ml, azure.identity"], capture_output=True)
    if probe.returncode != 0:
        return False
    _WORKING.add(python)
    return True


def azureml_env(cli_env: dict[str, str], credential: str | None = None) -> dict[str, str]:
    """The variables ``cloudlet azureml env`` prints (for CREDENTIAL, default the CLI's own)."""
    env = {**cli_env, **({"CLOUDLET_API_KEY": credential} if credential else {})}
    out = subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "env"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            values[name] = value.strip("'")
    return values


def run_sdk(script: str, cwd: Path, env: dict[str, str], timeout: float = 240) -> list[dict[str, Any]]:
    """Run SCRIPT with the SDK's interpreter in CWD (which holds config.json) and only ENV (plus
    PATH and HOME); each line it prints as ``RESULT <json>`` is returned."""
    path = cwd / "sdk_script.py"
    path.write_text(script)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd)}
    proc = subprocess.run(
        [str(sdk_python()), str(path)],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0:
        raise AssertionError(
            f"SDK script failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return results
