"""The rules of a workspace's webhook signing secret (``domain/jobs/webhook_secrets.py``): which
keys sign a body, in which order, and for how long a replaced secret keeps signing."""

from __future__ import annotations

import pytest

from cloudlet.domain.jobs import notifications as rules
from cloudlet.domain.jobs.webhook_secrets import (
    MAX_GRACE_HOURS,
    WorkspaceSigning,
    check_grace_hours,
    signing_keys,
)

NOW = 1_000_000.0


def test_without_a_workspace_secret_the_servers_signs_or_none() -> None:
    assert signing_keys(None, b"server", NOW) == [b"server"]
    assert signing_keys(None, None, NOW) == []


def test_the_workspace_secret_wins_over_the_servers() -> None:
    assert signing_keys(WorkspaceSigning("whsec_a", None, None), b"server", NOW) == [b"whsec_a"]


def test_a_replaced_secret_signs_second_until_its_grace_ends() -> None:
    rotating = WorkspaceSigning("whsec_new", "whsec_old", NOW + 60)
    assert signing_keys(rotating, b"server", NOW) == [b"whsec_new", b"whsec_old"]
    assert signing_keys(rotating, b"server", NOW + 60) == [b"whsec_new"]


def test_the_first_rotations_grace_keeps_the_servers_secret_signing() -> None:
    first = WorkspaceSigning("whsec_new", None, NOW + 60)
    assert signing_keys(first, b"server", NOW) == [b"whsec_new", b"server"]
    assert signing_keys(first, None, NOW) == [b"whsec_new"]
    assert signing_keys(first, b"server", NOW + 61) == [b"whsec_new"]


def test_a_header_with_two_signatures_verifies_with_either_secret_only() -> None:
    body = b'{"event": "job_failed"}'
    header = rules.signature_header([b"new", b"old"], body)
    assert header == f"{rules.sign(b'new', body)},{rules.sign(b'old', body)}"
    assert rules.signature_ok(b"new", body, header) and rules.signature_ok(b"old", body, header)
    assert not rules.signature_ok(b"another workspace's", body, header)
    assert not rules.signature_ok(b"new", body + b" ", header)
    assert rules.signature_header([], body) is None


def test_the_grace_is_bounded() -> None:
    assert check_grace_hours(0) == 0 and check_grace_hours(MAX_GRACE_HOURS) == MAX_GRACE_HOURS
    for bad in (-1, MAX_GRACE_HOURS + 1):
        with pytest.raises(ValueError, match="grace_hours must be from 0"):
            check_grace_hours(bad)
