"""Notifications on job events (issue 29 item 4), in Azure ML's ``notification_setting`` shape.

The job YAML's ``notification_setting: {emails: [...], email_on: [job_completed, job_failed,
job_cancelled], webhooks: {NAME: {url: ..., event_type: ...}}}`` (Azure's REST form is the job's
``notificationSetting: {emails, emailOn: [JobCompleted, ...], webhooks: {NAME: {webhookType,
eventType}}}``; Azure's webhooks name no URL — an Azure DevOps hook is found by its type — so a
cloudlet webhook adds ``url``). The pure rules: the setting's model, which deliveries a final status
makes, a webhook body's HMAC-SHA256 signature, the bounded exponential backoff, and the email's text.
No secret is ever part of the job document: the signing secrets are the workspace's or the server's
(``webhook_secrets``, docs/observability.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cloudlet.domain.jobs.job_status import JobStatus

# Azure's EmailNotificationEnableType values, and the YAML's snake-case names for them.
EVENTS: dict[str, str] = {
    "job_completed": "JobCompleted",
    "job_failed": "JobFailed",
    "job_cancelled": "JobCancelled",
}
_BY_STATUS = {
    JobStatus.COMPLETED: "job_completed",
    JobStatus.FAILED: "job_failed",
    JobStatus.CANCELED: "job_cancelled",
}
MAX_EMAILS_CHARS = 499  # Azure's limit: the recipients joined with commas
MAX_WEBHOOKS = 10
# "sha256=<hex>", GitHub's form; during a secret's rotation "sha256=<new>,sha256=<old>" (Stripe's).
SIGNATURE_HEADER = "X-Cloudlet-Signature-256"
EVENT_HEADER = "X-Cloudlet-Event"
MAX_ATTEMPTS = 6
FIRST_RETRY_S = 2.0
MAX_RETRY_S = 300.0
_EMAIL = re.compile(r"[^@\s,<>]+@[^@\s,<>]+")


def event_name(value: Any) -> str:
    """An event in its YAML form from either form (``JobFailed``, ``job_failed``, ``jobfailed``)."""
    text = str(value).strip().lower().replace("_", "").replace("canceled", "cancelled")
    for name in EVENTS:
        if name.replace("_", "") == text:
            return name
    raise ValueError(f"unknown event {value!r}; use one of: {', '.join(EVENTS)}")


def event_of(status: JobStatus | str) -> str | None:
    """The event a job reaching STATUS raises (None for a status that is not final)."""
    return _BY_STATUS.get(JobStatus(status))


def check_url(url: str) -> str:
    """A webhook's URL: http or https only (no file:, gopher: or other schemes a client may follow)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest or rest.startswith("/"):
        raise ValueError(f"webhook url must be an http:// or https:// URL, not {url[:80]!r}")
    return url


class Webhook(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    url: str = Field(max_length=2048)
    # Azure's ``event_type`` names one event; ``None`` sends every final event.
    event_type: str | None = None
    webhook_type: str | None = None  # Azure's discriminator ("AzureDevOps"), kept as given

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)

    @field_validator("event_type", mode="before")
    @classmethod
    def _event(cls, value: Any) -> Any:
        return None if value is None else event_name(value)


class NotificationSetting(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    emails: list[str] = Field(default_factory=list)
    email_on: list[str] = Field(default_factory=list)
    webhooks: dict[str, Webhook] = Field(default_factory=dict)

    @field_validator("emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        if len(",".join(value)) > MAX_EMAILS_CHARS:
            raise ValueError(f"emails may take {MAX_EMAILS_CHARS} characters in all, joined with commas")
        for address in value:
            if not _EMAIL.fullmatch(address):
                raise ValueError(f"{address[:80]!r} is not an email address")
        return value

    @field_validator("email_on", mode="before")
    @classmethod
    def _email_on(cls, value: Any) -> Any:
        return [event_name(v) for v in value] if isinstance(value, list) else value

    @field_validator("webhooks")
    @classmethod
    def _webhooks(cls, value: dict[str, Webhook]) -> dict[str, Webhook]:
        if len(value) > MAX_WEBHOOKS:
            raise ValueError(f"at most {MAX_WEBHOOKS} webhooks")
        return value


def planned(setting: dict[str, Any] | None, status: JobStatus | str) -> list[tuple[str, str, str]]:
    """The deliveries (kind ``email`` or ``webhook``, target, event) a job with the stored SETTING
    makes on reaching STATUS: one email to each recipient when ``email_on`` names the event (Azure
    sends none without it), one call of each webhook whose ``event_type`` is the event or unset."""
    event = event_of(status)
    if not setting or event is None:
        return []
    found = []
    if event in setting.get("email_on", []):
        found += [("email", address, event) for address in setting.get("emails", [])]
    for name, hook in sorted((setting.get("webhooks") or {}).items()):
        if hook.get("event_type") in (None, event):
            found.append(("webhook", name, event))
    return found


def sign(secret: bytes, body: bytes) -> str:
    """The signature header's value for BODY: ``sha256=`` and the HMAC-SHA256 of it, in hex."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_header(keys: list[bytes], body: bytes) -> str | None:
    """The signature header's value for BODY signed with each of KEYS (comma-separated, the
    current key's first); None when there is no key (the body is sent unsigned)."""
    return ",".join(sign(key, body) for key in keys) or None


def signature_ok(secret: bytes, body: bytes, header: str) -> bool:
    """Whether one of HEADER's signatures is BODY's with SECRET (a receiver's check, in constant
    time per entry)."""
    expected = sign(secret, body)
    return any(hmac.compare_digest(expected, entry.strip()) for entry in header.split(","))


def next_try(attempts: int, now: float) -> float | None:
    """When to try again after ATTEMPTS failed tries (2 s, 4 s, 8 s … at most 5 min apart), or
    None once ``MAX_ATTEMPTS`` tries have failed: the delivery is then given up."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return now + min(FIRST_RETRY_S * 2 ** (attempts - 1), MAX_RETRY_S)


def event_body(payload: dict[str, Any], event: str, link: str) -> dict[str, Any]:
    """What a webhook receives (JSON), and what the email says, for the job PAYLOAD describes."""
    return {"event": event, "eventType": EVENTS[event], **payload, "link": link}


def email_text(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, plain-text body) of the email for the event BODY (``event_body``)."""
    subject = f"[cloudlet] job {body['job']} {body['status']}"
    lines = [
        f"Job: {body['job']}",
        f"Status: {body['status']}",
        f"Workspace: {body['workspace']}",
    ]
    error = body.get("error")
    if error:
        lines.append(f"Error: {error.get('code', '')}: {error.get('message', '')}".rstrip(": "))
    if body.get("message"):
        lines.append(f"Message: {body['message']}")
    lines.append(f"Link: {body['link']}")
    return subject, "\n".join(lines) + "\n"
