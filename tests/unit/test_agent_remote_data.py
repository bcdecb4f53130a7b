"""The agent's side of job data over HTTP (``agent/remote_data.py``): what it packs for upload
(regular files and folders, never through a link) and how often it uploads checkpoints."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

from cloudlet.agent import remote_data


def test_packing_leaves_links_and_special_files_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "deep").mkdir(parents=True)
    (out / "deep" / "model.bin").write_bytes(b"weights")
    secret = tmp_path / "host-secret"
    secret.write_text("do not upload")
    (out / "leak").symlink_to(secret)
    (out / "dir-link").symlink_to(tmp_path)
    os.mkfifo(out / "pipe")
    archive = tmp_path / "up.tar.gz"
    skipped = remote_data._pack(out, archive)
    assert skipped == {
        "dir-link": "a symbolic link",
        "leak": "a symbolic link",
        "pipe": "not a regular file or folder",
    }
    with tarfile.open(archive, "r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"deep", "deep/model.bin"}
        assert tar.extractfile(members["deep/model.bin"]).read() == b"weights"  # type: ignore[union-attr]
        assert b"do not upload" not in archive.read_bytes()


def test_a_change_in_a_folder_changes_its_signature(tmp_path: Path) -> None:
    (tmp_path / "step").write_text("1")
    before = remote_data._signature(tmp_path)
    assert remote_data._signature(tmp_path) == before
    (tmp_path / "step2").write_text("2")
    assert remote_data._signature(tmp_path) != before
    assert remote_data._signature(tmp_path / "missing") is None


def test_the_checkpoint_interval_is_the_jobs_then_the_agents_then_the_default() -> None:
    name = remote_data.NAME
    assert remote_data.checkpoint_interval({name: "2"}, {name: "9"}) == 2.0
    assert remote_data.checkpoint_interval({}, {name: "9"}) == 9.0
    assert remote_data.checkpoint_interval({name: " "}, {}) == remote_data.DEFAULT_CHECKPOINT_UPLOAD_S
    assert remote_data.checkpoint_interval({name: "0"}) == 0.2  # a floor: not a busy loop
    assert remote_data.checkpoint_interval({name: "soon"}) == remote_data.DEFAULT_CHECKPOINT_UPLOAD_S
