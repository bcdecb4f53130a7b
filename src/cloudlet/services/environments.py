"""What a job's environment will be, said at submission (before any node builds it).

The rules are ``domain/environments.py``'s; this adds what only the host knows: whether it has
the Python an environment pins (nodes of the local provider run here; an agent on another host
decides again with its own interpreters and says so in the run's log).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import Any

from cloudlet.domain import environments
from cloudlet.domain.errors import CloudletError


def has_python(version: str) -> bool:
    """An interpreter of VERSION listed in ``CLOUDLET_PYTHONS`` or as ``python<version>`` on this
    host's PATH, that runs (a pyenv shim of a version not selected does not)."""
    listed = [p.strip() for p in os.environ.get("CLOUDLET_PYTHONS", "").split(os.pathsep) if p.strip()]
    found = shutil.which(f"python{version}")
    return any(_runs_as(path, version) for path in (*listed, *([found] if found else [])))


@functools.lru_cache(maxsize=64)
def _runs_as(path: str, version: str) -> bool:
    """Whether PATH runs as Python VERSION (asked once per process: a few ms, at submission)."""
    try:
        done = subprocess.run(
            [path, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == version


def job_warnings(doc: dict[str, Any]) -> list[str]:
    """The job's environment's warnings (a retired curated name, conda packages that have no PyPI
    counterpart, a pinned Python this host lacks). An inline environment that cannot be built
    raises ``CloudletError`` naming its field; a name that does not resolve gives none (its
    validation says why elsewhere). A sweep's environment is its trial's."""
    env = (
        (doc.get("trial") or {}).get("environment") if doc.get("type") == "sweep" else doc.get("environment")
    )
    if env is None:
        return []
    try:
        resolved = environments.resolve_environment(env)
    except CloudletError:
        if isinstance(env, dict):  # an inline one that can never build (e.g. a Docker context): 400
            raise
        return []
    own = f"{sys.version_info[0]}.{sys.version_info[1]}"
    # a curated set is chosen to install on any supported Python: its image's Python is a preference
    found = isinstance(env, str) or (bool(resolved.python) and has_python(str(resolved.python)))
    python = environments.python_warning(resolved, found, own)
    return [*resolved.warnings, *([python] if python else [])]
