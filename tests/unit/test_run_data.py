"""What a run may read and write over the agent's data routes (``domain/jobs/run_data.py``), and the
opening beneath a mount that refuses links out (``services/jobs/run_data.py``)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import job_outcome
from cloudlet.domain.jobs.run_data import locate, run_mounts
from cloudlet.services.jobs import run_data

DATA = "/srv/cloudlet/data/workspaces/1/datastores/workspaceblobstore"


def spec(job: str = "job-a") -> dict[str, Any]:
    """A run spec's mounts as dispatch writes them: an input, an rw_mount input, an output, the
    checkpoint dir, the default artifacts."""
    return {
        "mounts": [
            {"path": f"{DATA}/inputs/train", "mode": "ro"},
            {"path": f"{DATA}/inputs/scratch", "mode": "rw"},
            {"path": f"{DATA}/azureml/{job}/model", "mode": "rw"},
            {"path": f"{DATA}/checkpoints/{job}", "mode": "rw"},
            {"path": f"{DATA}/ExperimentRun/dcid.{job}/attempt-1/outputs", "mode": "rw"},
        ]
    }


def refused(path: str, *, write: bool = False, doc: dict[str, Any] | None = None) -> CloudletError:
    with pytest.raises(CloudletError) as caught:
        locate(spec() if doc is None else doc, path, write=write)
    return caught.value


def test_a_path_names_a_mount_by_its_index_then_a_path_inside_it() -> None:
    found = locate(spec(), "0/part-0/rows.csv", write=False)
    assert found.mount.path == f"{DATA}/inputs/train" and found.parts == ("part-0", "rows.csv")
    assert not found.mount.writable
    whole = locate(spec(), "2", write=True)
    assert whole.mount.path == f"{DATA}/azureml/job-a/model" and whole.parts == ()
    assert locate(spec(), "3/./step-10/", write=True).parts == ("step-10",)


def test_traversal_and_absolute_paths_are_refused_with_400_naming_path() -> None:
    for path in ("2/../../../etc/passwd", "0/../1", "../checkpoints"):
        error = refused(path, write=True)
        assert error.status == 400 and error.target == "path" and "'..'" in error.message, path
    error = refused("/etc/passwd")
    assert error.status == 400 and error.target == "path" and "relative" in error.message
    error = refused(f"{DATA}/azureml/job-a/model")
    assert error.status == 400 and "relative" in error.message
    for path in ("", ".", "model/x", "x1/a", "0x/a", "1234567/a", "2\x00/a"):
        error = refused(path)
        assert error.status == 400 and error.target == "path", path


def test_another_runs_paths_cannot_be_named() -> None:
    mine, theirs = spec("job-a"), spec("job-b")
    # Another run's output: not among this run's mounts, by index or by its path.
    for index in range(len(theirs["mounts"])):
        assert "job-b" not in locate(mine, str(index), write=False).mount.path
    assert refused("5", doc=mine).status == 404
    assert refused("99/x", doc=mine).status == 404
    assert refused("2/../../job-b/model", write=True, doc=mine).status == 400
    assert refused(theirs["mounts"][2]["path"], write=True, doc=mine).status == 400


def test_a_read_only_input_is_readable_and_never_writable() -> None:
    assert locate(spec(), "0/part-0", write=False).mount.index == 0
    error = refused("0/part-0/rows.csv", write=True)
    assert error.status == 409 and error.code == "ReadOnlyMount" and error.target == "path"
    assert "read-only" in error.message
    # rw_mount inputs, outputs, checkpoints, default artifacts: writable.
    assert [m.index for m in run_mounts(spec()) if m.writable] == [1, 2, 3, 4]


def test_malformed_mount_entries_keep_the_others_indexes() -> None:
    doc = {
        "mounts": [
            "junk",
            {"mode": "rw"},
            {"path": "relative/x", "mode": "rw"},
            {"path": "/ok", "mode": "rw"},
        ]
    }
    assert [(m.index, m.path) for m in run_mounts(doc)] == [(3, "/ok")]
    assert refused("0", doc=doc).status == 404 and refused("2", doc=doc).status == 404
    assert run_mounts({}) == [] and refused("0", doc={}).status == 404


def test_an_upload_failure_fails_the_job_with_its_own_error() -> None:
    ends = [job_outcome.RunEnd(0, 1, job_outcome.UPLOAD_FAILED)]
    settled = job_outcome.settle(ends, attempt=1, max_attempts=1, cancel_requested=False, now=5.0)
    assert settled["error"]["code"] == "OutputUploadFailed" and "upload" in settled["error"]["message"]


# -- opened beneath the mount, links refused ---------------------------------------------------
def mounts_in(root: Path) -> dict[str, Any]:
    (root / "in" / "sub").mkdir(parents=True)
    (root / "in" / "sub" / "a.txt").write_text("alpha")
    (root / "out").mkdir()
    secret = root / "secret.txt"
    secret.write_text("host secret")
    (root / "in" / "leak").symlink_to(secret)
    (root / "in" / "loop").symlink_to(root / "out")
    return {"mounts": [{"path": str(root / "in"), "mode": "ro"}, {"path": str(root / "out"), "mode": "rw"}]}


def body(download: run_data.Download) -> bytes:
    return b"".join(download.body)


def test_symlinks_below_a_mount_are_not_followed(tmp_path: Path) -> None:
    doc = mounts_in(tmp_path)
    got = run_data.download(locate(doc, "0/sub/a.txt", write=False))
    assert (got.kind, body(got)) == ("file", b"alpha")
    for through in ("0/leak", "0/loop/x", "0/loop"):
        with pytest.raises(CloudletError) as caught:
            body(run_data.download(locate(doc, through, write=False)))
        assert caught.value.status == 404, through
    folder = run_data.download(locate(doc, "0", write=False))
    with tarfile.open(fileobj=io.BytesIO(body(folder)), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["sub/a.txt"].isfile() and members["leak"].issym()  # stored as a link, not read
    assert b"host secret" not in body(run_data.download(locate(doc, "0", write=False)))


def test_uploads_do_not_write_through_a_link(tmp_path: Path) -> None:
    doc = mounts_in(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "out" / "via").symlink_to(outside)
    with pytest.raises(CloudletError):
        run_data.upload_file(locate(doc, "1/via/x.txt", write=True), io.BytesIO(b"x"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("up/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    buffer.seek(0)
    with pytest.raises(CloudletError) as caught:
        run_data.upload_folder(locate(doc, "1", write=True), buffer)
    assert caught.value.target == "body"
    assert os.listdir(outside) == [] and not (tmp_path / "out" / "up" / "link").is_symlink()
    written = run_data.upload_file(locate(doc, "1/deep/er/model.bin", write=True), io.BytesIO(b"w" * 10))
    assert written == 10 and (tmp_path / "out" / "deep" / "er" / "model.bin").read_bytes() == b"w" * 10


def test_an_absent_writable_mount_downloads_as_an_empty_folder(tmp_path: Path) -> None:
    doc = {
        "mounts": [
            {"path": str(tmp_path / "nope"), "mode": "ro"},
            {"path": str(tmp_path / "ckpt"), "mode": "rw"},
        ]
    }
    got = run_data.download(locate(doc, "1", write=False))
    with tarfile.open(fileobj=io.BytesIO(body(got)), mode="r:gz") as tar:
        assert got.kind == "folder" and tar.getmembers() == []
    with pytest.raises(CloudletError) as caught:
        run_data.download(locate(doc, "0", write=False))
    assert caught.value.status == 404
