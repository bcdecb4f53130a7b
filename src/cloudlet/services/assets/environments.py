"""What a job's environment will be, said at submission (before any node builds it).

The rules are ``domain/assets/environments.py``'s; this adds what only the host knows: whether it has
the Python an environment pins (nodes of the local provider run here; an agent on another host
decides again with its own interpreters and says so in the run's log).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from cloudlet.domain.assets import environments
from cloudlet.domain.errors import CloudletError
from cloudlet.nodekit import envs


@functools.lru_cache(maxsize=64)
def has_python(version: str) -> bool:
    """Whether this host has an interpreter of VERSION that runs, found as a node of the local
    provider finds one (``nodekit/envs.find_python``: ``CLOUDLET_PYTHONS``, then ``python<version>``
    on PATH); asked once per version per process (a few ms, at submission)."""
    return envs.find_python(version) is not None


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
