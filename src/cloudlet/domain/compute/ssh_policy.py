"""Whether SSH may be enabled on a compute instance (pure).

An administrator can forbid public SSH access for the whole installation or for one workspace
(setting ``allow_ssh_public_access``). A workspace can only narrow what the installation allows.
Creating or updating an instance with ``ssh_public_access_enabled: true`` under such a policy is
refused with an error that names the field and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudlet.domain.errors import CloudletError

SETTING = "allow_ssh_public_access"
KEY_PREFIXES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-", "sk-ssh-ed25519@", "sk-ecdsa-sha2-")


@dataclass(frozen=True)
class SshPolicy:
    installation_allows: bool = True
    workspace_allows: bool | None = None  # None: the workspace follows the installation

    @property
    def allowed(self) -> bool:
        return self.installation_allows and self.workspace_allows is not False

    @property
    def decided_by(self) -> str:
        return "installation" if not self.installation_allows else "workspace"


def check_ssh_allowed(ssh_public_access_enabled: bool, policy: SshPolicy) -> None:
    """Raise (403 RequestDisallowedByPolicy) when SSH is asked for and the policy forbids it."""
    if not ssh_public_access_enabled or policy.allowed:
        return
    raise CloudletError(
        code="RequestDisallowedByPolicy",
        message=(
            f"SSH access is disabled by the {policy.decided_by} policy ({SETTING}: false). "
            "Set ssh_public_access_enabled: false (use JupyterLab or the terminal through cloudlet), "
            f"or ask an administrator to set {SETTING}: true."
        ),
        target="ssh_public_access_enabled",
        status=403,
    )


def public_key_problem(key: str | None) -> str | None:
    """Why ``ssh_settings.ssh_key_value`` is not one OpenSSH public key line, or None."""
    line = (key or "").strip()
    if not line:
        return "ssh_settings.ssh_key_value is empty; paste your public key (e.g. ~/.ssh/id_ed25519.pub)"
    if "\n" in line or "PRIVATE KEY" in line:
        return "ssh_settings.ssh_key_value must be one public key line; never paste a private key"
    if not line.startswith(KEY_PREFIXES) or len(line.split()) < 2:
        return (
            "ssh_settings.ssh_key_value is not an OpenSSH public key; expected e.g. "
            "'ssh-ed25519 AAAA… me@host' (the contents of ~/.ssh/id_ed25519.pub)"
        )
    return None
