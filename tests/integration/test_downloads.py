"""The node's download cache for http(s) inputs (agent/downloads.py) against a real local web
server: cached by URL, revalidated with ETag, content kept by hash (a running job's copy never
changes under it), bounded, and every failure a ``DownloadFailed`` that says why."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from cloudlet.agent import downloads
from tests.web_origin import web_origin


def test_a_url_is_cached_and_revalidated(tmp_path: Path) -> None:
    files = {"/data/iris%20v1.csv": b"a,b\n1,2\n"}
    with web_origin(files) as origin:
        url = f"{origin.url}/data/iris%20v1.csv"
        notes: list[str] = []
        first = downloads.fetch(url, tmp_path, note=notes.append)
        assert first.read_bytes() == b"a,b\n1,2\n" and first.name == "iris_v1.csv", first
        assert first.stat().st_mode & 0o777 == 0o644 and first.parent.stat().st_mode & 0o777 == 0o755
        again = downloads.fetch(url, tmp_path, note=notes.append)
        assert again == first and "unchanged" in notes[-1], notes
        # New content lands beside the old, which a running job may still be reading.
        files["/data/iris%20v1.csv"] = b"a,b\n3,4\n"
        changed = downloads.fetch(url, tmp_path)
        assert changed != first and changed.read_bytes() == b"a,b\n3,4\n"
        assert first.read_bytes() == b"a,b\n1,2\n"
        statuses = [(s.conditional, s.status) for s in origin.requests_for("/data/iris%20v1.csv")]
        assert statuses == [(False, 200), (True, 304), (True, 200)], statuses


def test_concurrent_runs_download_a_url_once(tmp_path: Path) -> None:
    with web_origin({"/big.bin": b"x" * (4 << 20)}) as origin:
        url = f"{origin.url}/big.bin"
        results: list[Path] = []
        threads = [
            threading.Thread(target=lambda: results.append(downloads.fetch(url, tmp_path))) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(set(results)) == 1 and len(results) == 4, results
        assert [s.status for s in origin.requests_for("/big.bin")].count(200) == 1


def test_failures_say_why(tmp_path: Path) -> None:
    with web_origin({"/ok.txt": b"12345"}) as origin:
        with pytest.raises(downloads.DownloadFailed, match="HTTP 404"):
            downloads.fetch(f"{origin.url}/missing.txt", tmp_path)
        with pytest.raises(downloads.DownloadFailed, match="over the node's limit of 4 bytes"):
            downloads.fetch(f"{origin.url}/ok.txt", tmp_path, limit=4)
        stopped = threading.Event()
        stopped.set()
        with pytest.raises(downloads.DownloadFailed, match="stopped"):
            downloads.fetch(f"{origin.url}/ok.txt", tmp_path, stop=stopped)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(downloads.DownloadFailed, match="cannot reach it"):
        downloads.fetch(f"http://127.0.0.1:{port}/x", tmp_path)
    with pytest.raises(downloads.DownloadFailed, match="only http:// and https://"):
        downloads.fetch("file:///etc/passwd", tmp_path)
    # Nothing half-written is left in the cache.
    assert not [p for p in tmp_path.rglob(".part-*")], list(tmp_path.rglob("*"))
