"""Autoscale of online deployments (domain/endpoints/online_autoscale.py): settings and the decision, no
I/O."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.endpoints import online_autoscale as scale
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.errors import CloudletError
from tests.unit.test_online_endpoints import DEPLOYMENT

REQUESTS: dict[str, Any] = {
    "type": "target_utilization",
    "min_instances": 0,
    "max_instances": 3,
    "target_concurrent_requests": 2,
    "window": 4,
    "scale_in_delay": 10,
}


def settings(**extra: Any) -> scale.ScaleSettings:
    parsed = scale.parse({**REQUESTS, **extra}, 1)
    assert parsed is not None
    return parsed


def target_of(doc: Any, count: int = 1) -> str | None:
    with pytest.raises(CloudletError) as caught:
        scale.parse(doc, count)
    return caught.value.target


def test_default_and_absent_are_a_fixed_count() -> None:
    assert scale.parse(None, 2) is None and scale.parse({"type": "default"}, 2) is None
    spec = rules.parse_deployment(DEPLOYMENT, "ep1")
    assert spec.scale_settings is None and spec.to_doc()["scale_settings"] == {"type": "default"}


def test_settings_round_trip_through_the_stored_document() -> None:
    spec = rules.parse_deployment({**DEPLOYMENT, "scale_settings": REQUESTS}, "ep1")
    assert spec.scale_settings == settings()
    again = rules.parse_deployment(spec.to_doc(), "ep1")
    assert again.scale_settings == spec.scale_settings
    assert scale.reserved(spec.to_doc()) == 3 and scale.reserved({"instance_count": 2}) == 2


def test_azure_defaults_cpu_target() -> None:
    parsed = scale.parse({"type": "target_utilization", "max_instances": 2}, 1)
    assert parsed is not None and parsed.target_utilization_percentage == 70
    assert parsed.min_instances == 1 and parsed.polling_interval == 1


@pytest.mark.parametrize(
    ("doc", "count", "target"),
    [
        ("x", 1, "scale_settings"),
        ({"type": "bogus"}, 1, "scale_settings.type"),
        ({"type": "default", "max_instances": 2}, 1, "scale_settings.max_instances"),
        ({**REQUESTS, "colour": 1}, 1, "scale_settings.colour"),
        ({**REQUESTS, "max_instances": 0}, 1, "scale_settings.max_instances"),
        ({**REQUESTS, "min_instances": 4}, 1, "scale_settings.min_instances"),
        ({**REQUESTS, "target_utilization_percentage": 50}, 1, "scale_settings.target_concurrent_requests"),
        ({**REQUESTS, "target_concurrent_requests": 0}, 1, "scale_settings.target_concurrent_requests"),
        ({**REQUESTS, "scale_in_delay": "soon"}, 1, "scale_settings.scale_in_delay"),
        (REQUESTS, 5, "instance_count"),
    ],
)
def test_errors_name_the_field(doc: Any, count: int, target: str) -> None:
    assert target_of(doc, count) == target


def load(points: list[tuple[float, int]], replicas: int = 1) -> list[scale.Sample]:
    return [scale.Sample(at, busy, replicas) for at, busy in points]


def test_load_scales_out_at_once_to_the_window_mean_within_max() -> None:
    s = settings()
    # 5 in flight over the window at 2 per replica → 3 replicas
    assert scale.desired(s, 1, load([(0, 5), (1, 5), (2, 5)]), 2) == 3
    assert scale.desired(s, 1, load([(0, 50), (1, 50)]), 1) == 3  # never past max_instances
    # a spike older than the window does not count for scale-out
    assert scale.desired(s, 1, load([(0, 9), (5, 1), (6, 1)]), 6) == 1


def test_scale_in_waits_for_the_delay() -> None:
    s = settings()
    busy_then_idle = load([(t, 6 if t < 5 else 0) for t in range(0, 20)], replicas=3)
    assert scale.desired(s, 3, busy_then_idle[:12], 11) == 3  # busy 4 s ago: within the delay
    assert scale.desired(s, 3, busy_then_idle, 19) == 0  # idle for longer than the delay
    # load last seen at 4 s lasted until the next sample (5 s): not gone before 5 + 10 s
    assert scale.desired(s, 3, busy_then_idle[:15], 14) == 3
    assert scale.desired(s, 3, busy_then_idle[:16], 15) == 0
    # just started: not judged idle before a whole delay of samples
    assert scale.desired(s, 3, load([(100, 0), (101, 0)], 3), 101) == 3


def test_scale_in_stops_at_min_instances() -> None:
    s = settings(min_instances=1)
    idle = load([(t, 0) for t in range(0, 20)], replicas=3)
    assert scale.desired(s, 3, idle, 19) == 1


def test_scale_from_zero_on_a_held_request() -> None:
    s = settings()
    assert scale.desired(s, 0, load([(t, 0) for t in range(10)], 0), 9) == 0
    held = load([(t, 0) for t in range(10)] + [(10, 1)], 0)
    assert scale.desired(s, 0, held, 10) == 1


def test_cpu_target() -> None:
    s = scale.parse({"type": "target_utilization", "min_instances": 1, "max_instances": 4,
                     "target_utilization_percentage": 50, "window": 2, "scale_in_delay": 5}, 1)  # fmt: skip
    assert s is not None
    hot = [scale.Sample(t, 0, 2, 90.0) for t in range(3)]
    assert scale.desired(s, 2, hot, 2) == 4  # 2 × 90 % = 180 % of work at 50 % each → 4
    cool = [scale.Sample(t, 0, 2, 10.0) for t in range(10)]
    assert scale.desired(s, 2, cool, 9) == 1
    # a held request with no replica asks for one whatever the CPU
    assert scale.need(s, scale.Sample(0, 1, 0, None)) == 1
