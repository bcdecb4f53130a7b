"""The client waits out a busy server: a 503 (nothing applied, ``Retry-After`` says when) is sent
again a few times; other errors are not. The transport is httpx's own in-memory one, standing in
for a server that is busy on cue."""

from __future__ import annotations

import httpx
import pytest

from cloudlet.client import _rest
from cloudlet.client._rest import BUSY_ATTEMPTS, RestClient


def _client(answers: list[int], seen: list[str]) -> RestClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        status = answers.pop(0) if answers else 200
        body = {"error": {"code": "ServerBusy", "message": "busy"}} if status >= 400 else {"ok": True}
        return httpx.Response(status, json=body, headers={"Retry-After": "0"})

    return RestClient("http://cloudlet.test", "clk_x", transport=httpx.MockTransport(handler))


def test_a_busy_answer_is_retried_until_the_server_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(_rest.time, "sleep", waits.append)
    seen: list[str] = []
    with _client([503, 503], seen) as client:
        assert client.put("/api/v1/x", {"a": 1}) == {"ok": True}
    assert seen == ["PUT", "PUT", "PUT"] and waits == [0.0, 0.0]


def test_a_server_busy_for_longer_is_an_error_after_a_few_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rest.time, "sleep", lambda _s: None)
    seen: list[str] = []
    with _client([503] * 10, seen) as client, pytest.raises(_rest.HttpResponseError) as info:
        client.get("/api/v1/x")
    assert info.value.status_code == 503 and len(seen) == BUSY_ATTEMPTS


def test_other_errors_are_not_retried() -> None:
    seen: list[str] = []
    with _client([500, 409], seen) as client, pytest.raises(_rest.HttpResponseError):
        client.post("/api/v1/x")
    assert seen == ["POST"]
