"""The agent ships to another host as one artifact: ``cloudlet.agent`` imports nothing of cloudlet
outside itself and ``cloudlet.nodekit`` (what it shares with the control plane, shipped with it:
``providers/ssh_hosts.agent_bundle``), and nothing outside the standard library. Checked
statically (every import of every module, lazy ones too) and by running a copy of the two packages
alone, with no site-packages. The other way round, the control plane imports no agent code."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import cloudlet
import cloudlet.agent
import cloudlet.nodekit

AGENT = Path(cloudlet.agent.__file__).resolve().parent
NODEKIT = Path(cloudlet.nodekit.__file__).resolve().parent
PACKAGE = Path(cloudlet.__file__).resolve().parent
SHIPPED = ("cloudlet.agent", "cloudlet.nodekit")
STILL_IMPORTS_THE_AGENT: set[str] = set()  # none: the batch driver and the CA bundle are nodekit's
# Optional, imported lazily where used, the agent working without them (the copy with no
# site-packages below runs): the module, and where an ImportError is answered.
OPTIONAL = {"pynvml": "agent/monitor.py: no NVML, the samples say there is no GPU"}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, at any depth (function-level ones too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the agent package by construction
                continue
            found.append((node.lineno, node.module or ""))
    return found


def _shipped(name: str) -> bool:
    return any(name == s or name.startswith(s + ".") for s in SHIPPED)


def test_every_agent_module_imports_only_the_agent_and_the_standard_library() -> None:
    modules = sorted(AGENT.rglob("*.py")) + sorted(NODEKIT.rglob("*.py"))
    assert len(modules) > 10
    offending = []
    for path in modules:
        for line, name in imported_modules(path):
            top = name.split(".")[0]
            if _shipped(name) or (top in sys.stdlib_module_names and top != "cloudlet") or top in OPTIONAL:
                continue
            offending.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert offending == []


def test_the_nodekit_imports_no_agent_code() -> None:
    offending = [
        f"{path.name}:{line} imports {name}"
        for path in sorted(NODEKIT.rglob("*.py"))
        for line, name in imported_modules(path)
        if name.startswith("cloudlet.agent")
    ]
    assert offending == []


def test_the_control_plane_imports_no_agent_code() -> None:
    """What the server runs shares with the agent through ``cloudlet.nodekit`` only."""
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        if path.is_relative_to(AGENT) or where in STILL_IMPORTS_THE_AGENT:
            continue
        offending += [
            f"{where}:{line} imports {name}"
            for line, name in imported_modules(path)
            if name.startswith("cloudlet.agent")
        ]
    assert offending == []


def test_a_copy_of_the_agent_alone_runs_without_site_packages(tmp_path: Path) -> None:
    target = tmp_path / "cloudlet"
    shutil.copytree(AGENT, target / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(NODEKIT, target / "nodekit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PACKAGE / "__init__.py", target / "__init__.py")
    probe = (
        "import importlib, pkgutil, runpy, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import cloudlet.agent\n"
        f"assert cloudlet.agent.__file__.startswith({str(tmp_path)!r}), cloudlet.agent.__file__\n"
        "for module in pkgutil.iter_modules(cloudlet.agent.__path__):\n"
        "    if module.name != '__main__':\n"
        "        importlib.import_module('cloudlet.agent.' + module.name)\n"
        "runpy.run_module('cloudlet.agent', run_name='__main__', alter_sys=True)\n"
    )
    # -I: no environment, no user site; -S: no site-packages, so only the standard library is there.
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: python -m cloudlet.agent" in result.stdout and "CLOUDLET_NODE_ADDRESS" in result.stdout


def test_the_agent_refuses_arguments_it_does_not_take() -> None:
    from cloudlet.agent.main import main

    assert main(["--frobnicate"]) == 2
    assert main(["-h"]) == 0
