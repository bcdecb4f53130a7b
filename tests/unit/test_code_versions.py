"""services/assets/codes.py on an in-memory store and a temporary data root: registering an uploaded
folder packs it into a native snapshot and checks the SDK's content hash, versions are
immutable, a hash look-up finds them under any name, and a job's ARM codeId resolves to the
snapshot."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.services.assets import codes
from cloudlet.services.core.context import Caller
from cloudlet.services.core.storage import DataRoot
from cloudlet.store.schema import Base, ResourceGroup, Subscription, Workspace

CALLER = Caller(principal_id=1, name="alice", is_admin=True)


@pytest.fixture
def session() -> Iterator[Session]:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add(Subscription(id="s", display_name="s"))
        s.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        s.add(Workspace(id=3, resource_group_id=1, name="ws", location="l", created_on=datetime.now(UTC)))
        s.commit()
        yield s
    engine.dispose()


def _upload(data: DataRoot, files: dict[str, bytes]) -> str:
    folder = data.datastore(3) / "LocalUpload" / "p1" / "src"
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    return "https://127.0.0.1:8572/blob/ws3/workspaceblobstore/LocalUpload/p1/src"


def _spec(uri: str, digest: str | None) -> codes.Registration:
    return codes.Registration(uri, digest, "202208", True, None, {})


def test_register_pack_lookup_and_resolve(session: Session, tmp_path: Path) -> None:
    data = DataRoot(tmp_path)
    ws = session.get(Workspace, 3)
    assert ws is not None
    uri = _upload(data, {"main.py": b"print(1)\n", "lib/util.py": b"x = 2\n"})
    digest = codes.content_hash(codes.pack_upload(data, 3, _spec(uri, None)).archive)

    wrong = _spec(uri, "f" * 64)
    with pytest.raises(CloudletError) as refused:
        codes.pack_upload(data, 3, wrong)
    assert refused.value.target == codes.HASH_FIELD

    spec = _spec(uri, digest)
    row, created = codes.register(
        session, data, ws, CALLER, "anon", "1", spec, codes.pack_upload(data, 3, spec)
    )
    session.commit()
    assert created and row.hash_sha256 == digest
    again, created = codes.register(
        session, data, ws, CALLER, "anon", "1", spec, codes.pack_upload(data, 3, spec)
    )
    assert not created and again.id == row.id
    moved = _spec(uri + "/lib", None)
    with pytest.raises(CloudletError, match="Asset paths cannot be updated"):
        codes.existing(session, ws, "anon", "1", moved)

    # The same files under another name reuse the snapshot (a second packing has other bytes).
    repacked = codes.Packed(b"other bytes of the same files", digest)
    other, created = codes.register(session, data, ws, CALLER, "named", "1", spec, repacked)
    assert created and other.snapshot == row.snapshot
    session.commit()
    assert [v.name for v in codes.by_hash(session, ws, digest)] == ["anon", "named"]
    code = codes.snapshot_for(
        session, ws, "/subscriptions/s/resourceGroups/rg/workspaces/ws/codes/anon/versions/1"
    )
    snapshot = data.code(3, code.split("/", 1)[1])
    with tarfile.open(fileobj=io.BytesIO(snapshot.read_bytes()), mode="r:gz") as archive:
        assert sorted(m.name for m in archive if m.isfile()) == ["lib/util.py", "main.py"]
    with pytest.raises(CloudletError):
        codes.snapshot_for(session, ws, "/codes/missing/versions/1")


def test_code_uris_outside_the_workspace_are_refused(tmp_path: Path) -> None:
    data = DataRoot(tmp_path)
    for uri in (
        "https://127.0.0.1:8572/blob/ws4/workspaceblobstore/LocalUpload/p1/src",  # another workspace
        "https://127.0.0.1:8572/blob/ws3/workspaceblobstore/%2e%2e/%2e%2e/secrets",
        "https://example.com/some/folder",
        "azureml://datastores/workspaceblobstore/paths/../../x",
        "https://127.0.0.1:8572/blob/ws3/workspaceblobstore/LocalUpload/never-uploaded",
    ):
        with pytest.raises(CloudletError) as refused:
            codes.pack_upload(data, 3, _spec(uri, None))
        assert refused.value.target == codes.URI_FIELD and refused.value.status == 400, uri
