"""The Blob service on a listener of its own: the same router (``cloudlet.api.blob``) alone in a
uvicorn process, over the same data root and signing secret as a running cloudlet server, to
compare with the path-style prefix on cloudlet's own app (``bench/blob_listener.py``).

    python bench/_blob_peer.py HOST PORT HOME      (HOME: the cloudlet server's home)
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import uvicorn
from fastapi import FastAPI

from cloudlet.api import blob
from cloudlet.services.core.storage import DataRoot


def create_app(home: Path) -> FastAPI:
    with sqlite3.connect(home / "cloudlet.db") as db:
        secret = str(db.execute("SELECT token_secret FROM installation").fetchone()[0])
    app = FastAPI()
    app.state.cloudlet = SimpleNamespace(token_secret=secret, data=DataRoot(home / "data"))
    app.router.routes.extend(blob.router.routes)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


if __name__ == "__main__":
    host, port, home = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    uvicorn.run(create_app(home), host=host, port=port, log_level="warning", access_log=False)
