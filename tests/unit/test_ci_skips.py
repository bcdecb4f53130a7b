"""Under CI=true a skipped test fails the run (a missing Chromium, sshd, root… is a missing part);
elsewhere it stays a skip with its reason. Runs the project's conftest in an inner pytest."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()
PROBES = """
import pytest

def test_skipped_inside():
    pytest.skip("chromium is missing")

@pytest.mark.skipif(True, reason="needs root")
def test_skipped_by_mark():
    pass

@pytest.mark.xfail(reason="a known bug")
def test_expected_failure():
    assert False

def test_plain():
    pass
"""


@pytest.fixture
def probes(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_probes=PROBES)
    return pytester


def test_under_ci_a_skip_fails_with_its_reason(
    probes: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = probes.runpytest_subprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0
    assert outcomes["passed"] == 1 and outcomes["xfailed"] == 1
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == 2
    result.stdout.fnmatch_lines(["*CI=true runs everything*chromium is missing*"])


def test_under_ci_a_module_skip_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_module="import pytest\npytest.skip('no browser', allow_module_level=True)\n"
        "def test_never():\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*CI=true runs everything*no browser*"])


def test_elsewhere_a_skip_stays_a_skip(probes: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = probes.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
