"""The administrator policy on SSH for compute instances (pure)."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.ssh_policy import SshPolicy, check_ssh_allowed, public_key_problem
from cloudlet.domain.errors import CloudletError


@pytest.mark.parametrize(
    "policy", [SshPolicy(), SshPolicy(workspace_allows=True), SshPolicy(installation_allows=True)]
)
def test_allowed_policies_accept_ssh(policy: SshPolicy) -> None:
    check_ssh_allowed(True, policy)


@pytest.mark.parametrize(
    ("policy", "who"),
    [
        (SshPolicy(installation_allows=False), "installation"),
        (SshPolicy(installation_allows=False, workspace_allows=True), "installation"),
        (SshPolicy(workspace_allows=False), "workspace"),
    ],
)
def test_forbidding_policy_refuses_ssh_naming_field_and_fix(policy: SshPolicy, who: str) -> None:
    with pytest.raises(CloudletError) as info:
        check_ssh_allowed(True, policy)
    error = info.value
    assert (error.status, error.code, error.target) == (
        403,
        "RequestDisallowedByPolicy",
        "ssh_public_access_enabled",
    )
    assert f"disabled by the {who} policy" in error.message
    assert "Set ssh_public_access_enabled: false" in error.message
    assert "allow_ssh_public_access: true" in error.message


def test_forbidding_policy_accepts_instances_without_ssh() -> None:
    check_ssh_allowed(False, SshPolicy(installation_allows=False))


def test_public_key_problems() -> None:
    assert public_key_problem("ssh-ed25519 AAAAC3Nza me@host") is None
    assert public_key_problem("ecdsa-sha2-nistp256 AAAA") is None
    assert "empty" in (public_key_problem("") or "")
    assert "never paste a private key" in (public_key_problem("-----BEGIN OPENSSH PRIVATE KEY-----") or "")
    assert "not an OpenSSH public key" in (public_key_problem("hello") or "")
