"""Where a job's data inputs may come from (domain/job_inputs.py)."""

from __future__ import annotations

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.job_inputs import check_scheme, downloads, is_download


def test_http_urls_are_downloads_and_datastore_paths_are_not() -> None:
    assert check_scheme("a", "https://example.com/iris.csv") is True
    assert check_scheme("a", "HTTP://example.com/data/") is True
    assert check_scheme("a", "azureml://datastores/workspaceblobstore/paths/x") is False
    assert check_scheme("a", "azureml:iris:1") is False  # assets: resolved elsewhere
    with pytest.raises(CloudletError) as info:
        check_scheme("a", "https:///no-host")
    assert info.value.target == "inputs.a.path"


@pytest.mark.parametrize("uri", ["wasbs://c@a.blob.core.windows.net/x", "s3://b/x", "ftp://h/x", "gs://b/x"])
def test_other_schemes_are_refused_naming_what_works(uri: str) -> None:
    with pytest.raises(CloudletError) as info:
        check_scheme("data", uri)
    error = info.value
    assert error.code == "UnsupportedInputScheme" and error.target == "inputs.data.path"
    assert uri.split("://")[0] + "://" in error.message and "http(s)://" in error.message


def test_a_run_lists_its_downloads_with_placeholders() -> None:
    doc = {
        "inputs": {
            "iris": {"type": "uri_file", "path": "https://example.com/iris.csv"},
            "folder": {"type": "uri_folder", "path": "http://example.com/d/"},
            "local": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/d"},
            "lr": 0.1,
        }
    }
    assert not is_download(doc["inputs"]["lr"]) and not is_download(doc["inputs"]["local"])
    assert downloads(doc) == [
        {
            "input": "iris",
            "url": "https://example.com/iris.csv",
            "type": "uri_file",
            "placeholder": "@@cloudlet-download:iris@@",
        },
        {
            "input": "folder",
            "url": "http://example.com/d/",
            "type": "uri_folder",
            "placeholder": "@@cloudlet-download:folder@@",
        },
    ]
