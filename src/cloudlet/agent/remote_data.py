"""A run's data over HTTP, for a node that does not share the server's disk (the provider sets
``CLOUDLET_SHARED_FILESYSTEM=0``; docs/agent-protocol.md, "Job data over HTTP").

The run spec's ``mounts`` name server paths. Here each becomes a local copy under
``<node dir>/data/<run>/<index>``: every mount is downloaded before the process starts (inputs, the
checkpoint dir a requeued attempt resumes from, outputs as an earlier attempt left them), the
command and environment see the local paths, and the writable ones are uploaded back: the
checkpoint dir every ``CLOUDLET_CHECKPOINT_UPLOAD_S`` while the run lives (when it changed), all of
them once it has exited. Uploads are packed by descriptors without following links (a sandboxed
job may swap a file for a link to a host file while a root agent packs). Standard library only."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tarfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudlet.agent.client import AgentClient, Backoff, HTTPStatusError, Unreachable

KIND_HEADER = "x-cloudlet-data"
RETRY_FOR_S = 60.0  # how long a transfer retries an unreachable server (or its 5xx)
DEFAULT_CHECKPOINT_UPLOAD_S = 30.0
NAME = "CLOUDLET_CHECKPOINT_UPLOAD_S"


class TransferFailed(Exception):
    """A download or upload of the run's data did not go through (the message says which)."""


@dataclass(frozen=True)
class Copy:
    index: int  # the mount's index in the run spec
    server: str  # its path on the server (what the command names)
    writable: bool
    local: Path = Path()  # its copy here: a folder, or the file of a uri_file input


def checkpoint_interval(*envs: Mapping[str, Any]) -> float:
    """``CLOUDLET_CHECKPOINT_UPLOAD_S`` of the first of ENVS that sets it (a job's own, then the
    agent's), at least 0.2 s; else the default."""
    raw = next((str(e[NAME]).strip() for e in envs if str(e.get(NAME) or "").strip()), "")
    try:
        return max(0.2, float(raw)) if raw else DEFAULT_CHECKPOINT_UPLOAD_S
    except ValueError:
        return DEFAULT_CHECKPOINT_UPLOAD_S


class RemoteData:
    def __init__(
        self, client: AgentClient, run_id: str, spec: dict[str, Any], root: Path, note: Callable[[str], None]
    ) -> None:
        self.client, self.run_id, self.root, self.note = client, run_id, root, note
        self.copies: list[Copy] = []
        self.checkpoints = os.path.normpath(str((spec.get("env") or {}).get("CLOUDLET_CHECKPOINT_DIR") or ""))
        self._wanted = [
            Copy(index, str(m["path"]), m.get("mode") == "rw")
            for index, m in enumerate(spec.get("mounts") or [])
            if isinstance(m, dict) and isinstance(m.get("path"), str) and str(m["path"]).startswith("/")
        ]
        self._signatures: dict[int, object] = {}
        self._lock = threading.Lock()  # one upload at a time (the periodic one and the last)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _url(self, index: int) -> str:
        query = urllib.parse.urlencode({"path": str(index)})
        return f"/agent/v1/runs/{self.run_id}/data?{query}"

    def _retrying(self, what: str, call: Callable[[], Any], stop: threading.Event | None = None) -> Any:
        backoff, deadline = Backoff(), time.monotonic() + RETRY_FOR_S
        while True:
            try:
                return call()
            except (Unreachable, HTTPStatusError) as exc:
                transient = isinstance(exc, Unreachable) or exc.status >= 500
                late = time.monotonic() > deadline
                if not transient or late or (stop or threading.Event()).wait(backoff.next()):
                    raise TransferFailed(f"{what}: {exc}") from exc

    # -- before the run ------------------------------------------------------------------------
    def pull(self, stop: threading.Event) -> dict[str, str]:
        """Download every mount; server path → local path for those that exist (a missing
        read-only input is left out: the job sees its path missing, as on a shared disk)."""
        self.root.mkdir(parents=True, exist_ok=True)
        mapping: dict[str, str] = {}
        for wanted in self._wanted:
            part = self.root / f".{wanted.index}.part"
            try:
                headers = self._retrying(
                    f"mount {wanted.index} ({wanted.server})",
                    lambda w=wanted, p=part: self.client.get_to_file(self._url(w.index), str(p)),  # type: ignore[misc]
                    stop,
                )
            except TransferFailed as exc:
                cause = exc.__cause__
                if isinstance(cause, HTTPStatusError) and cause.status == 404 and not wanted.writable:
                    self.note(f"cloudlet-agent: input {wanted.server} is not on the server: left out\n")
                    continue
                raise
            folder = self.root / str(wanted.index)
            folder.mkdir(exist_ok=True)
            if headers.get(KIND_HEADER) == "folder":
                _extract(part, folder)
                part.unlink()
                local = folder
            else:
                local = folder / (os.path.basename(wanted.server) or "file")
                os.replace(part, local)
            self.copies.append(Copy(wanted.index, wanted.server, wanted.writable, local))
            self._signatures[wanted.index] = _signature(local)
            mapping[wanted.server] = str(local)
        self.note(
            f"cloudlet-agent: data over HTTP: {len(mapping)} of the run's {len(self._wanted)} mounts "
            f"downloaded to {self.root}\n"
        )
        return mapping

    # -- while it runs -------------------------------------------------------------------------
    def keep_checkpoints(self, interval_s: float) -> None:
        """Upload the checkpoint dir every ``interval_s`` while it changes (until ``finish``)."""
        if not any(c.server == self.checkpoints and c.writable for c in self.copies):
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.push(lambda c: c.server == self.checkpoints, only_changed=True)
                except TransferFailed as exc:  # the next round tries again; the last one decides
                    self.note(f"cloudlet-agent: warning: checkpoint upload failed: {exc}\n")

        self._thread = threading.Thread(target=loop, name=f"{self.run_id}-checkpoints", daemon=True)
        self._thread.start()

    # -- after it -------------------------------------------------------------------------------
    def push(self, which: Callable[[Copy], bool] = lambda c: True, only_changed: bool = False) -> int:
        """Upload the writable copies ``which`` picks (folders as a tar.gz unpacked into the
        mount); how many were sent. Raises TransferFailed."""
        sent = 0
        with self._lock:
            for copy in self.copies:
                if not copy.writable or not which(copy) or not copy.local.is_dir():
                    continue
                signature = _signature(copy.local)
                if only_changed and signature == self._signatures.get(copy.index):
                    continue
                archive = self.root / f".{copy.index}.upload.tar.gz"
                try:
                    try:
                        skipped = _pack(copy.local, archive)
                    except (OSError, tarfile.TarError) as exc:
                        raise TransferFailed(f"packing {copy.server}: {exc}") from exc
                    for name, why in skipped.items():
                        self.note(f"cloudlet-agent: warning: {copy.server}/{name} is not uploaded: {why}\n")
                    self._retrying(
                        f"uploading {copy.server}",
                        lambda c=copy, a=archive: self.client.put_file(  # type: ignore[misc]
                            self._url(c.index), str(a), "application/gzip"
                        ),
                    )
                finally:
                    archive.unlink(missing_ok=True)
                self._signatures[copy.index] = signature
                sent += 1
        return sent

    def finish(self) -> None:
        """Stop the periodic checkpoint uploads and upload every writable mount. Raises
        TransferFailed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        sent = self.push()
        self.note(f"cloudlet-agent: data over HTTP: {sent} writable mounts uploaded\n")

    def close(self, keep: bool = False) -> None:
        """No more uploads; the local copies are removed unless ``keep``."""
        self._stop.set()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


def data_members(tar: Any) -> list[Any]:
    """The members of a code snapshot (or a run's data archive) that the "data" extraction filter
    would let through (plain files, folders and links that stay inside); anything else refuses the
    whole archive. The runner's snapshot download uses it too."""
    members = []
    for member in tar.getmembers():
        name = member.name
        parts = name.replace("\\", "/").split("/")
        if name.startswith("/") or ".." in parts:
            raise RuntimeError(f"the code snapshot holds a path outside its folder: {name!r}")
        if member.issym() or member.islnk():
            target = member.linkname
            if target.startswith("/") or ".." in target.split("/"):
                raise RuntimeError(f"the code snapshot holds a link out of its folder: {name!r}")
        elif not (member.isfile() or member.isdir()):
            raise RuntimeError(f"the code snapshot holds a special file: {name!r}")
        member.mode = (member.mode | 0o600) & 0o755  # no set-id bits, always owner-writable
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        members.append(member)
    return members


def _extract(archive: Path, folder: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:  # Python < 3.11.4 (a host's system Python): the same rules, checked here
            tar.extractall(folder, members=data_members(tar))


def _signature(path: Path) -> object:
    """What changes when a folder's content does (names, sizes, modification times)."""
    if not path.is_dir():
        return None
    seen = []
    for top, dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in sorted(dirs + files):
            with contextlib.suppress(OSError):
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                seen.append((top, name, info.st_size, info.st_mtime_ns))
    return sorted(seen)


def _pack(folder: Path, archive: Path) -> dict[str, str]:
    """A tar.gz of ``folder``'s content, walked by descriptors with O_NOFOLLOW: regular files and
    folders only; links and special files are left out (name → why)."""
    skipped: dict[str, str] = {}
    root = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with tarfile.open(archive, "w:gz", compresslevel=1) as tar:  # data barely compresses
            _pack_dir(tar, root, "", skipped)
    finally:
        os.close(root)
    return skipped


def _pack_dir(tar: tarfile.TarFile, dir_fd: int, prefix: str, skipped: dict[str, str]) -> None:
    for name in sorted(os.listdir(dir_fd)):
        arcname = prefix + name
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            skipped[arcname] = "a symbolic link" if exc.errno == errno.ELOOP else str(exc)
            continue
        try:
            info = os.fstat(fd)
            member = tarfile.TarInfo(arcname)
            member.mtime, member.mode = int(info.st_mtime), stat.S_IMODE(info.st_mode) & 0o755
            if stat.S_ISDIR(info.st_mode):
                member.type = tarfile.DIRTYPE
                tar.addfile(member)
                _pack_dir(tar, fd, arcname + "/", skipped)
            elif stat.S_ISREG(info.st_mode):
                member.size = info.st_size
                with os.fdopen(os.dup(fd), "rb") as handle:
                    tar.addfile(member, handle)
            else:
                skipped[arcname] = "not a regular file or folder"
        finally:
            os.close(fd)
