"""The order xdist hands the test files out in: the slowest listed first, the unit tests last."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests import file_order


@dataclass
class Item:
    nodeid: str


def test_the_slowest_files_go_first_the_unit_tests_last_and_each_file_keeps_its_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(file_order, "SLOWEST", {"tests/e2e/test_b.py": 10.0, "tests/browser/test_c.py": 50.0})
    collected = [
        Item("tests/browser/test_a.py::test_1"),
        Item("tests/browser/test_c.py::test_1"),
        Item("tests/browser/test_c.py::test_2"),
        Item("tests/e2e/test_b.py::test_2"),
        Item("tests/e2e/test_b.py::test_1"),
        Item("tests/integration/test_d.py::test_1"),
        Item("tests/unit/test_e.py::test_1"),
        Item("tests/unit/test_e.py::test_0"),
    ]
    ordered = [collected[i].nodeid for i in file_order.longest_first(collected)]
    assert ordered == [
        "tests/browser/test_c.py::test_1",
        "tests/browser/test_c.py::test_2",
        "tests/e2e/test_b.py::test_2",
        "tests/e2e/test_b.py::test_1",
        "tests/browser/test_a.py::test_1",
        "tests/integration/test_d.py::test_1",
        "tests/unit/test_e.py::test_1",
        "tests/unit/test_e.py::test_0",
    ]


def test_xdist_is_told_to_keep_the_collected_order(pytestconfig: pytest.Config) -> None:
    if not hasattr(pytestconfig.option, "loadscopereorder"):
        pytest.skip("pytest-xdist is not loaded")
    assert pytestconfig.option.loadscopereorder is False
