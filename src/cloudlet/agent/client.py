"""HTTP(S) calls to the control plane: keep-alive per thread, bearer token, retries with backoff."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.parse
from typing import Any

USER_AGENT = "cloudlet-agent/1"


class Unreachable(Exception):
    """The control plane could not be reached (connection refused, reset, timeout)."""


class Revoked(Exception):
    """401/403: the node was terminated or its token revoked."""


class HTTPStatusError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body!r}")
        self.status = status
        self.body = body


class Backoff:
    """Delays 0.1 s doubling to 2 s; reset() after a success."""

    def __init__(self, first: float = 0.1, cap: float = 2.0) -> None:
        self.first, self.cap = first, cap
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.first


class AgentClient:
    def __init__(self, server: str, token: str, timeout: float = 10.0, ca_file: str | None = None) -> None:
        self.server = server.rstrip("/")
        parsed = urllib.parse.urlsplit(self.server)
        self._scheme = parsed.scheme
        self._netloc = parsed.netloc
        self._prefix = parsed.path.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._ca_file = ca_file
        self._local = threading.local()
        # When the control plane last answered (any status below 500): how long it has been away.
        self.last_answered = time.monotonic()

    # -- connections ---------------------------------------------------------------------------
    def _new_conn(self, scheme: str, netloc: str, timeout: float) -> http.client.HTTPConnection:
        if scheme == "https":
            import ssl

            ctx = ssl.create_default_context(cafile=self._ca_file)
            return http.client.HTTPSConnection(netloc, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(netloc, timeout=timeout)

    def _conn(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        reused = conn is not None
        if conn is None:
            conn = self._new_conn(self._scheme, self._netloc, timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, reused

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def close(self) -> None:
        self._drop_conn()

    def local_address(self) -> str:
        """This host's address on its connection to the control plane (the interface that routes
        there). Raises Unreachable when no connection can be made."""
        conn, _ = self._conn(self._timeout)
        try:
            if conn.sock is None:
                conn.connect()
            return str(conn.sock.getsockname()[0])
        except OSError as exc:
            self._drop_conn()
            raise Unreachable(f"connect to {self.server}: {exc!r}") from exc

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token}", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    # -- calls ---------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        """One call (one immediate retry on a stale keep-alive connection). Returns the JSON body.

        Raises Unreachable, Revoked (401/403) or HTTPStatusError (any other non-2xx).
        """
        data = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
            conn, reused = self._conn(timeout or self._timeout)
            try:
                conn.request(method, self._prefix + path, body=data, headers=self._headers(data))
                resp = conn.getresponse()
                raw = resp.read()
                if resp.will_close:
                    self._drop_conn()
            except (OSError, http.client.HTTPException) as exc:
                self._drop_conn()
                stale_errors = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                stale = isinstance(exc, stale_errors)
                if attempt == 0 and reused and stale:
                    continue
                raise Unreachable(f"{method} {path}: {exc!r}") from exc
            break
        if resp.status < 500:
            self.last_answered = time.monotonic()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")
        if resp.status in (401, 403):
            raise Revoked(f"{method} {path}: HTTP {resp.status}")
        if resp.status >= 300:
            raise HTTPStatusError(resp.status, payload)
        return payload

    def download(self, url: str, dest: str, timeout: float = 60.0) -> int:
        """GET `url` (absolute, or a path on the server) into the file `dest`; returns bytes written.

        The node token is sent only to the control plane's own origin.
        """
        parsed = urllib.parse.urlsplit(url)
        scheme, netloc = parsed.scheme or self._scheme, parsed.netloc or self._netloc
        path = parsed.path if parsed.netloc else self._prefix + parsed.path
        if parsed.query:
            path += "?" + parsed.query
        same_origin = (scheme, netloc) == (self._scheme, self._netloc)
        headers = self._headers(None) if same_origin else {"User-Agent": USER_AGENT}
        conn = self._new_conn(scheme, netloc, timeout)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            if same_origin and resp.status < 500:
                self.last_answered = time.monotonic()
            if resp.status in (401, 403) and same_origin:
                raise Revoked(f"GET {path}: HTTP {resp.status}")
            if resp.status >= 300:
                raise HTTPStatusError(resp.status, resp.read(2048).decode("utf-8", "replace"))
            total = 0
            with open(dest, "wb") as out:
                while chunk := resp.read(65536):
                    out.write(chunk)
                    total += len(chunk)
            return total
        except (OSError, http.client.HTTPException) as exc:
            raise Unreachable(f"GET {url}: {exc!r}") from exc
        finally:
            conn.close()

    # -- a run's data (nodes without the server's disk: agent/remote_data.py) ----------------------
    def get_to_file(self, path: str, dest: str, timeout: float = 300.0) -> dict[str, str]:
        """GET a path on the server into the file ``dest``; the answer's headers (lower-case names).
        Raises Unreachable, Revoked (401/403) or HTTPStatusError."""
        conn = self._new_conn(self._scheme, self._netloc, timeout)
        try:
            conn.request("GET", self._prefix + path, headers=self._headers(None))
            resp = conn.getresponse()
            self._answered(resp.status)
            if resp.status in (401, 403):
                raise Revoked(f"GET {path}: HTTP {resp.status}")
            if resp.status >= 300:
                raise HTTPStatusError(resp.status, _error_body(resp.read(4096)))
            with open(dest, "wb") as out:
                while chunk := resp.read(65536):
                    out.write(chunk)
            return {k.lower(): v for k, v in resp.getheaders()}
        except (OSError, http.client.HTTPException) as exc:
            raise Unreachable(f"GET {path}: {exc!r}") from exc
        finally:
            conn.close()

    def put_file(self, path: str, source: str, content_type: str, timeout: float = 300.0) -> Any:
        """PUT the file ``source`` (streamed) to a path on the server; the answer's JSON body."""
        conn = self._new_conn(self._scheme, self._netloc, timeout)
        try:
            size = os.path.getsize(source)
            headers = {
                **self._headers(None),
                "Content-Type": content_type,
                "Content-Length": str(size),
            }
            with open(source, "rb") as body:
                conn.request("PUT", self._prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            self._answered(resp.status)
            if resp.status in (401, 403):
                raise Revoked(f"PUT {path}: HTTP {resp.status}")
            if resp.status >= 300:
                raise HTTPStatusError(resp.status, _error_body(raw))
            return json.loads(raw) if raw else None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise Unreachable(f"PUT {path}: {exc!r}") from exc
        finally:
            conn.close()

    def _answered(self, status: int) -> None:
        if status < 500:
            self.last_answered = time.monotonic()


def _error_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
