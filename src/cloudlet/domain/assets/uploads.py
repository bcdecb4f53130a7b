"""Limits on what one upload may write: the unpacked size and file count of an archive, and a
workspace's storage quota. Pure: the numbers come from the environment at start
(``UploadLimits.from_env``) and the counting happens while unpacking (``services/core/storage.py``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from cloudlet.domain.errors import CloudletError

GIB = 1 << 30
# The body of one upload as sent (a tar.gz or a file): Azure's largest single Put Blob is ~5000 MiB;
# this server keeps 2 GiB and asks for blocks beyond it.
MAX_UPLOAD_BYTES = 2 * GIB
# What one archive may unpack to: the body's limit applies to what it writes too. A tar.gz
# compresses zeros ~1000:1, so the body's size says nothing about the bytes written.
DEFAULT_MAX_UNPACKED_BYTES = MAX_UPLOAD_BYTES
DEFAULT_MAX_UNPACKED_FILES = 100_000
# Each workspace's share of the data root (datastores and code snapshots), unless an
# administrator sets another (``cloudlet workspace create -n WS --storage-quota-gib N``).
DEFAULT_WORKSPACE_STORAGE_GIB = 100
DEFAULT_USAGE_TTL_S = 10.0
MAX_WORKSPACE_STORAGE_GIB = 1 << 20  # 1 PiB: a bound on the setting, not a promise
# Folders deep in one archive member: walks of the tree (sizes, downloads) recurse per level.
MAX_UNPACKED_DEPTH = 128


@dataclass(frozen=True)
class UploadLimits:
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    max_unpacked_files: int = DEFAULT_MAX_UNPACKED_FILES
    workspace_storage_gib: int = DEFAULT_WORKSPACE_STORAGE_GIB
    # How long a workspace's measured usage is reused (s): the quota may be passed by what is
    # uploaded within that time, and no upload walks the workspace's tree more often.
    usage_ttl_s: float = DEFAULT_USAGE_TTL_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> UploadLimits:
        """``CLOUDLET_MAX_UNPACKED_MIB``, ``CLOUDLET_MAX_UNPACKED_FILES`` and
        ``CLOUDLET_WORKSPACE_STORAGE_GIB`` override the defaults (whole positive numbers);
        ``CLOUDLET_STORAGE_USAGE_TTL_S`` (seconds, 0 measures at every upload)."""
        env = os.environ if env is None else env

        def number(name: str, default: int) -> int:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            if not raw.isdigit() or int(raw) <= 0:
                raise ValueError(f"{name} must be a whole positive number, not {raw!r}")
            return int(raw)

        return cls(
            max_unpacked_bytes=number("CLOUDLET_MAX_UNPACKED_MIB", DEFAULT_MAX_UNPACKED_BYTES >> 20) << 20,
            max_unpacked_files=number("CLOUDLET_MAX_UNPACKED_FILES", DEFAULT_MAX_UNPACKED_FILES),
            workspace_storage_gib=number("CLOUDLET_WORKSPACE_STORAGE_GIB", DEFAULT_WORKSPACE_STORAGE_GIB),
            usage_ttl_s=float(env.get("CLOUDLET_STORAGE_USAGE_TTL_S") or DEFAULT_USAGE_TTL_S),
        )


def quota_exceeded(quota_bytes: int) -> CloudletError:
    """The answer when a write would take a workspace past its storage quota. 403 with a code in
    the style of Azure Storage's own quota answers (``ShareSizeLimitReached``, 403): the request
    is well formed, the workspace is full."""
    return CloudletError(
        "WorkspaceStorageQuotaExceeded",
        f"the workspace's storage quota of {_size(quota_bytes)} is reached; delete data or ask an "
        "administrator to raise it (cloudlet workspace create -n WS --storage-quota-gib N)",
        "body",
        403,
    )


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


class UnpackBudget:
    """What an archive may still write: counted member by member and byte by byte while it
    unpacks, so a bomb stops at the limit instead of after filling the disk. ``room`` is the
    workspace's free quota and ``quota`` the quota itself (None: no quota applies)."""

    def __init__(self, limits: UploadLimits, room: int | None = None, quota: int | None = None) -> None:
        self.limits = limits
        self.room = room
        self.quota = quota
        self.bytes = 0
        self.files = 0

    def check_room(self, n: int) -> None:
        """Refuse a write of N bytes (a blob, a snapshot) that the quota has no room for."""
        if self.room is not None and n > self.room:
            raise quota_exceeded(self.quota if self.quota is not None else self.room)

    def add_entry(self, depth: int = 1) -> None:
        if depth > MAX_UNPACKED_DEPTH:
            raise CloudletError(
                "ArchiveTooDeep",
                f"an archive member lies {depth} folders deep; at most {MAX_UNPACKED_DEPTH} are unpacked",
                "body",
            )
        self.files += 1
        if self.files > self.limits.max_unpacked_files:
            raise CloudletError(
                "ArchiveTooManyFiles",
                f"the archive holds more than {self.limits.max_unpacked_files} entries, the limit of "
                "one upload; send it in parts",
                "body",
                413,
            )

    def add_bytes(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.limits.max_unpacked_bytes:
            raise CloudletError(
                "ArchiveTooLarge",
                f"the archive unpacks to more than {_size(self.limits.max_unpacked_bytes)}, the limit "
                "of one upload; send it in parts",
                "body",
                413,
            )
        if self.room is not None and self.bytes > self.room:
            raise quota_exceeded(self.quota if self.quota is not None else self.room)
