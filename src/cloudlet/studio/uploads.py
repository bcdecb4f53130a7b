"""What a page's script gets back from an upload route: JSON it can show (the studio's other
answers are pages)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from cloudlet.domain.errors import CloudletError


async def json_answer(work: Callable[[], dict[str, Any]]) -> JSONResponse:
    """WORK's answer (it runs in the threadpool: store and file calls), or a refusal the form shows
    at its field, ``{"error", "field"}`` with its status; 401 and 403 stay the studio's own
    answers (the sign-in redirect, the error page)."""
    try:
        body = await run_in_threadpool(work)
    except CloudletError as exc:
        if exc.status in (401, 403):
            raise
        return JSONResponse({"error": exc.message, "field": exc.target}, status_code=exc.status)
    return JSONResponse(body)
