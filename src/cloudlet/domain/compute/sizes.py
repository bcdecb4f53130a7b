"""VM size catalogue (T11-T15): series, sizes, quota families, CUDA compatibility, isolation.

The reviewed data lives in ``data/sizes.yaml``; this module only loads, validates and queries it.
Custom sizes (an admin's own hardware) are layered on top with :meth:`Catalogue.with_custom_sizes`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cloudlet.domain.bounds import MAX_SIZE_GPUS, MAX_SIZE_MEMORY_GB, MAX_SIZE_VCPUS
from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError, conflict, validation_error
from cloudlet.domain.validation import FieldProblem, translate

# The size Azure ML uses when none is named: a compute file without ``size`` (azure-ai-ml's
# ComputeDefaults.VMSIZE, `az ml compute create`) and serverless jobs (unless a workspace sets
# another).
DEFAULT_SIZE = "Standard_DS3_v2"

COMPUTE_TYPES_WITH_SIZES = compute_types.WITH_SIZES
CATEGORIES = (
    "general_purpose",
    "memory_optimized",
    "compute_optimized",
    "storage_optimized",
    "high_performance_compute",
    "gpu",
)
ISOLATED_SIZES = frozenset({"Standard_M128ms", "Standard_F72s_v2", "Standard_NC24s_v3", "Standard_NC24rs_v3"})
CUSTOM_SERIES = "Custom"


@dataclass(frozen=True)
class Series:
    name: str
    category: str
    supported_by: frozenset[str]
    quota_family: str
    gpu_architecture: str | None
    min_cuda: str | None
    retired_on: date | None
    replacements: tuple[str, ...]

    @property
    def retired(self) -> bool:
        """A retirement date in the catalogue means retired, whatever today's date is."""
        return self.retired_on is not None


@dataclass(frozen=True)
class VmSize:
    name: str
    series: str
    family: str
    vcpus: int
    memory_gb: float
    gpus: int
    gpu_model: str | None
    gpu_architecture: str | None
    temp_disk_gb: int
    max_data_disks: int
    price_dedicated: float
    price_low_priority: float | None
    isolated: bool
    rdma: bool
    premium_io: bool
    custom: bool = False

    @property
    def low_priority_capable(self) -> bool:
        return self.price_low_priority is not None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "low_priority_capable": self.low_priority_capable}


def parse_cuda(version: str, target: str = "cuda") -> tuple[int, ...]:
    """``"11.8"`` -> ``(11, 8)``; numeric so that ``"9.0" < "11.0"``."""
    try:
        return tuple(int(part) for part in str(version).strip().split("."))
    except ValueError:
        raise validation_error(target, f"'{version}' is not a CUDA version such as 11.8.") from None


class Catalogue:
    def __init__(
        self,
        series: Mapping[str, Series],
        sizes: Iterable[VmSize],
        default_quota: Mapping[str, int],
        total_dedicated_cores: int,
        total_low_priority_cores: int,
        cuda: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.series: dict[str, Series] = dict(series)
        self.default_quota: dict[str, int] = dict(default_quota)
        self.total_dedicated_cores = total_dedicated_cores
        self.total_low_priority_cores = total_low_priority_cores
        self.cuda: tuple[Mapping[str, Any], ...] = tuple(cuda)
        self._sizes: dict[str, VmSize] = {}
        for size in sizes:
            key = size.name.lower()
            if key in self._sizes:
                raise conflict("VmSizeExists", f"VM size '{size.name}' already exists.", size.name)
            self._sizes[key] = size

    def get(self, name: str) -> VmSize | None:
        return self._sizes.get(name.strip().lower())

    def series_of(self, size: VmSize) -> Series:
        known = self.series.get(size.series)
        if known is not None:
            return known
        arch = size.gpu_architecture
        return Series(
            name=size.series,
            category="gpu" if size.gpus else "general_purpose",
            supported_by=frozenset(COMPUTE_TYPES_WITH_SIZES),
            quota_family=size.family,
            gpu_architecture=arch,
            min_cuda=self._arch_min_cuda(arch),
            retired_on=None,
            replacements=(),
        )

    def list_sizes(self, compute_type: str | None = None, include_retired: bool = False) -> list[VmSize]:
        if compute_type is not None:
            _check_compute_type(compute_type)
        out = []
        for size in self._sizes.values():
            series = self.series_of(size)
            if compute_type is not None and compute_type not in series.supported_by:
                continue
            if series.retired and not include_retired:
                continue
            out.append(size)
        return sorted(out, key=lambda s: s.name)

    def families(self) -> list[str]:
        return sorted(
            {s.quota_family for s in self.series.values()} | {z.family for z in self._sizes.values()}
        )

    def example_size(self, series: str) -> VmSize | None:
        members = [s for s in self._sizes.values() if s.series == series]
        # smallest size, preferring full-core sizes over constrained-core variants (HB120-16rs_v3)
        return min(members, key=lambda s: ("-" in s.name, s.vcpus, s.name)) if members else None

    def require_size(self, name: str, compute_type: str, target: str = "size") -> VmSize:
        _check_compute_type(compute_type, target="type")
        size = self.get(name)
        if size is None:
            names = [s.name for s in self.list_sizes(compute_type)]
            by_lower = {n.lower(): n for n in names}
            close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3)]
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise CloudletError(
                code="UnknownVmSize",
                message=f"VM size '{name}' is not in the catalogue.{hint} Run "
                f"`cloudlet compute list-sizes --type {compute_type}` to see the available sizes.",
                target=target,
            )
        series = self.series_of(size)
        if series.retired:
            options = []
            for repl in series.replacements:
                example = self.example_size(repl)
                options.append(f"{repl} (e.g. {example.name})" if example else repl)
            raise CloudletError(
                code="RetiredVmSeries",
                message=f"Series {series.name} ({size.name}) was retired on {series.retired_on}; "
                f"choose a current series such as {' or '.join(options) or 'another series'}.",
                target=target,
            )
        if compute_type not in series.supported_by:
            only = " and ".join(sorted(series.supported_by))
            alt = self._alternative(series, compute_type)
            raise CloudletError(
                code="VmSizeNotSupportedForComputeType",
                message=f"Series {series.name} ({size.name}) is for {_KIND.get(only, only)} only and cannot "
                f"be used for {compute_type}; use {only} or another {series.category.replace('_', '-')} "
                f"size{alt}.",
                target=target,
            )
        return size

    def _alternative(self, series: Series, compute_type: str) -> str:
        """' such as FSv2 Standard_F4s_v2': a current same-category series usable for compute_type."""
        for other in sorted(self.series.values(), key=lambda s: s.name):
            if other.category != series.category or other.retired or compute_type not in other.supported_by:
                continue
            members = sorted(
                (s for s in self._sizes.values() if s.series == other.name), key=lambda s: s.vcpus
            )
            if members:  # prefer a 4-vCPU size as the concrete suggestion
                example = next((s for s in members if s.vcpus >= 4), members[0])
                return f" such as {other.name} {example.name}"
        return ""

    def with_custom_sizes(self, sizes: Iterable[VmSize]) -> Catalogue:
        extra = list(sizes)
        for size in extra:
            if self.get(size.name) is not None:
                raise conflict("VmSizeExists", f"VM size '{size.name}' already exists.", "name")
        return Catalogue(
            self.series,
            [*self._sizes.values(), *extra],
            self.default_quota,
            self.total_dedicated_cores,
            self.total_low_priority_cores,
            self.cuda,
        )

    def _arch_min_cuda(self, arch: str | None) -> str | None:
        for row in self.cuda:
            if arch is not None and str(row["architecture"]).lower() == arch.lower():
                return str(row["min_cuda"])
        return None

    def min_cuda_for(self, size: VmSize) -> str | None:
        if not size.gpus:
            return None
        return self.series_of(size).min_cuda or self._arch_min_cuda(size.gpu_architecture)

    def job_cuda_warning(self, size: VmSize, required_cuda: str) -> str | None:
        """What a job whose environment is built for ``required_cuda`` meets on ``size``: on a
        size without GPUs a warning (CUDA images carry a CPU runtime too: Azure ML runs them on
        CPU nodes, and so does cloudlet); on a GPU size an incompatible CUDA is an error (T14)."""
        parse_cuda(required_cuda, "environment")
        if not size.gpus:
            return (
                f"the environment is built for CUDA {required_cuda} but {size.name} has no GPU: the job "
                "runs on the CPU; choose a GPU size such as Standard_NC4as_T4_v3 to use CUDA"
            )
        self.check_cuda(size, required_cuda)
        return None

    def check_cuda(self, size: VmSize, required_cuda: str) -> None:
        wanted = parse_cuda(required_cuda)
        if not size.gpus:
            raise CloudletError(
                code="CudaIncompatible",
                message=f"The environment needs CUDA {required_cuda} but {size.name} has no GPU; "
                "choose a GPU size such as Standard_NC4as_T4_v3.",
                target="size",
            )
        minimum = self.min_cuda_for(size)
        if minimum is not None and wanted < parse_cuda(minimum):
            raise CloudletError(
                code="CudaIncompatible",
                message=f"The environment needs CUDA {required_cuda}, but {size.name} "
                f"({size.gpu_architecture or 'unknown'} GPUs) supports CUDA {minimum}+ only; "
                f"use a CUDA {minimum}+ environment or a size whose GPUs support CUDA {required_cuda}.",
                target="environment",
            )


_KIND: dict[str, str] = {
    ComputeType.AMLCOMPUTE: "compute clusters (amlcompute)",
    ComputeType.COMPUTE_INSTANCE: "compute instances",
}


def _check_compute_type(compute_type: str, target: str = "compute_type") -> None:
    if compute_type not in COMPUTE_TYPES_WITH_SIZES:
        raise validation_error(
            target,
            f"Compute type '{compute_type}' has no VM size catalogue; use one of "
            f"{', '.join(COMPUTE_TYPES_WITH_SIZES)}.",
        )


def _date(value: Any) -> date | None:
    if value is None or isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def parse_catalogue(doc: Mapping[str, Any]) -> Catalogue:
    """Build and validate a catalogue from the YAML document; ValueError names the bad entry."""
    series: dict[str, Series] = {}
    for name, raw in doc["series"].items():
        s = Series(
            name=str(name),
            category=raw["category"],
            supported_by=frozenset(raw["supported_by"]),
            quota_family=raw["quota_family"],
            gpu_architecture=raw.get("gpu_architecture"),
            min_cuda=None if raw.get("min_cuda") is None else str(raw["min_cuda"]),
            retired_on=_date(raw.get("retired_on")),
            replacements=tuple(raw.get("replacements") or ()),
        )
        if s.category not in CATEGORIES or not s.supported_by <= set(COMPUTE_TYPES_WITH_SIZES):
            raise ValueError(f"sizes.yaml: series {name} has a bad category or supported_by")
        series[s.name] = s
    for s in series.values():
        for repl in s.replacements:
            if repl not in series or series[repl].retired:
                raise ValueError(f"sizes.yaml: series {s.name} names unknown/retired replacement {repl}")
    sizes: list[VmSize] = []
    seen: set[str] = set()
    for raw in doc["sizes"]:
        owner = series.get(raw["series"])
        if owner is None:
            raise ValueError(f"sizes.yaml: size {raw['name']} names unknown series {raw['series']}")
        if raw["name"].lower() in seen:
            raise ValueError(f"sizes.yaml: duplicate size name {raw['name']}")
        seen.add(raw["name"].lower())
        if bool(raw["gpus"]) != (owner.category == "gpu"):
            raise ValueError(f"sizes.yaml: size {raw['name']} GPU count does not match its series")
        sizes.append(
            VmSize(
                family=owner.quota_family,
                gpu_architecture=owner.gpu_architecture,
                **{k: raw[k] for k in _SIZE_KEYS},
            )
        )
    isolated = {s.name for s in sizes if s.isolated}
    if isolated != ISOLATED_SIZES:
        raise ValueError(
            f"sizes.yaml: isolated sizes {sorted(isolated)} differ from {sorted(ISOLATED_SIZES)}"
        )
    for row in doc["cuda"]:
        for name in row["series"]:
            if name not in series or series[name].min_cuda != str(row["min_cuda"]):
                raise ValueError(f"sizes.yaml: cuda row {row['architecture']} disagrees with series {name}")
    quota = {str(k): int(v) for k, v in doc["default_quota"].items()}
    missing = {s.quota_family for s in series.values()} - set(quota)
    if missing:
        raise ValueError(f"sizes.yaml: default_quota lacks {sorted(missing)}")
    return Catalogue(
        series,
        sizes,
        quota,
        int(doc["total_dedicated_cores"]),
        int(doc["total_low_priority_cores"]),
        doc["cuda"],
    )


_SIZE_KEYS = (
    "name", "series", "vcpus", "memory_gb", "gpus", "gpu_model", "temp_disk_gb", "max_data_disks",
    "price_dedicated", "price_low_priority", "isolated", "rdma", "premium_io",
)  # fmt: skip


@functools.cache
def load_catalogue() -> Catalogue:
    text = resources.files("cloudlet.domain").joinpath("data/sizes.yaml").read_text(encoding="utf-8")
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10× faster start-up
        return parse_catalogue(yaml.load(text, Loader=loader))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"sizes.yaml is malformed: {exc!r}") from exc


_SIZE_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
_SIZE_NAME_MESSAGE = "must be 1-64 letters, digits, '_', '.' or '-'"


class CustomSizeSpec(BaseModel):
    """An admin-defined size for the site's own hardware (always supported by both compute types).
    The API takes this model as the body of ``POST /sizes``; stored specs are read back through it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=_SIZE_NAME, description=f"the size's name ({_SIZE_NAME_MESSAGE})")
    vcpus: int = Field(ge=1, le=MAX_SIZE_VCPUS)
    memory_gb: float = Field(gt=0, le=MAX_SIZE_MEMORY_GB)
    gpus: int = Field(default=0, ge=0, le=MAX_SIZE_GPUS)
    gpu_model: str | None = Field(default=None, max_length=64)
    gpu_architecture: str | None = Field(default=None, max_length=64)
    family: str = Field(default="customFamily", pattern=_SIZE_NAME)
    temp_disk_gb: int = Field(default=0, ge=0, le=1_000_000)
    price_dedicated: float = Field(default=0.0, ge=0, le=1_000_000)
    price_low_priority: float | None = Field(default=0.0, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _gpu_architecture(self) -> CustomSizeSpec:
        if self.gpu_architecture is not None and self.gpus == 0:
            raise FieldProblem("gpu_architecture", "gpu_architecture needs gpus > 0.")
        return self

    def to_size(self) -> VmSize:
        return VmSize(
            name=self.name,
            series=CUSTOM_SERIES,
            family=self.family,
            vcpus=self.vcpus,
            memory_gb=self.memory_gb,
            gpus=self.gpus,
            gpu_model=self.gpu_model,
            gpu_architecture=self.gpu_architecture,
            temp_disk_gb=self.temp_disk_gb,
            max_data_disks=0,
            price_dedicated=self.price_dedicated,
            price_low_priority=self.price_low_priority,
            isolated=False,
            rdma=False,
            premium_io=False,
            custom=True,
        )


def parse_custom_size(doc: Any) -> CustomSizeSpec:
    try:
        return CustomSizeSpec.model_validate(doc)
    except ValidationError as exc:
        raise translate(exc, CustomSizeSpec, "a custom size") from None


def custom_size(name: str, vcpus: int, memory_gb: float, **extra: Any) -> VmSize:
    """A validated custom size (errors name the field)."""
    return parse_custom_size({"name": name, "vcpus": vcpus, "memory_gb": memory_gb, **extra}).to_size()
