"""domain/assets/uploads.py: the unpack budget counts entries, bytes and depth and names the limit it
hits; the workspace quota refuses what it has no room for; the settings come from the environment."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from cloudlet.domain.assets.uploads import MAX_UNPACKED_DEPTH, UnpackBudget, UploadLimits
from cloudlet.domain.errors import CloudletError
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.endpoints.batch_code import with_driver


def test_limits_come_from_the_environment_and_refuse_nonsense() -> None:
    limits = UploadLimits.from_env({"CLOUDLET_MAX_UNPACKED_MIB": "8", "CLOUDLET_WORKSPACE_STORAGE_GIB": "3"})
    assert limits.max_unpacked_bytes == 8 << 20 and limits.workspace_storage_gib == 3
    assert UploadLimits.from_env({}) == UploadLimits()
    with pytest.raises(ValueError, match="CLOUDLET_MAX_UNPACKED_FILES"):
        UploadLimits.from_env({"CLOUDLET_MAX_UNPACKED_FILES": "-1"})


def test_the_budget_stops_at_each_limit() -> None:
    budget = UnpackBudget(UploadLimits(max_unpacked_bytes=100, max_unpacked_files=2))
    budget.add_entry()
    budget.add_entry()
    with pytest.raises(CloudletError) as files:
        budget.add_entry()
    assert (files.value.code, files.value.status) == ("ArchiveTooManyFiles", 413)
    budget.add_bytes(100)
    with pytest.raises(CloudletError) as size:
        budget.add_bytes(1)
    assert (size.value.code, size.value.status) == ("ArchiveTooLarge", 413)
    with pytest.raises(CloudletError) as deep:
        UnpackBudget(UploadLimits()).add_entry(MAX_UNPACKED_DEPTH + 1)
    assert deep.value.code == "ArchiveTooDeep"


def test_the_quota_refuses_what_it_has_no_room_for() -> None:
    budget = UnpackBudget(UploadLimits(), room=10, quota=1 << 30)
    budget.check_room(10)
    with pytest.raises(CloudletError) as full:
        budget.check_room(11)
    assert (full.value.code, full.value.status) == ("WorkspaceStorageQuotaExceeded", 403)
    assert "1 GiB" in full.value.message
    budget.add_bytes(10)
    with pytest.raises(CloudletError):
        budget.add_bytes(1)


def test_usage_walks_a_tree_deeper_than_python_recurses_and_is_kept_a_while(tmp_path: Path) -> None:
    data = DataRoot(tmp_path / "data", UploadLimits(usage_ttl_s=3600))
    deep = data.workspace(1)
    deep.mkdir(parents=True)
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1100):  # deeper than the recursion limit (1000)
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as handle:
        handle.write(b"x" * 10)
    os.close(fd)
    try:
        (deep / "top.bin").write_bytes(b"y" * 5)
        assert data.usage(1) == 15
        (deep / "later.bin").write_bytes(b"z" * 100)
        assert data.usage(1) == 15  # measured a moment ago: reused
        assert DataRoot(tmp_path / "data").budget(1, 1).room == (1 << 30) - data.usage(1) - 100
    finally:  # pytest's clean-up would recurse 1,100 deep
        os.unlink(deep.joinpath(*["d"] * 1100, "f"))
        for depth in range(1100, 0, -1):
            os.rmdir(deep.joinpath(*["d"] * depth))


def test_a_batch_snapshot_that_is_an_archive_bomb_is_refused_before_it_is_copied() -> None:
    header = tarfile.TarInfo("zeros.bin")
    header.size = 3 << 30  # declared; the bytes never need to exist
    bomb = gzip.compress(header.tobuf(tarfile.GNU_FORMAT) + bytes(1024))
    with pytest.raises(CloudletError) as refused:
        with_driver(bomb)
    assert (refused.value.code, refused.value.status) == ("ArchiveTooLarge", 413)
    small = io.BytesIO()
    with tarfile.open(fileobj=small, mode="w:gz") as archive:
        info = tarfile.TarInfo("score.py")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"x=1"))
    with tarfile.open(fileobj=io.BytesIO(with_driver(small.getvalue())), mode="r:gz") as repacked:
        assert "score.py" in repacked.getnames()  # control
