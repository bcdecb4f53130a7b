"""The studio's role gate (``studio/shell.can``) follows the services' role rules: a Reader is shown
no write control, a Contributor no management control, and only administrators see admin actions."""

from __future__ import annotations

import pytest

from cloudlet.domain.access.roles import Role
from cloudlet.services.core.context import Caller
from cloudlet.studio.shell import ACTIONS, can

WS = 7
WRITES = {
    "job.create",
    "job.cancel",
    "compute.create",
    "compute.act",
    "batch.write",
    "asset.write",
    "endpoint.write",
}


def caller(role: Role | None = None, is_admin: bool = False) -> Caller:
    return Caller(1, "someone", is_admin, {WS: role} if role else {})


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        (Role.READER, {"read"}),
        (Role.CONTRIBUTOR, {"read", *WRITES}),
        (Role.OWNER, {"read", *WRITES, "role.assign", "lock.write"}),
        (None, set()),
    ],
)
def test_a_role_sees_what_it_may_do_in_its_workspace(role: Role | None, allowed: set[str]) -> None:
    assert {action for action in ACTIONS if can(caller(role), action, WS)} == allowed
    assert not any(can(caller(role), action, WS + 1) for action in ACTIONS)  # another workspace


def test_administrators_see_everything_and_admin_actions_are_theirs_alone() -> None:
    assert all(can(caller(is_admin=True), action, WS) for action in ACTIONS)
    assert can(caller(is_admin=True), "quota.raise")
    assert not can(caller(Role.OWNER), "quota.raise", WS)


def test_an_unknown_action_is_an_error_not_a_silent_no() -> None:
    with pytest.raises(KeyError):
        can(caller(Role.OWNER), "job.cancle", WS)
