"""Unit tests for deterministic code/data packing (tar.gz) and ignore rules."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from cloudlet.client.artifacts import (
    content_hash_folder,
    is_ignored,
    list_files,
    pack_folder,
    pack_path,
    parse_ignore,
    unpack,
)


def make_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text("W = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_same_content_same_bytes_regardless_of_mtime_and_creation_order(tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a")
    b = tmp_path / "b"
    (b / "pkg").mkdir(parents=True)  # created in a different order
    (b / "run.sh").write_text("#!/bin/sh\necho run\n")
    (b / "run.sh").chmod(0o755)
    (b / "pkg" / "model.py").write_text("W = 1\n")
    (b / "pkg" / "__init__.py").write_text("")
    (b / "train.py").write_text("print('hi')\n")
    for path in b.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
    data_a, hash_a = pack_folder(a)
    data_b, hash_b = pack_folder(b)
    assert hash_a == hash_b
    assert data_a == data_b
    assert hash_a == hashlib.sha256(data_a).hexdigest()  # what the server checks the body against
    assert content_hash_folder(a) == hash_a
    assert pack_folder(a) == (data_a, hash_a)  # repeatable


def test_content_change_changes_hash(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    before = content_hash_folder(root)
    (root / "pkg" / "model.py").write_text("W = 2\n")
    assert content_hash_folder(root) != before


def test_archive_is_normalised(tmp_path: Path) -> None:
    data, _ = pack_folder(make_tree(tmp_path / "src"))
    assert gzip.decompress(data)  # valid gzip
    assert data[4:8] == b"\x00\x00\x00\x00"  # gzip header mtime 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) == ["pkg/__init__.py", "pkg/model.py", "run.sh", "train.py"]
    for member in members:
        assert member.mtime == 0 and member.uid == 0 and member.gid == 0
        assert member.uname == "" and member.gname == ""
    modes = {m.name: m.mode for m in members}
    assert modes["run.sh"] == 0o755 and modes["train.py"] == 0o644


def test_always_ignored_directories(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    for name in (".git", "__pycache__", ".venv", "pkg/__pycache__"):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "junk").write_text("x")
    assert list_files(root) == ["pkg/__init__.py", "pkg/model.py", "run.sh", "train.py"]


def test_gitignore_rules(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    (root / ".gitignore").write_text("# comment\n\n*.log\noutputs/\n/secret.txt\npkg/gen_*.py\n!keep.log\n")
    (root / "debug.log").write_text("x")
    (root / "pkg" / "deep.log").write_text("x")
    (root / "outputs").mkdir()
    (root / "outputs" / "m.bin").write_text("x")
    (root / "secret.txt").write_text("x")
    (root / "pkg" / "secret.txt").write_text("kept: the rule is anchored")
    (root / "pkg" / "gen_a.py").write_text("x")
    files = list_files(root)
    assert files == [
        ".gitignore",
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/secret.txt",
        "run.sh",
        "train.py",
    ]


def test_amlignore_takes_precedence_over_gitignore(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    (root / ".gitignore").write_text("train.py\n")
    (root / ".amlignore").write_text("run.sh\n")
    files = list_files(root)
    assert "train.py" in files and "run.sh" not in files


def test_ignore_rule_semantics() -> None:
    rules = parse_ignore("data/\n*.tmp\n/top.txt\n**/cache\n")
    assert is_ignored("data", True, rules)
    assert not is_ignored("data", False, rules)  # dir-only rule
    assert is_ignored("a/b/x.tmp", False, rules)
    assert is_ignored("top.txt", False, rules) and not is_ignored("a/top.txt", False, rules)
    assert is_ignored("x/cache", True, rules)
    assert is_ignored("x/__pycache__", True, [])


def test_round_trip(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src")
    (root / "empty").mkdir()
    data, digest = pack_folder(root)
    out = tmp_path / "out"
    written = unpack(data, out)
    assert sorted(written) == ["pkg/__init__.py", "pkg/model.py", "run.sh", "train.py"]
    assert (out / "pkg" / "model.py").read_text() == "W = 1\n"
    assert (out / "empty").is_dir()
    assert os.access(out / "run.sh", os.X_OK)
    assert pack_folder(out) == (data, digest)  # unpacked copy packs to the same snapshot


def test_pack_path_file_and_folder(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "data")
    data, _ = pack_path(root)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.getnames()[0] == "data"
        assert "data/pkg/model.py" in tar.getnames()
    single, digest = pack_path(root / "train.py")
    out = tmp_path / "single"
    assert unpack(single, out) == ["train.py"]
    assert pack_path(out / "train.py")[1] == digest


def test_unpack_refuses_unsafe_paths(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="unsafe"):
        unpack(buf.getvalue(), tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()


def test_pack_folder_requires_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        pack_folder(tmp_path / "f")
