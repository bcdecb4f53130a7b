"""Where a job's data inputs may come from (domain/jobs/job_inputs.py)."""

from __future__ import annotations

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import job_inputs
from cloudlet.domain.jobs.job_inputs import check_scheme, downloads, is_download


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


@pytest.mark.parametrize(
    ("path", "url"),
    [
        (
            "wasbs://datasets@acct.blob.core.windows.net/iris.csv",
            "https://acct.blob.core.windows.net/datasets/iris.csv",
        ),
        ("wasb://c@acct.blob.core.windows.net/a/b/", "https://acct.blob.core.windows.net/c/a/b/"),
        (
            "abfss://lake@acct.dfs.core.windows.net/raw/x.parquet",
            "https://acct.blob.core.windows.net/lake/raw/x.parquet",
        ),
        ("abfss://lake@acct.dfs.core.chinacloudapi.cn/x", "https://acct.blob.core.chinacloudapi.cn/lake/x"),
        ("wasbs://acct.blob.core.windows.net/iris.csv", None),  # no container
        ("wasbs://c@acct.example.com/x", None),  # not Azure Storage
        ("s3://bucket/x", None),
        ("https://acct.blob.core.windows.net/c/x", None),
    ],
)
def test_azure_storage_paths_become_the_https_url_of_the_same_blob(path: str, url: str | None) -> None:
    assert job_inputs.blob_https_url(path) == url


def test_a_jobs_wasbs_inputs_are_rewritten_and_the_rest_left_alone() -> None:
    doc = {
        "inputs": {
            "a": {"type": "uri_file", "path": "wasbs://d@acct.blob.core.windows.net/f.csv"},
            "b": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/x"},
            "n": 3,
        }
    }
    assert job_inputs.with_blob_urls(doc)["inputs"] == {
        "a": {"type": "uri_file", "path": "https://acct.blob.core.windows.net/d/f.csv"},
        "b": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/x"},
        "n": 3,
    }
