"""Autoscale of online deployments (issue 14): the ``scale_settings`` document and the decision,
without I/O.

Azure keeps autoscale in another service (Azure Monitor); cloudlet keeps it in the deployment's
own document, in the shape of the SDK's ``TargetUtilizationScaleSettings`` where a field exists
there, and fields of its own beside them::

    scale_settings:
      type: target_utilization          # Azure; "default" (or no scale_settings) = fixed instance_count
      min_instances: 0                  # Azure; 0 = scale to zero (the gateway holds first requests)
      max_instances: 3                  # Azure
      polling_interval: 1               # Azure, seconds between samples
      target_utilization_percentage: 70 # Azure: mean CPU % per replica to aim at, or …
      target_concurrent_requests: 1     # cloudlet: … mean in-flight requests per replica to aim at
      window: 10                        # cloudlet, seconds: scale out on the mean over this window
      scale_in_delay: 60                # cloudlet, seconds: scale in only to the most the last
                                        #   scale_in_delay seconds needed

Quota: an autoscaled deployment holds ``max_instances`` replicas' cores (what it may grow to).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cloudlet.domain.errors import validation_error

TYPES = ("default", "target_utilization")
MAX_INSTANCES = 20
DEFAULTS: dict[str, int] = {
    "min_instances": 1,
    "max_instances": 1,
    "polling_interval": 1,
    "window": 10,
    "scale_in_delay": 60,
}
LIMITS: dict[str, tuple[int, int]] = {
    "min_instances": (0, MAX_INSTANCES),
    "max_instances": (1, MAX_INSTANCES),
    "polling_interval": (1, 600),
    "window": (1, 3600),
    "scale_in_delay": (0, 86_400),
    "target_concurrent_requests": (1, 1000),
    "target_utilization_percentage": (1, 100),
}
FIELDS = {"type", *DEFAULTS, "target_concurrent_requests", "target_utilization_percentage"}
AZURE_DEFAULT_UTILIZATION = 70


@dataclass(frozen=True)
class ScaleSettings:
    min_instances: int
    max_instances: int
    polling_interval: int
    window: int
    scale_in_delay: int
    target_concurrent_requests: int | None = None
    target_utilization_percentage: int | None = None

    @property
    def to_zero(self) -> bool:
        return self.min_instances == 0

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": "target_utilization",
            "min_instances": self.min_instances,
            "max_instances": self.max_instances,
            "polling_interval": self.polling_interval,
            "window": self.window,
            "scale_in_delay": self.scale_in_delay,
        }
        if self.target_concurrent_requests is not None:
            doc["target_concurrent_requests"] = self.target_concurrent_requests
        if self.target_utilization_percentage is not None:
            doc["target_utilization_percentage"] = self.target_utilization_percentage
        return doc


def _int(value: Any, target: str) -> int:
    low, high = LIMITS[target.rsplit(".", 1)[-1]]
    if isinstance(value, bool) or not isinstance(value, int):
        raise validation_error(target, f"'{target}' must be a whole number from {low} to {high}")
    if not low <= value <= high:
        raise validation_error(target, f"'{target}' is {value}; it must be from {low} to {high}")
    return value


def parse(doc: Any, instance_count: int) -> ScaleSettings | None:
    """``scale_settings`` → the settings, or None for a fixed ``instance_count`` (type default)."""
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise validation_error("scale_settings", "'scale_settings' must be a mapping")
    extra = sorted(set(doc) - FIELDS)
    if extra:
        raise validation_error(
            f"scale_settings.{extra[0]}",
            f"'{extra[0]}' is not a field of scale_settings; known: {', '.join(sorted(FIELDS))}",
        )
    kind = str(doc.get("type") or "default").lower()
    if kind not in TYPES:
        raise validation_error(
            "scale_settings.type",
            f"type '{doc.get('type')}' is not supported; use default or target_utilization",
        )
    if kind == "default":
        others = sorted(set(doc) - {"type"})
        if others:
            raise validation_error(
                f"scale_settings.{others[0]}",
                f"'{others[0]}' needs scale_settings.type: target_utilization (default is a fixed "
                "instance_count)",
            )
        return None
    values = {key: _int(doc.get(key, DEFAULTS[key]), f"scale_settings.{key}") for key in DEFAULTS}
    if "max_instances" not in doc:
        values["max_instances"] = max(instance_count, values["min_instances"], 1)
    if values["min_instances"] > values["max_instances"]:
        raise validation_error(
            "scale_settings.min_instances",
            f"scale_settings.min_instances ({values['min_instances']}) is above "
            f"scale_settings.max_instances ({values['max_instances']}); lower one or raise the other",
        )
    if not values["min_instances"] <= instance_count <= values["max_instances"]:
        raise validation_error(
            "instance_count",
            f"instance_count ({instance_count}) is the first replica count and must be from "
            f"scale_settings.min_instances ({values['min_instances']}) to max_instances "
            f"({values['max_instances']})",
        )
    requests = doc.get("target_concurrent_requests")
    cpu = doc.get("target_utilization_percentage")
    if requests is not None and cpu is not None:
        raise validation_error(
            "scale_settings.target_concurrent_requests",
            "give scale_settings.target_concurrent_requests or target_utilization_percentage, not both",
        )
    if requests is None and cpu is None:
        cpu = AZURE_DEFAULT_UTILIZATION
    return ScaleSettings(
        **values,
        target_concurrent_requests=None
        if requests is None
        else _int(requests, "scale_settings.target_concurrent_requests"),
        target_utilization_percentage=None
        if cpu is None
        else _int(cpu, "scale_settings.target_utilization_percentage"),
    )


def reserved(spec_doc: dict[str, Any]) -> int:
    """The replicas a stored deployment document holds quota for: max_instances when autoscaled."""
    count = int(spec_doc.get("instance_count") or 1)
    settings = spec_doc.get("scale_settings")
    if isinstance(settings, dict) and str(settings.get("type") or "").lower() == "target_utilization":
        return max(count, int(settings.get("max_instances") or count))
    return count


@dataclass(frozen=True)
class Sample:
    """One look at a deployment: when (monotonic s), the requests in flight or held for it, its
    replicas (starting or ready) and their mean CPU % (None where not measured)."""

    at: float
    in_flight: int
    replicas: int
    cpu_percent: float | None = None


def need(settings: ScaleSettings, sample: Sample) -> int:
    """The replicas SAMPLE's load asks for, before the bounds."""
    if settings.target_concurrent_requests is not None:
        return math.ceil(sample.in_flight / settings.target_concurrent_requests)
    target = settings.target_utilization_percentage or AZURE_DEFAULT_UTILIZATION
    busy = (sample.cpu_percent or 0.0) * sample.replicas
    wanted = math.ceil(busy / target - 1e-9)
    # requests held while no replica runs ask for one whatever the CPU says
    return max(wanted, 1 if sample.in_flight > 0 else 0)


def _mean(samples: Sequence[Sample]) -> Sample:
    last = samples[-1]
    cpus = [s.cpu_percent for s in samples if s.cpu_percent is not None]
    return Sample(
        last.at,
        math.ceil(sum(s.in_flight for s in samples) / len(samples) - 1e-9),
        max(s.replicas for s in samples),
        sum(cpus) / len(cpus) if cpus else None,
    )


def desired(settings: ScaleSettings, current: int, samples: Sequence[Sample], now: float) -> int:
    """The replicas to run now, from CURRENT and the SAMPLES (oldest first).

    Out: at once to what the mean load over the last ``window`` seconds needs (a request held
    while none runs asks for one at once). In: only down to the most any sample of the last
    ``scale_in_delay`` seconds needed, so a replica goes only after the delay without need of it.
    Always within min_instances..max_instances."""

    def bounded(count: int) -> int:
        return max(settings.min_instances, min(settings.max_instances, count))

    if not samples:
        return bounded(current)
    recent = [s for s in samples if s.at > now - settings.window] or [samples[-1]]
    out = need(settings, _mean(recent))
    if current == 0 and samples[-1].in_flight > 0:
        out = max(out, 1)
    if out > current:
        return bounded(out)
    # a sample stands for the load until the next one: the last before the delay counts too, so a
    # replica goes only once a whole scale_in_delay has passed since load was last seen
    before = [s for s in samples if s.at <= now - settings.scale_in_delay]
    held = before[-1:] + [s for s in samples if s.at > now - settings.scale_in_delay]
    # the delay counts from the first sample: a deployment just started is not judged idle yet
    if not before:
        return bounded(current)
    hold = max([out, *(need(settings, s) for s in held)])
    return bounded(min(current, hold))


def horizon(settings: ScaleSettings) -> float:
    """How far back (s) the samples need to go."""
    return float(max(settings.window, settings.scale_in_delay) + settings.polling_interval)


def first_count(settings: ScaleSettings | None, instance_count: int, stored: int | None) -> int:
    """The replicas a roll-out starts with: autoscale's stored count (within the bounds, which an
    update may have moved) when it has one, so a restart or a new lease holder resumes where
    autoscale was; else ``instance_count``."""
    if settings is None or stored is None:
        return instance_count
    return min(max(stored, settings.min_instances), settings.max_instances)
