"""domain/uploads.py: the unpack budget counts entries, bytes and depth and names the limit it
hits; the workspace quota refuses what it has no room for; the settings come from the environment."""

from __future__ import annotations

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.uploads import MAX_UNPACKED_DEPTH, UnpackBudget, UploadLimits


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
