"""Size-limited OS disks for compute instances (I13).

``prepare(path, size_gb)`` gives the directory ``path`` a real size limit, trying in order:

1. ``loop-ext4``: a sparse image file ``<path>.img`` formatted ext4 and loop-mounted at ``path``.
   The kernel refuses writes past the size (ENOSPC), for root too. The image persists: ``detach``
   (instance stop) unmounts it, the next ``prepare`` (start) mounts the same files again.
2. ``tmpfs``: a ``tmpfs`` mount with ``size=``: also enforced by the kernel, but held in memory and
   lost when unmounted, so ``detach`` leaves it mounted.
3. ``accounting``: no mount possible. ``usage`` adds up allocated blocks and ``is_full`` compares
   them with the size; ``mark_full`` removes write permission, which stops the instance's non-root
   processes only — root ignores file modes, so for root this is reporting, not enforcement.

Metadata (method, size) is kept beside the disk in ``<path>.disk.json``. Mounting needs root.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Method = Literal["loop-ext4", "tmpfs", "accounting"]
METHODS: tuple[Method, ...] = ("loop-ext4", "tmpfs", "accounting")
GIB = 1024**3
FULL_THRESHOLD = 0.98
MIN_FREE_BYTES = 1 << 20


class DiskError(RuntimeError):
    pass


@dataclass(frozen=True)
class DiskInfo:
    path: Path
    method: Method
    size_bytes: int
    image: Path | None
    enforced: bool  # the kernel refuses writes past the size, for every process
    prepared_in_s: float
    note: str = ""

    def to_json(self) -> str:
        doc = asdict(self)
        doc["path"], doc["image"] = str(self.path), str(self.image) if self.image else None
        return json.dumps(doc)


def prepare(
    path: Path,
    size_gb: float,
    *,
    size_bytes: int | None = None,
    methods: Sequence[Method] = METHODS,
) -> DiskInfo:
    """Make ``path`` a disk of ``size_gb`` GiB (or ``size_bytes``); idempotent: an existing disk is
    mounted again with its files (the method it was made with is kept)."""
    size = size_bytes if size_bytes is not None else int(size_gb * GIB)
    started = time.monotonic()
    previous = _read_meta(path)
    if previous is not None:
        methods = [previous.method]
        size = previous.size_bytes
    elif path.is_dir() and any(path.iterdir()):
        # A disk made before limits existed (a plain folder): mounting over it would hide its files.
        methods = ["accounting"]
    path.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for method in methods:
        try:
            note = _MAKERS[method](path, size)
        except (DiskError, OSError, subprocess.CalledProcessError) as exc:
            failures.append(f"{method}: {_reason(exc)}")
            continue
        info = DiskInfo(
            path=path,
            method=method,
            size_bytes=size,
            image=image_path(path) if method == "loop-ext4" else None,
            enforced=method != "accounting",
            prepared_in_s=time.monotonic() - started,
            note="; ".join([*failures, note]) if failures else note,
        )
        _meta_path(path).write_text(info.to_json())
        return info
    raise DiskError("no way to make a size-limited disk here: " + "; ".join(failures))


def usage(path: Path) -> tuple[int, int]:
    """(used, total) bytes of the disk at ``path``."""
    info = _read_meta(path)
    if info is not None and info.method == "accounting":
        return _allocated(path), info.size_bytes
    stats = os.statvfs(path)
    total = stats.f_blocks * stats.f_frsize
    # Available, not free: ext4 holds back a few clusters that ordinary writes cannot use.
    return total - stats.f_bavail * stats.f_frsize, total


def is_full(path: Path, threshold: float = FULL_THRESHOLD, min_free: int = MIN_FREE_BYTES) -> bool:
    """True when ``used / total ≥ threshold`` or less than ``min_free`` bytes are left (what makes
    an instance Unusable)."""
    used, total = usage(path)
    return total <= 0 or used / total >= threshold or total - used < min_free


def full_reason(path: Path) -> str:
    used, total = usage(path)
    return f"OS disk full ({used / GIB:.2f} of {total / GIB:.2f} GiB used); free space, then restart"


def mark_full(path: Path, full: bool) -> None:
    """Accounting method only: take write permission away (or give it back). Does not stop root."""
    path.chmod(0o555 if full else 0o755)


def method_of(path: Path) -> Method | None:
    """How the disk at ``path`` was made (None: not made by ``prepare``, e.g. a plain folder)."""
    info = _read_meta(path)
    return info.method if info is not None else None


def detach(path: Path) -> None:
    """Instance stop: unmount a loop disk (its image keeps the files). tmpfs stays mounted."""
    info = _read_meta(path)
    if info is not None and info.method == "loop-ext4" and is_mounted(path):
        _umount(path)


def release(path: Path) -> None:
    """Instance delete: unmount, remove the image, the directory and the metadata."""
    while is_mounted(path):
        _umount(path)
    with contextlib.suppress(FileNotFoundError):
        image_path(path).unlink()
    with contextlib.suppress(FileNotFoundError):
        _meta_path(path).unlink()
    if path.exists():
        path.chmod(0o755)  # an accounting disk marked full
        shutil.rmtree(path)


def image_path(path: Path) -> Path:
    return path.with_name(path.name + ".img")


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mountinfo") as mounts:
        # Field 5 is the mount point, with spaces and the like escaped as octal (\040).
        return any(_unescape(line.split()[4]) == target for line in mounts)


# --- the methods ---------------------------------------------------------------------------------------


def _loop_ext4(path: Path, size: int) -> str:
    if is_mounted(path):
        return "already mounted"
    image = image_path(path)
    if not image.exists():
        with image.open("wb") as handle:
            handle.truncate(size)  # sparse: takes no space until written
        # -m 0: no blocks reserved for root, so the size is the same for every process.
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", "cloudlet-os", str(image)])
    try:
        _run(["mount", "-o", "loop", str(image), str(path)])
    except subprocess.CalledProcessError:
        if not _read_meta(path):
            image.unlink()  # made just now and unusable
        raise
    return f"ext4 image {image}"


def _tmpfs(path: Path, size: int) -> str:
    if not is_mounted(path):
        _run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)])
    return "tmpfs: in memory, lost when unmounted"


def _accounting(path: Path, size: int) -> str:
    return "usage accounting: reported, and non-root writes stopped when full; root is not stopped"


_MAKERS = {"loop-ext4": _loop_ext4, "tmpfs": _tmpfs, "accounting": _accounting}


# --- helpers -------------------------------------------------------------------------------------------


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)


def _umount(path: Path) -> None:
    try:
        _run(["umount", str(path)])
    except subprocess.CalledProcessError:
        # Something still has files open there (a process of the instance): detach lazily.
        _run(["umount", "-l", str(path)])


def _allocated(path: Path) -> int:
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".disk.json")


def _read_meta(path: Path) -> DiskInfo | None:
    try:
        doc = json.loads(_meta_path(path).read_text())
    except (OSError, ValueError):
        return None
    image = doc.get("image")
    return DiskInfo(
        path=Path(doc["path"]),
        method=doc["method"],
        size_bytes=int(doc["size_bytes"]),
        image=Path(image) if image else None,
        enforced=bool(doc["enforced"]),
        prepared_in_s=float(doc.get("prepared_in_s", 0.0)),
        note=str(doc.get("note", "")),
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        err = exc.stderr.decode(errors="replace").strip() if isinstance(exc.stderr, bytes) else ""
        return err or f"{exc.cmd[0]} exited {exc.returncode}"
    return str(exc)


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field
