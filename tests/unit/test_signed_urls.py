"""Signed references: valid until they expire, for their purpose only, and not forgeable."""

from __future__ import annotations

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import signed_urls

SECRET = "s3cret"


def test_a_reference_opens_what_it_was_signed_for() -> None:
    ref = signed_urls.sign(SECRET, "run-log", {"j": "job-1", "a": 2})
    claims = signed_urls.verify(SECRET, "run-log", ref)
    assert claims["j"] == "job-1" and claims["a"] == 2


@pytest.mark.parametrize(
    "broken",
    [
        lambda ref: signed_urls.verify(SECRET, "blob", ref),  # another purpose
        lambda ref: signed_urls.verify("other-secret", "run-log", ref),  # another installation
        lambda ref: signed_urls.verify(SECRET, "run-log", "e30" + ref[3:]),  # payload changed
        lambda ref: signed_urls.verify(SECRET, "run-log", ref.split(".")[0]),  # no signature
        lambda ref: signed_urls.verify(SECRET, "run-log", signed_urls.sign(SECRET, "run-log", {}, -1)),
    ],
)
def test_anything_else_is_refused(broken: object) -> None:
    ref = signed_urls.sign(SECRET, "run-log", {"j": "job-1"})
    with pytest.raises(CloudletError) as caught:
        broken(ref)  # type: ignore[operator]
    assert caught.value.status == 403
