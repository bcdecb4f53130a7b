"""The pure rules of job notifications (domain/jobs/notifications.py): the setting's shapes,
which deliveries a final status makes, the signature, and the bounded backoff."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from pydantic import ValidationError

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import notifications as rules
from cloudlet.domain.jobs.job_spec import job_to_doc, parse_job


def _setting(**fields: object) -> dict[str, object]:
    return rules.NotificationSetting.model_validate(fields).model_dump(exclude_none=True)


def test_both_event_spellings_are_one_event() -> None:
    setting = _setting(emails=["a@example.com"], email_on=["JobFailed", "job_completed", "JobCanceled"])
    assert setting["email_on"] == ["job_failed", "job_completed", "job_cancelled"]
    with pytest.raises(ValidationError, match="unknown event"):
        _setting(email_on=["job_started"])


def test_planned_deliveries_follow_email_on_and_each_webhooks_event() -> None:
    setting = _setting(
        emails=["a@example.com", "b@example.com"],
        email_on=["job_failed"],
        webhooks={
            "all": {"url": "https://hooks.example/all"},
            "done": {"url": "http://hooks.example/done", "event_type": "JobCompleted"},
        },
    )
    assert rules.planned(setting, "Failed") == [
        ("email", "a@example.com", "job_failed"),
        ("email", "b@example.com", "job_failed"),
        ("webhook", "all", "job_failed"),
    ]
    assert rules.planned(setting, "Completed") == [
        ("webhook", "all", "job_completed"),
        ("webhook", "done", "job_completed"),
    ]
    assert rules.planned(setting, "Running") == []
    assert rules.planned(None, "Failed") == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "gopher://x/", "ftp://host/x", "http:///x", "hooks.example"]
)
def test_a_webhook_url_must_be_http_or_https(url: str) -> None:
    with pytest.raises(ValidationError, match="http:// or https://"):
        _setting(webhooks={"x": {"url": url}})


def test_emails_are_checked_and_bounded_as_azure_bounds_them() -> None:
    with pytest.raises(ValidationError, match="not an email address"):
        _setting(emails=["nobody"])
    with pytest.raises(ValidationError, match="499"):
        _setting(emails=[f"user{i}@example.com" for i in range(40)])


def test_a_command_job_keeps_its_setting_and_refuses_a_bad_one() -> None:
    doc = {
        "command": "true",
        "notification_setting": {"emails": ["a@example.com"], "email_on": ["job_failed"]},
    }
    assert job_to_doc(parse_job(doc))["notification_setting"] == {
        "emails": ["a@example.com"],
        "email_on": ["job_failed"],
        "webhooks": {},
    }
    with pytest.raises(CloudletError) as refused:
        parse_job({"command": "true", "notification_setting": {"webhooks": {"x": {"url": "file:///x"}}}})
    assert "notification_setting" in str(refused.value.target)


def test_the_signature_is_hmac_sha256_of_the_body() -> None:
    body = b'{"event": "job_failed"}'
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert rules.sign(b"s3cret", body) == expected
    assert rules.signature_ok(b"s3cret", body, expected)
    assert not rules.signature_ok(b"other", body, expected)


def test_backoff_doubles_is_capped_and_gives_up() -> None:
    waits = [rules.next_try(n, 100.0) for n in range(1, rules.MAX_ATTEMPTS)]
    assert [w - 100.0 for w in waits if w is not None] == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert rules.next_try(rules.MAX_ATTEMPTS, 100.0) is None
    assert rules.next_try(40, 0.0) is None


def test_the_email_names_the_job_its_status_error_and_link() -> None:
    body = rules.event_body(
        {
            "job": "j1",
            "status": "Failed",
            "workspace": "ws",
            "error": {"code": "UserError", "message": "exit 3"},
        },
        "job_failed",
        "https://c.example/studio/ws/s/rg/ws/jobs/j1",
    )
    subject, text = rules.email_text(body)
    assert "j1" in subject and "Failed" in subject
    assert "Error: UserError: exit 3" in text
    assert "Link: https://c.example/studio/ws/s/rg/ws/jobs/j1" in text
