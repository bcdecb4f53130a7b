"""getLogs' body (issue 24: the fuzzing found ``tail: 10001``, ``tail: null`` and ``null`` taken)."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.endpoints.online_endpoints import log_lines
from cloudlet.domain.errors import CloudletError


@pytest.mark.parametrize(
    ("body", "lines"),
    [
        (None, 200),
        ({}, 200),
        ({"tail": 5}, 5),
        ({"tail": 5.0}, 5),
        ({"containerType": "InferenceServer"}, 200),
    ],
)
def test_a_documented_body_gives_its_lines(body: Any, lines: int) -> None:
    assert log_lines(body) == lines


@pytest.mark.parametrize(
    ("body", "target"),
    [
        ({"tail": 10001}, "tail"),
        ({"tail": 0}, "tail"),
        ({"tail": None}, "tail"),
        ({"tail": True}, "tail"),
        ({"tail": 1.5}, "tail"),
        ({"containerType": "Sidecar"}, "containerType"),
        ({"containerType": None}, "containerType"),
        ([], "body"),
    ],
)
def test_anything_else_is_a_400_naming_the_field(body: Any, target: str) -> None:
    with pytest.raises(CloudletError) as raised:
        log_lines(body)
    assert raised.value.target == target
