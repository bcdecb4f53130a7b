"""Job documents as people write them (services/jobs/job_documents.py): bounded YAML, the line of an
error's field, local code replaced by an uploaded snapshot; code archives
(services/assets/code_archives.py)."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.services.assets import code_archives
from cloudlet.services.jobs import job_documents

TEXT = """\
command: python train.py
inputs:
  data:
    type: uri_folder
    path: ./data
distribution:
  type: pytorch
  process_count_per_instance: 2
args:
  - one
  - two
"""


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("command", 1),
        ("inputs.data.path", 5),
        ("distribution.process_count_per_instance", 8),
        ("distribution.missing", 6),  # the deepest key found
        ("args[1]", 11),
        ("nowhere", None),
        ("yaml", None),
        (None, None),
    ],
)
def test_line_of_a_field(field: str | None, line: int | None) -> None:
    assert job_documents.line_of(TEXT, field) == line


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("- a\n- b\n", "mapping"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("command: [open\n", "line 2"),
        ("x: " + "y" * (job_documents.MAX_YAML_BYTES + 1), "KiB"),
    ],
)
def test_yaml_that_is_refused_says_why_at_the_yaml(text: str, says: str) -> None:
    with pytest.raises(CloudletError) as refused:
        job_documents.parse_yaml(text)
    assert refused.value.target == "yaml" and says in refused.value.message


def test_local_code_needs_a_snapshot_and_remote_code_is_kept() -> None:
    with pytest.raises(CloudletError) as refused:
        job_documents.with_code({"command": "x", "code": "./src"}, None)
    assert refused.value.target == "code"
    digest = "codes/" + "a" * 64
    assert job_documents.with_code({"code": "./src"}, digest) == {"code": digest}
    assert job_documents.with_code({"code": digest}, None) == {"code": digest}
    sweep = {"type": "sweep", "trial": {"code": "src", "command": "x"}}
    assert job_documents.with_code(sweep, digest)["trial"]["code"] == digest


def test_names_come_from_the_field_the_yaml_or_a_generator() -> None:
    assert job_documents.named({"name": "a"}, "b")[1] == "b"
    assert job_documents.named({"name": "a"}, "")[1] == "a"
    assert job_documents.named({}, None)[1].count("_") == 2
    with pytest.raises(CloudletError) as refused:
        job_documents.named({}, "no spaces")
    assert refused.value.target == "name"


def _zip(entries: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as archive:
        for name, body in entries.items():
            archive.writestr(name, body)
    return raw.getvalue()


def test_a_zip_is_repacked_the_same_each_time_and_unsafe_names_are_refused() -> None:
    packed = code_archives._repack_zip(_zip({"b.py": b"2", "a/main.py": b"1"}))
    assert packed == code_archives._repack_zip(_zip({"a/main.py": b"1", "b.py": b"2"}))
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        assert tar.getnames() == ["a/main.py", "b.py"]
        code_archives._check_tar(packed)
    for bad in ("../escape.py", "/abs.py"):
        with pytest.raises(CloudletError) as refused:
            code_archives._repack_zip(_zip({bad: b"x"}))
        assert refused.value.target == "code_archive"
