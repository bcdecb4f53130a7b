"""The SSH host-key decision (domain/compute/host_keys.py): pinned → known_hosts → trust on first use."""

from __future__ import annotations

import base64
import hashlib

import pytest

from cloudlet.domain.compute import host_keys

KEY_A = "ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"A" * 36).decode()
KEY_B = "ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"B" * 36).decode()
WHERE, FIX = "u@10.0.0.1:22", "run `cloudlet location update -n lab --accept-host-key 10.0.0.1:22`"


def test_first_use_is_trusted_and_recorded() -> None:
    verdict = host_keys.decide(KEY_A, WHERE, FIX)
    assert verdict.trusted and verdict.record and verdict.source == "first_use"


def test_the_recorded_key_is_trusted_and_not_recorded_again() -> None:
    verdict = host_keys.decide(KEY_A + " a-comment", WHERE, FIX, recorded=KEY_A)
    assert verdict.trusted and not verdict.record and verdict.source == "recorded"


def test_a_changed_key_is_refused_naming_the_host_both_keys_and_the_fix() -> None:
    verdict = host_keys.decide(KEY_B, WHERE, FIX, recorded=KEY_A, first_seen="2026-12-01T10:00:00Z")
    assert not verdict.trusted and not verdict.record and verdict.source == "changed"
    assert verdict.error is not None
    for part in (WHERE, host_keys.fingerprint(KEY_A), host_keys.fingerprint(KEY_B), FIX, "2026-12-01"):
        assert part in verdict.error, part
    assert "no connection was made" in verdict.error


def test_a_pinned_key_wins_over_the_recorded_one() -> None:
    assert host_keys.decide(KEY_A, WHERE, FIX, pinned=KEY_A, recorded=KEY_B).trusted
    refused = host_keys.decide(KEY_B, WHERE, FIX, pinned=KEY_A)
    assert not refused.trusted and refused.source == "pinned" and not refused.record
    assert refused.error is not None and "host_key" in refused.error


def test_a_key_the_known_hosts_file_lacks_is_refused_and_never_learned() -> None:
    verdict = host_keys.decide(KEY_A, WHERE, FIX, known_hosts="/etc/cloudlet/known_hosts")
    assert not verdict.trusted and not verdict.record and verdict.source == "known_hosts"
    assert verdict.error is not None and "/etc/cloudlet/known_hosts" in verdict.error


def test_fingerprint_is_openssh_sha256() -> None:
    blob = base64.b64decode(KEY_A.split()[1])
    expected = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert host_keys.fingerprint(KEY_A + " comment") == f"SHA256:{expected}"


@pytest.mark.parametrize("bad", ["", "ssh-ed25519", "ssh-ed25519 not*base64", "not a key at all"])
def test_normalize_refuses_what_is_not_an_openssh_public_key(bad: str) -> None:
    with pytest.raises(ValueError):
        host_keys.normalize(bad)
