"""A data asset's files as the studio lists and sends them (``services/assets/asset_files``): the
tree without following links, a file or the folder, refusals past the studio's size and outside
the version's path."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.services.assets import asset_files
from cloudlet.services.core.storage import DataRoot

PATH = "azureml://datastores/workspaceblobstore/paths/LocalUpload/abc/"


@pytest.fixture
def stored(tmp_path: Path) -> tuple[DataRoot, Any, Any]:
    data = DataRoot(tmp_path / "data")
    folder = data.datastore(1) / "LocalUpload" / "abc"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.csv").write_text("x\n")
    (folder / "sub" / "b.txt").write_text("hello")
    (tmp_path / "secret").write_text("not yours")
    os.symlink(tmp_path / "secret", folder / "link")  # a job may plant one: never followed
    asset = SimpleNamespace(name="d", version="1", spec={"type": "uri_folder", "path": PATH})
    return data, SimpleNamespace(id=1), asset


def test_the_tree_lists_files_and_folders_and_skips_links(stored: tuple[DataRoot, Any, Any]) -> None:
    data, ws, asset = stored
    tree = asset_files.tree(ws, asset, data)
    assert tree.kind == "folder" and not tree.truncated
    assert [(e.path, e.size, e.depth) for e in tree.entries] == [
        ("a.csv", 2, 0),
        ("sub/", 0, 0),
        ("sub/b.txt", 5, 1),
    ]
    missing = SimpleNamespace(name="m", version="1", spec={"path": PATH + "nothing"})
    assert asset_files.tree(ws, missing, data).kind == "missing"
    remote = SimpleNamespace(name="r", version="1", spec={"path": "https://example.com/x.csv"})
    assert asset_files.tree(ws, remote, data).kind == "remote"


def test_a_file_or_the_folder_is_sent_and_nothing_else(
    stored: tuple[DataRoot, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, ws, asset = stored
    assert asset_files.download(ws, asset, data, "sub/b.txt") == (b"hello", "b.txt")
    packed, name = asset_files.download(ws, asset, data, None)
    assert name == "d-1.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(packed)) as archive:
        assert {"a.csv", "sub/b.txt"} <= {m.name.removeprefix("./") for m in archive.getmembers()}
    for refused in ("link", "sub", "../x", "nothing"):
        with pytest.raises(CloudletError) as caught:
            asset_files.download(ws, asset, data, refused)
        assert caught.value.status in (400, 404), refused
    monkeypatch.setattr(asset_files, "DOWNLOAD_LIMIT", 3)
    with pytest.raises(CloudletError) as caught:
        asset_files.download(ws, asset, data, "sub/b.txt")
    assert (
        caught.value.status == 413
        and "cloudlet datastore download -n workspaceblobstore" in caught.value.message
    )
