"""File-system work the agent does as root on paths that sandboxed users can change.

A node's user processes run as an unprivileged user (``nodekit/sandbox.py``) but write in folders
the agent later touches as root: a job's datastore mounts, an instance's OS disk and file share,
setup-script logs. A symlink planted there must never redirect the agent, or it would read, write
or chown a host file (the credentials, ``/etc/passwd``) on the user's behalf. So paths are walked
one component at a time from ``/`` with ``O_NOFOLLOW``: a symlink owned by root (the host's own
layout, e.g. ``/var/run``) is followed, any other is refused with ``UnsafePath``. The result is a
descriptor, so nothing can be swapped between the check and its use: ownership changes go through
it, sandboxes bind it (``bwrap --bind-fd``), files are opened relative to it. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

MAX_LINKS = 40
DIR_MODE = 0o755


class UnsafePath(OSError):
    """A path crosses a symlink that a user (not root) made, or names something unexpected."""


def open_path(
    path: str, *, create: bool = False, directory: bool = False, trusted: tuple[int, ...] = (0,)
) -> int:
    """An ``O_PATH`` descriptor of ``path`` (absolute), walked without following user symlinks.

    ``create`` makes missing folders (mode 0755, owned by the caller); ``directory`` requires the
    last component to be a folder; ``trusted`` are the uids whose symlinks are followed. Raises
    ``FileNotFoundError`` when it is missing, ``UnsafePath`` when another's symlink is on the way."""
    pending = os.path.normpath(os.path.join("/", path))
    for _ in range(MAX_LINKS):
        found = _walk(pending, create, directory, trusted)
        if isinstance(found, int):
            return found
        pending = found  # a root-owned symlink: walk again with its target substituted
    raise UnsafePath(errno.ELOOP, "too many levels of symbolic links", path)


def _walk(path: str, create: bool, directory: bool, trusted: tuple[int, ...]) -> int | str:
    parts = [part for part in path.split("/") if part]
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, DIR_MODE, dir_fd=fd)
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                where = "/" + "/".join(parts[: index + 1])
                if info.st_uid not in trusted:
                    raise UnsafePath(errno.ELOOP, f"a symlink made by uid {info.st_uid} is on the way", where)
                target = os.readlink(name, dir_fd=fd)
                base = "/" + "/".join(parts[:index])
                return os.path.normpath(os.path.join(base, target, *parts[index + 1 :]))
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
            if not last or directory:
                flags |= os.O_DIRECTORY
            try:
                step = os.open(name, flags, dir_fd=fd)
            except OSError as exc:  # swapped for a symlink since the stat (ELOOP/ENOTDIR)
                raise UnsafePath(exc.errno, f"{name} changed while it was opened", path) from exc
            if stat.S_ISLNK(os.fstat(step).st_mode):
                os.close(step)
                raise UnsafePath(errno.ELOOP, f"{name} changed while it was opened", path)
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


def proc_path(fd: int) -> str:
    """The descriptor's ``/proc/self/fd`` name: calls given it act on the opened inode itself."""
    return f"/proc/self/fd/{fd}"


def chown_tree(path: str, uid: int, gid: int, *, recursive: bool = False, create: bool = False) -> None:
    """Give ``path`` (and, ``recursive``, everything under it) to ``uid:gid`` without following a
    symlink anywhere: the walk goes by descriptors (``os.fwalk``) and links are changed, not their
    targets."""
    fd = open_path(path, create=create)
    try:
        os.chown(proc_path(fd), uid, gid)
        if recursive and stat.S_ISDIR(os.fstat(fd).st_mode):
            for _, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                for name in (*dirs, *files):
                    with contextlib.suppress(FileNotFoundError):
                        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    finally:
        os.close(fd)


def owner_of(path: str) -> tuple[int, int] | None:
    """``(uid, gid)`` of ``path`` (walked safely), or None when it is missing."""
    try:
        fd = open_path(path)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        return info.st_uid, info.st_gid
    finally:
        os.close(fd)


def open_file(path: str, flags: int, mode: int = 0o644, *, create_parents: bool = False) -> int:
    """``os.open`` of a regular file, its folder walked safely and the file itself not followed
    (``O_NOFOLLOW``); a FIFO or device planted there is refused rather than opened for long."""
    folder, name = os.path.split(os.path.normpath(path))
    parent = open_path(folder, create=create_parents, directory=True)
    try:
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(exc.errno, "the file is a symlink", path) from exc
            raise
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePath(errno.EINVAL, "not a regular file", path)
    os.set_blocking(fd, True)
    return fd


def read_bytes(path: str, limit: int | None = None, *, from_end: bool = False) -> bytes:
    """The file's bytes (at most ``limit``, the last ones when ``from_end``), read safely."""
    fd = open_file(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        if limit is None:
            return handle.read()
        if from_end:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - limit))
        return handle.read(limit)


def write_bytes(path: str, data: bytes, *, mode: int = 0o644, append: bool = False) -> None:
    """Write (or append) ``data`` to a regular file, safely; made with ``mode`` when missing."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = open_file(path, flags, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
