"""The studio's addresses and where a sign-in may land (``domain.studio_paths``,
``domain.redirects``): only ever a page of this server's studio."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.cli import studio as cli_studio
from cloudlet.domain import studio_paths
from cloudlet.domain.redirects import local_target
from cloudlet.studio.app import safe_next

JOB_PAGE = "/studio/ws/sub-1/rg/ws/jobs/train-1"


def test_a_jobs_page_is_under_its_workspace_with_each_part_quoted() -> None:
    assert studio_paths.job_path("sub-1", "rg", "ws", "train-1") == JOB_PAGE
    assert studio_paths.job_path("s", "r g", "w/x", "j") == "/studio/ws/s/r%20g/w%2Fx/jobs/j"
    # The Studio link carries a query: azure-ai-ml appends "&tid=…" to it.
    assert studio_paths.job_link("sub-1", "rg", "ws", "train-1") == f"{JOB_PAGE}?tab=overview"


@pytest.mark.parametrize(
    "target",
    [JOB_PAGE, f"{JOB_PAGE}?tab=outputs&attempt=2", "/studio/", "/studio/ws/s/r/w/jobs/a..b"],
)
def test_studio_pages_are_kept(target: str) -> None:
    assert studio_paths.target(target) == target
    assert safe_next(target) == target


@pytest.mark.parametrize(
    "target",
    [
        None,
        "",
        "/studio",
        "https://evil.example/studio/",
        "//evil.example/studio/",
        "/api/v1/principals",
        "/studio/../api/v1/principals",
        "/studio/./x",
        "/studio/%2e%2e/api",
        "/studio/%2E./api",
        "/studio//evil.example",
        "/studio/%2f%2fevil.example",
        "/studio/\\evil.example",
        "/studio/%5cevil.example",
        "/studio/\t/evil.example",
        "/studio/\n/x",
        "/studio/x y",
        "/studio/x#top",
        "/studio/" + "x" * 3000,
    ],
)
def test_anything_else_lands_on_home(target: str | None) -> None:
    assert studio_paths.target(target) is None
    assert safe_next(target) == "/studio/"


def test_the_instance_proxy_keeps_to_its_own_prefix() -> None:
    assert local_target("/instances/ci1/jupyterlab/lab", "/instances/") == "/instances/ci1/jupyterlab/lab"
    assert local_target("/studio/", "/instances/") is None
    assert local_target("/instances/../studio/", "/instances/") is None


class FakeRest:
    def __init__(self) -> None:
        self.posted: list[tuple[str, Any]] = []

    def post(self, path: str, body: Any = None) -> dict[str, str]:
        self.posted.append((path, body))
        return {"url": "http://h:1/studio/link/secret?next=x"}


class FakeState:
    def __init__(self) -> None:
        self.rest = FakeRest()


def test_web_opens_a_one_time_link_to_the_page_where_there_is_a_display(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[str] = []
    monkeypatch.setattr(cli_studio.webbrowser, "open", opened.append)
    monkeypatch.setenv("DISPLAY", ":0")
    st = FakeState()
    cli_studio.open_page(st, f"http://h:1{JOB_PAGE}")  # type: ignore[arg-type]
    assert st.rest.posted == [("/api/v1/studio/signin-links", {"next": JOB_PAGE})]
    assert opened == ["http://h:1/studio/link/secret?next=x"]
    assert f"Studio: http://h:1{JOB_PAGE}" in capsys.readouterr().err

    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    headless = FakeState()
    cli_studio.open_page(headless, f"http://h:1{JOB_PAGE}")  # type: ignore[arg-type]
    assert headless.rest.posted == [] and opened == ["http://h:1/studio/link/secret?next=x"]
