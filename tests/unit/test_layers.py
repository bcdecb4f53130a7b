"""The layer contracts (pyproject.toml, ``[tool.importlinter]``) hold for the code as it is, and
they are not decoration: a copy of the package with one forbidden import in it fails them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = "domain <- services <- control | api <- server"
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(source_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    return subprocess.run(
        [LINT, "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=source_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layers_hold() -> None:
    done = _lint(ROOT / "src")
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("api/routes_admin.py", "from cloudlet.store.schema import Job", "the API does not load the store"),
        ("domain/compute/quota.py", "import sqlalchemy", "the domain is pure"),
        ("services/compute/computes.py", "from cloudlet.api import deps", LAYERS),
        ("agent/runner.py", "from cloudlet.services.jobs import jobs", "the agent stands alone"),
        (
            "cli/compute.py",
            "from cloudlet.services.compute import computes",
            "the CLI and the client talk HTTP only",
        ),
        ("control/clusters.py", "from cloudlet.agent import runner", "the control plane runs no agent code"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    copy = tmp_path / "cloudlet"
    shutil.copytree(ROOT / "src" / "cloudlet", copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    source = target.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in source, module
    target.write_text(source.replace(marker, f"{marker}\n{line}  # noqa\n", 1))
    done = _lint(tmp_path)
    assert done.returncode != 0, done.stdout[-3000:]
    assert f"{contract} BROKEN" in done.stdout, done.stdout[-3000:]
