"""Who is calling and where: plain data passed from the API layer into services."""

from __future__ import annotations

from dataclasses import dataclass, field

from cloudlet.domain.access.roles import Access, Role, allows

ARM_PROVIDER = "Microsoft.MachineLearningServices"


@dataclass(frozen=True)
class Caller:
    principal_id: int
    name: str
    is_admin: bool
    roles: dict[int, Role] = field(default_factory=dict)  # workspace id → role
    # The API key behind the credential (directly, or the key a token was minted from): a token
    # minted by this caller carries it, so revoking the key ends the token too.
    key_id: str | None = None

    def can(self, workspace_id: int, needed: Access) -> bool:
        return self.is_admin or allows(self.roles.get(workspace_id), needed)


@dataclass(frozen=True)
class WorkspaceRef:
    subscription_id: str
    resource_group: str
    workspace: str

    @property
    def rg_scope(self) -> str:
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"

    @property
    def arm_id(self) -> str:
        return f"{self.rg_scope}/providers/{ARM_PROVIDER}/workspaces/{self.workspace}"

    def compute_id(self, name: str) -> str:
        return f"{self.arm_id}/computes/{name}"
