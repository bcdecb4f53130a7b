"""Blob SAS (services/assets/blob_sas.py), the code content hash (services/assets/codes.content_hash) and the
sweep of abandoned uploads (services/assets/blob_store.sweep_stale)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from cloudlet.domain.access.roles import Role
from cloudlet.services.assets import blob_sas, blob_store
from cloudlet.services.assets.codes import content_hash
from cloudlet.services.core.context import Caller

SECRET = "s" * 64
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ISSUER = blob_sas.Issuer(3, "key-3")


def _query(sas: str) -> dict[str, str]:
    return dict(parse_qsl(sas))


def test_a_signature_grants_what_it_names_until_it_expires() -> None:
    sas = blob_sas.mint(SECRET, 7, "workspaceblobstore", ISSUER, "LocalUpload/abc/", "rw", now=NOW)
    grant = blob_sas.verify(SECRET, "ws7", "workspaceblobstore", _query(sas), now=NOW)
    assert (grant.workspace_id, grant.prefix, grant.permissions) == (7, ("LocalUpload", "abc"), "rw")
    grant.require("w", ("LocalUpload", "abc", "src", "main.py"))
    with pytest.raises(blob_sas.SasError, match="covers only"):
        grant.require("w", ("LocalUpload", "abcd", "x"))  # a sibling folder sharing a prefix
    with pytest.raises(blob_sas.SasError, match="does not grant 'd'"):
        grant.require("d", ("LocalUpload", "abc", "x"))
    later = NOW + blob_sas.DEFAULT_TTL
    with pytest.raises(blob_sas.SasError, match="expired"):
        blob_sas.verify(SECRET, "ws7", "workspaceblobstore", _query(sas), now=later)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sp", "racwdl"),
        ("se", "2099-01-01T00:00:00Z"),
        ("si", ""),
        ("sig", "AAAA"),
        ("sv", "2020-01-01"),
        ("skoid", "1"),  # another user's
        ("sktid", "key-1"),  # another key
        ("skoid", "x"),
    ],
)
def test_changing_any_field_breaks_the_signature(field: str, value: str) -> None:
    query = _query(blob_sas.mint(SECRET, 7, "workspaceblobstore", ISSUER, "LocalUpload/abc", "rw", now=NOW))
    query[field] = value
    with pytest.raises(blob_sas.SasError) as refused:
        blob_sas.verify(SECRET, "ws7", "workspaceblobstore", query, now=NOW)
    assert refused.value.status == 403


def test_a_signature_is_bound_to_its_account_container_and_secret() -> None:
    query = _query(blob_sas.mint(SECRET, 7, "workspaceblobstore", ISSUER, "", "rl", now=NOW))
    for account, container, secret in (("ws8", "workspaceblobstore", SECRET), ("ws7", "other", SECRET)):
        with pytest.raises(blob_sas.SasError):
            blob_sas.verify(secret, account, container, query, now=NOW)
    with pytest.raises(blob_sas.SasError):
        blob_sas.verify("t" * 64, "ws7", "workspaceblobstore", query, now=NOW)
    with pytest.raises(blob_sas.SasError) as bad_account:
        blob_sas.verify(SECRET, "devstoreaccount1", "workspaceblobstore", query, now=NOW)
    assert bad_account.value.status == 400
    with pytest.raises(blob_sas.SasError) as anonymous:
        blob_sas.verify(SECRET, "ws7", "workspaceblobstore", {}, now=NOW)
    assert anonymous.value.status == 401
    whole = blob_sas.verify(SECRET, "ws7", "workspaceblobstore", query, now=NOW + timedelta(minutes=14))
    assert whole.covers(("any", "path")) and whole.issuer == ISSUER


def test_a_signature_lives_minutes_and_only_as_far_as_its_issuers_role_now() -> None:
    assert timedelta(minutes=15) >= blob_sas.DEFAULT_TTL
    sas = blob_sas.mint(SECRET, 7, "workspaceblobstore", ISSUER, now=NOW)
    grant = blob_sas.verify(SECRET, "ws7", "workspaceblobstore", _query(sas), now=NOW)
    assert grant.permissions == blob_sas.ALL_PERMISSIONS

    def caller(role: Role | None) -> Caller:
        return Caller(3, "ada", False, {7: role} if role else {}, "key-3")

    assert blob_sas.narrow(grant, caller(Role.CONTRIBUTOR)).permissions == blob_sas.ALL_PERMISSIONS
    read_only = blob_sas.narrow(grant, caller(Role.READER))
    assert read_only.permissions == "rl"
    for permission in "wdca":
        with pytest.raises(blob_sas.SasError, match=f"does not grant '{permission}'"):
            read_only.require(permission, ("x",))
    with pytest.raises(blob_sas.SasError, match="no longer has a role") as gone:
        blob_sas.narrow(grant, caller(None))
    assert gone.value.status == 403
    assert blob_sas.permissions_for(caller(Role.READER), 7) == blob_sas.READ_PERMISSIONS
    assert blob_sas.permissions_for(caller(Role.OWNER), 7) == blob_sas.ALL_PERMISSIONS


def test_content_hash_is_azure_ml_s() -> None:
    """azure-ai-ml's 202208 hash: file count, then '#name#size' in lower-cased name order, then
    the bytes in that order (so 'B.txt' sorts after 'a/x.txt')."""
    files = {"B.txt": b"bee", "a/x.txt": b"ex", "a/Empty": b""}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        folder = tarfile.TarInfo("a")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)  # a folder entry is not a file
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    expected = hashlib.sha256(b"3#a/Empty#0#a/x.txt#2#B.txt#3" + b"" + b"ex" + b"bee").hexdigest()
    assert content_hash(buffer.getvalue()) == expected


def test_abandoned_uploads_and_uncommitted_blocks_are_swept(tmp_path: Path) -> None:
    staging, blocks = tmp_path / "staging", tmp_path / "blocks"
    (staging).mkdir()
    (blocks / "old").mkdir(parents=True)
    (blocks / "fresh").mkdir()
    now = time.time()
    for path, age in (
        (staging / "a.part", blob_store.STALE_UPLOAD_S + 60),
        (staging / "b.part", 60),
        (blocks / "old" / "1", blob_store.STALE_BLOCKS_S + 60),
        (blocks / "fresh" / "1", blob_store.STALE_BLOCKS_S + 60),
        (blocks / "fresh" / "2", 60),  # one block of the blob still being staged: keep them all
    ):
        path.write_bytes(b"x")
        os.utime(path, (now - age, now - age))
    assert blob_store.sweep_stale(staging, blocks, now) == 2
    assert sorted(p.name for p in staging.iterdir()) == ["b.part"]
    assert sorted(p.name for p in blocks.iterdir()) == ["fresh"]
    assert blob_store.sweep_stale(staging, blocks, now + 60) == 0  # at most once an hour
