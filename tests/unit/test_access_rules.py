"""Pure parts of revocable access and the audit log: key expiry rules, token claims, the audit
entry's scrubbing and continuation tokens, and the CLI's ``--since``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from cloudlet.cli.admin import parse_since
from cloudlet.client._config import ConfigurationError
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import api_keys, audit, identity

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


# -- key expiry -------------------------------------------------------------------------------
def test_a_key_expires_in_days_at_a_time_or_never() -> None:
    assert api_keys.expiry(None, None, NOW) is None
    assert api_keys.expiry(30, None, NOW) == NOW + timedelta(days=30)
    at = NOW + timedelta(hours=2)
    assert api_keys.expiry(None, at, NOW) == at
    naive = datetime(2026, 12, 2, 9, 0)  # no zone: UTC
    assert api_keys.expiry(None, naive, NOW) == naive.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("days", "on", "target"),
    [
        (30, NOW + timedelta(days=1), "expires_on"),
        (0, None, "expires_in_days"),
        (api_keys.MAX_LIFETIME_DAYS + 1, None, "expires_in_days"),
        (None, NOW, "expires_on"),
        (None, NOW - timedelta(seconds=1), "expires_on"),
        (None, NOW + timedelta(days=api_keys.MAX_LIFETIME_DAYS + 1), "expires_on"),
        (None, datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), "expires_on"),  # before UTC's year 1
    ],
)
def test_an_impossible_expiry_is_refused_naming_the_field(
    days: int | None, on: datetime | None, target: str
) -> None:
    with pytest.raises(CloudletError) as refused:
        api_keys.expiry(days, on, NOW)
    assert (refused.value.status, refused.value.target) == (400, target)


# -- tokens -----------------------------------------------------------------------------------
def test_a_token_carries_its_key_and_is_capped_by_the_keys_expiry() -> None:
    soon = datetime.now(UTC) + timedelta(minutes=5)
    token, expires = identity.mint_token(7, "secret", key_id="k-1", not_after=soon)
    assert expires == int(soon.timestamp())
    claims = identity.verify_token_claims(token, "secret")
    assert (claims.principal_id, claims.key_id, claims.expires) == (7, "k-1", expires)
    system_token, _ = identity.mint_token(8, "secret")
    assert identity.verify_token_claims(system_token, "secret").key_id is None
    assert identity.verify_token(system_token, "secret") == 8


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (identity.mint_token(7, "other-secret")[0], "Malformed"),
        (identity.mint_token(7, "secret")[0][:-2], "Malformed"),
        (identity.mint_token(7, "secret", lifetime_s=-10)[0], "TokenExpired"),
        ("clt_garbage", "Malformed"),
    ],
)
def test_a_bad_token_is_refused_with_its_reason(token: str, reason: str) -> None:
    with pytest.raises(CloudletError) as refused:
        identity.verify_token_claims(token, "secret")
    assert refused.value.status == 401 and refused.value.details[0]["code"] == reason


# -- audit entries ----------------------------------------------------------------------------
class _Collecting:
    """Stands in for a session: ``record`` only adds to it."""

    def __init__(self) -> None:
        self.added: list[Any] = []

    def add(self, row: Any) -> None:
        self.added.append(row)


def test_an_entry_never_carries_a_secret_and_long_values_are_cut() -> None:
    session = _Collecting()
    audit.bind_request_id("req-1")
    try:
        entry = audit.record(
            session,  # type: ignore[arg-type]
            "admin",
            "compute.update",
            "/subscriptions/s/…/computes/c",
            {
                "changed": {"ssh_settings": {"old": None, "new": {"admin_password": "hunter2", "user": "u"}}},
                "api_key": "clk_secret",
                "script": "x" * 5000,
                "when": NOW,
            },
        )
    finally:
        audit.bind_request_id(None)
    assert session.added == [entry] and entry.request_id == "req-1"
    details = entry.details
    assert details["changed"]["ssh_settings"]["new"] == {"admin_password": "[redacted]", "user": "u"}
    assert details["api_key"] == "[redacted]"
    assert len(details["script"]) < 1100 and details["script"].endswith("more characters)")
    assert details["when"] == "2026-12-01T09:00:00Z"


@pytest.mark.parametrize("action", ["compute", "Compute.create", "compute.create.now", "compute-create", ""])
def test_an_action_is_kind_dot_verb(action: str) -> None:
    with pytest.raises(ValueError, match="kind"):
        audit.record(_Collecting(), "admin", action, "/x")  # type: ignore[arg-type]


def test_changes_name_the_fields_that_differ() -> None:
    before = {"max_instances": 2, "min_instances": 0, "tags": {}}
    after = {"max_instances": 3, "min_instances": 0, "description": "d", "tags": {}}
    assert audit.changes(before, after) == {
        "description": {"old": None, "new": "d"},
        "max_instances": {"old": 2, "new": 3},
    }


def test_continuation_tokens_round_trip_and_strangers_are_refused() -> None:
    assert audit._decode(audit._encode(41)) == 41
    for junk in ("", "not-a-token", audit._encode(0), audit._encode(2**70), "eyJiZWZvcmUiOiAieCJ9"):
        with pytest.raises(CloudletError) as refused:
            audit._decode(junk)
        assert refused.value.target == "$skipToken"


def test_only_a_well_formed_request_id_is_kept() -> None:
    assert audit.request_id_from({"x-ms-client-request-id": "3f2a-9c"}) == "3f2a-9c"
    assert audit.request_id_from({"x-request-id": "abc"}) == "abc"
    assert audit.request_id_from({"x-ms-client-request-id": "x" * 65}) is None
    assert audit.request_id_from({"x-ms-client-request-id": "a b"}) is None
    assert audit.request_id_from({}) is None


# -- the CLI's --since ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", NOW - timedelta(hours=2)),
        ("30m", NOW - timedelta(minutes=30)),
        ("7d", NOW - timedelta(days=7)),
        ("1w", NOW - timedelta(days=7)),
        ("2026-11-30T08:00:00Z", datetime(2026, 11, 30, 8, tzinfo=UTC)),
        ("2026-11-30T08:00:00", datetime(2026, 11, 30, 8, tzinfo=UTC)),
        ("2026-11-30T10:00:00+02:00", datetime(2026, 11, 30, 8, tzinfo=UTC)),
    ],
)
def test_since_takes_relative_and_absolute_times(text: str, expected: datetime) -> None:
    assert datetime.fromisoformat(parse_since(text, NOW)) == expected


def test_since_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ConfigurationError, match="2h, 30m, 7d"):
        parse_since("last tuesday", NOW)
