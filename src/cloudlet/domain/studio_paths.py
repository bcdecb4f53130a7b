"""The studio's addresses (pure): where its pages live, so the job view's Studio link
(``services.views.jobs``), the studio's own links (``studio.shell``) and the sign-in targets
(``domain.redirects``) name the same page."""

from __future__ import annotations

import functools
import urllib.parse

from cloudlet.domain.redirects import local_target

PREFIX = "/studio"  # every studio URL starts here (the session cookie's Path)


def workspace_path(subscription: str, resource_group: str, workspace: str, *parts: str) -> str:
    """A workspace's studio path: ``/studio/ws/{subscription}/{resource group}/{workspace}/…``."""
    tail = "/".join(urllib.parse.quote(p, safe="") for p in parts)
    return f"{_head(subscription, resource_group, workspace)}/{tail}"


@functools.lru_cache(maxsize=1024)
def _head(subscription: str, resource_group: str, workspace: str) -> str:
    """A page of jobs links every job to its page: its workspace's part is quoted once."""
    quoted = (urllib.parse.quote(p, safe="") for p in (subscription, resource_group, workspace))
    return f"{PREFIX}/ws/" + "/".join(quoted)


def job_path(subscription: str, resource_group: str, workspace: str, name: str) -> str:
    """A job's studio page (a pipeline's step and a sweep's trial are jobs of the workspace too)."""
    return workspace_path(subscription, resource_group, workspace, "jobs", name)


def job_link(subscription: str, resource_group: str, workspace: str, name: str) -> str:
    """The job's page as its ``services.Studio`` link names it: with a query, because azure-ai-ml
    appends ``&tid=<tenant>`` to every Studio link it reads (``_append_tid_to_studio_url``, made for
    Azure's ``…?wsid=…``); with no query that would land in the job's name. The page ignores
    ``tid``; ``tab=overview`` is its default tab."""
    return job_path(subscription, resource_group, workspace, name) + "?tab=overview"


def target(next_path: str | None) -> str | None:
    """NEXT_PATH when it is a studio page's path (where a sign-in may land), else None."""
    return local_target(next_path, f"{PREFIX}/")
