"""Unit tests for the VM size catalogue (T11-T15, I9/C5 default quotas)."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from cloudlet.domain.compute.sizes import (
    COMPUTE_TYPES_WITH_SIZES,
    Catalogue,
    custom_size,
    load_catalogue,
    parse_catalogue,
)
from cloudlet.domain.errors import CloudletError

SEED_SERIES = {
    "DDSv4": "general_purpose",
    "DV2": "general_purpose",
    "DV3": "general_purpose",
    "DSv2": "general_purpose",
    "DSv3": "general_purpose",
    "EAv4": "memory_optimized",
    "Ev3": "memory_optimized",
    "ESv3": "memory_optimized",
    "FSv2": "compute_optimized",
    "FX": "compute_optimized",
    "H": "high_performance_compute",
    "HB": "high_performance_compute",
    "HBv2": "high_performance_compute",
    "HBv3": "high_performance_compute",
    "HC": "high_performance_compute",
    "LSv2": "storage_optimized",
    "M": "memory_optimized",
    "NC": "gpu",
    "NC Promo": "gpu",
    "NCv2": "gpu",
    "NCv3": "gpu",
    "ND": "gpu",
    "NDv2": "gpu",
    "NV": "gpu",
    "NVv3": "gpu",
    "NCasT4_v3": "gpu",
    "NDasrA100_v4": "gpu",
}


@pytest.fixture(scope="module")
def cat() -> Catalogue:
    return load_catalogue()


def _raises(code: str, fn: object, *args: object) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        fn(*args)  # type: ignore[operator]
    assert info.value.code == code, info.value.message
    return info.value


def test_yaml_is_packaged_and_loads_once() -> None:
    text = resources.files("cloudlet.domain").joinpath("data/sizes.yaml").read_text(encoding="utf-8")
    assert "Standard_DS3_v2" in text
    assert load_catalogue() is load_catalogue()


@pytest.mark.parametrize("name,category", sorted(SEED_SERIES.items()))
def test_every_seed_series_present(cat: Catalogue, name: str, category: str) -> None:
    series = cat.series[name]
    assert series.category == category
    expected = {"amlcompute"} if name == "FX" else set(COMPUTE_TYPES_WITH_SIZES)
    assert series.supported_by == expected
    assert series.quota_family.startswith("standard") and series.quota_family.endswith("Family")
    assert any(s.series == name for s in cat.list_sizes(include_retired=True)), f"{name} has no sizes"


def test_ds3_v2_specs(cat: Catalogue) -> None:
    size = cat.get("Standard_DS3_v2")
    assert size is not None
    assert (size.vcpus, size.memory_gb, size.family) == (4, 14, "standardDSv2Family")
    assert size.premium_io and not size.isolated and size.low_priority_capable
    d = size.to_dict()
    assert d["name"] == "Standard_DS3_v2" and d["low_priority_capable"] is True and d["custom"] is False


def test_case_insensitive_lookup(cat: Catalogue) -> None:
    size = cat.get("STANDARD_DS3_v2")
    assert size is not None and size.name == "Standard_DS3_v2"
    assert cat.require_size("standard_ds3_V2", "computeinstance").name == "Standard_DS3_v2"
    assert cat.get("Standard_Nope") is None


def test_fx_is_for_clusters_only(cat: Catalogue) -> None:
    assert cat.require_size("Standard_FX4mds", "amlcompute").series == "FX"
    err = _raises("VmSizeNotSupportedForComputeType", cat.require_size, "Standard_FX4mds", "computeinstance")
    assert err.status == 400
    assert "compute clusters" in err.message and "amlcompute" in err.message
    assert "Standard_F4s_v2" in err.message
    assert not [s for s in cat.list_sizes("computeinstance") if s.series == "FX"]
    assert [s for s in cat.list_sizes("amlcompute") if s.series == "FX"]


@pytest.mark.parametrize(
    "size,series,when,replacements",
    [
        ("Standard_NC6", "NC", "2023-08-31", ["NCasT4_v3", "Standard_NC4as_T4_v3", "NDasrA100_v4"]),
        ("Standard_NC6s_v3", "NCv3", "2025-09-30", ["Standard_NC4as_T4_v3", "Standard_ND96asr_v4"]),
        ("Standard_HB60rs", "HB", "2024-08-31", ["HBv2", "Standard_HB120rs_v2", "HBv3"]),
        ("Standard_ND6s", "ND", "2023-08-31", ["NDv2", "Standard_ND40rs_v2"]),
        ("Standard_NV6", "NV", "2023-08-31", ["NVv3"]),
    ],
)
def test_retired_series_refused(
    cat: Catalogue, size: str, series: str, when: str, replacements: list[str]
) -> None:
    assert cat.series[series].retired
    err = _raises("RetiredVmSeries", cat.require_size, size, "amlcompute")
    assert err.status == 400 and err.target == "size"
    assert when in err.message and series in err.message
    for word in replacements:
        assert word in err.message


def test_retired_sizes_hidden_unless_asked(cat: Catalogue) -> None:
    names = {s.name for s in cat.list_sizes()}
    assert "Standard_NC6s_v3" not in names and "Standard_NC4as_T4_v3" in names
    assert "Standard_NC6s_v3" in {s.name for s in cat.list_sizes(include_retired=True)}
    assert [s.name for s in cat.list_sizes()] == sorted(names)


def test_isolated_sizes_are_t15(cat: Catalogue) -> None:
    isolated = {s.name for s in cat.list_sizes(include_retired=True) if s.isolated}
    assert isolated == {"Standard_M128ms", "Standard_F72s_v2", "Standard_NC24s_v3", "Standard_NC24rs_v3"}
    nc24rs = cat.get("Standard_NC24rs_v3")
    assert nc24rs is not None and nc24rs.rdma


def test_unknown_size_suggests_close_names(cat: Catalogue) -> None:
    err = _raises(
        "UnknownVmSize", cat.require_size, "Standard_DS3_v3", "computeinstance", "properties.vmSize"
    )
    assert err.target == "properties.vmSize"
    assert "cloudlet compute list-sizes --type computeinstance" in err.message
    assert "Standard_DS3_v2" in err.message


def test_unknown_compute_type_rejected(cat: Catalogue) -> None:
    _raises("ValidationError", cat.list_sizes, "kubernetes")


def test_cuda_compatibility(cat: Catalogue) -> None:
    t4 = cat.get("Standard_NC4as_T4_v3")
    a100 = cat.get("Standard_ND96asr_v4")
    cpu = cat.get("Standard_DS3_v2")
    assert t4 is not None and a100 is not None and cpu is not None
    assert t4.gpu_architecture == "Turing" and cat.min_cuda_for(t4) == "10.0"
    assert a100.gpu_architecture == "Ampere" and cat.min_cuda_for(a100) == "11.0"
    assert cat.min_cuda_for(cpu) is None
    cat.check_cuda(t4, "10.0")
    cat.check_cuda(t4, "11.8")
    cat.check_cuda(a100, "12.1")
    err = _raises("CudaIncompatible", cat.check_cuda, t4, "9.0")
    assert "10.0" in err.message
    _raises("CudaIncompatible", cat.check_cuda, a100, "9.0")
    _raises("CudaIncompatible", cat.check_cuda, a100, "10.2")  # numeric compare, not string
    _raises("CudaIncompatible", cat.check_cuda, cpu, "11.0")
    _raises("ValidationError", cat.check_cuda, t4, "eleven")


def test_a_jobs_cuda_on_a_cpu_size_is_a_warning_and_on_a_gpu_size_checked(cat: Catalogue) -> None:
    t4, cpu = cat.get("Standard_NC4as_T4_v3"), cat.get("Standard_DS3_v2")
    assert t4 is not None and cpu is not None
    warning = cat.job_cuda_warning(cpu, "11.8")
    assert warning is not None and "CUDA 11.8" in warning and "runs on the CPU" in warning, warning
    assert cat.job_cuda_warning(t4, "11.8") is None
    err = _raises("CudaIncompatible", cat.job_cuda_warning, t4, "9.0")
    assert "10.0" in err.message
    _raises("ValidationError", cat.job_cuda_warning, cpu, "eleven")


def test_cuda_table_matches_seed(cat: Catalogue) -> None:
    table = {row["architecture"]: row["min_cuda"] for row in cat.cuda}
    assert table == {
        "Ampere": "11.0",
        "Turing": "10.0",
        "Volta": "9.0",
        "Pascal": "9.0",
        "Maxwell": "9.0",
        "Kepler": "9.0",
    }


def test_default_quota(cat: Catalogue) -> None:
    assert cat.total_dedicated_cores > 0 and cat.total_low_priority_cores > 0
    assert set(cat.families()) <= set(cat.default_quota)
    for series in cat.series.values():
        limit = cat.default_quota[series.quota_family]
        special = series.category in ("gpu", "high_performance_compute") or series.name in ("M", "FX")
        if special:
            assert limit == 0, series.name
        else:
            assert 24 <= limit <= 300, series.name


def test_custom_sizes(cat: Catalogue) -> None:
    mine = custom_size("lab-a100-box", vcpus=32, memory_gb=256, gpus=2, gpu_architecture="Ampere")
    extended = cat.with_custom_sizes([mine])
    assert extended.get("LAB-A100-BOX") == mine and cat.get("lab-a100-box") is None
    assert extended.require_size("lab-a100-box", "computeinstance").custom
    assert mine in extended.list_sizes("amlcompute") and mine in extended.list_sizes("computeinstance")
    assert extended.min_cuda_for(mine) == "11.0"
    assert "customFamily" in extended.families()
    assert extended.series_of(mine).category == "gpu"
    err = _raises("VmSizeExists", cat.with_custom_sizes, [custom_size("standard_ds3_v2", 4, 14)])
    assert err.status == 409
    _raises("VmSizeExists", cat.with_custom_sizes, [mine, custom_size("LAB-a100-box", 4, 8)])


@pytest.mark.parametrize(
    "kwargs,target",
    [
        ({"name": "bad name!", "vcpus": 1, "memory_gb": 1}, "name"),
        ({"name": "x" * 65, "vcpus": 1, "memory_gb": 1}, "name"),
        ({"name": "ok", "vcpus": 0, "memory_gb": 1}, "vcpus"),
        ({"name": "ok", "vcpus": 1, "memory_gb": 0}, "memory_gb"),
        ({"name": "ok", "vcpus": 1, "memory_gb": 1, "gpus": -1}, "gpus"),
    ],
)
def test_custom_size_validation(kwargs: dict[str, object], target: str) -> None:
    with pytest.raises(CloudletError) as info:
        custom_size(**kwargs)  # type: ignore[arg-type]
    assert info.value.target == target and info.value.status == 400


def test_bad_data_file_is_rejected() -> None:
    text = resources.files("cloudlet.domain").joinpath("data/sizes.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    doc["sizes"].append(dict(doc["sizes"][0], name=doc["sizes"][0]["name"].upper()))
    with pytest.raises(ValueError, match="duplicate"):
        parse_catalogue(doc)
    doc = yaml.safe_load(text)
    doc["sizes"][0]["series"] = "Nope"
    with pytest.raises(ValueError, match="unknown series"):
        parse_catalogue(doc)
    doc = yaml.safe_load(text)
    doc["sizes"][0]["isolated"] = True
    with pytest.raises(ValueError, match="isolated"):
        parse_catalogue(doc)
