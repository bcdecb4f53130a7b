"""Unit tests for management locks over plain data (pure)."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.locks import (
    Lock,
    LockLevel,
    WriteKind,
    applies_to,
    check_write,
    scaling_block,
    scope_kind,
    scope_name,
)
from cloudlet.domain.errors import CloudletError

SUB = "/subscriptions/0000-sub"
RG = f"{SUB}/resourceGroups/rg1"
WS = f"{RG}/providers/Microsoft.MachineLearningServices/workspaces/ws1"
COMPUTE_A = f"{WS}/computes/a"
COMPUTE_AB = f"{WS}/computes/ab"

ALL_KINDS = list(WriteKind)
NON_DELETE = [k for k in WriteKind if k is not WriteKind.DELETE]


def lock(scope: str, level: LockLevel = LockLevel.READ_ONLY, name: str = "keep") -> Lock:
    return Lock(name=name, level=level, scope=scope)


def blocked(locks: list[Lock], resource_id: str, kind: WriteKind) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        check_write(locks, resource_id, kind)
    return info.value


# --- scope helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "kind"),
    [
        (SUB, "subscription"),
        (RG, "resource group"),
        (WS, "workspace"),
        (COMPUTE_A, "compute"),
        (RG.upper() + "/", "resource group"),
    ],
)
def test_scope_kind(scope: str, kind: str) -> None:
    assert scope_kind(scope) == kind


@pytest.mark.parametrize(
    ("scope", "name"), [(SUB, "0000-sub"), (RG, "rg1"), (WS + "/", "ws1"), (COMPUTE_A, "a")]
)
def test_scope_name(scope: str, name: str) -> None:
    assert scope_name(scope) == name


@pytest.mark.parametrize(
    ("scope", "resource", "expected"),
    [
        (COMPUTE_A, COMPUTE_A, True),
        (COMPUTE_A + "/", COMPUTE_A, True),
        (COMPUTE_A.upper(), COMPUTE_A, True),
        (COMPUTE_A, COMPUTE_AB, False),
        (COMPUTE_AB, COMPUTE_A, False),
        (WS, COMPUTE_A, True),
        (RG, COMPUTE_A, True),
        (SUB, COMPUTE_A, True),
        (COMPUTE_A, WS, False),
        (f"{RG}/providers/Microsoft.MachineLearningServices/workspaces/ws", COMPUTE_A, False),
        (f"{SUB}/resourceGroups/rg", COMPUTE_A, False),
    ],
)
def test_applies_to(scope: str, resource: str, expected: bool) -> None:
    assert applies_to(lock(scope), resource) is expected


# --- check_write -----------------------------------------------------------------------------


def test_no_locks_allows_everything() -> None:
    for kind in ALL_KINDS:
        check_write([], COMPUTE_A, kind)


@pytest.mark.parametrize("kind", NON_DELETE)
def test_can_not_delete_allows_other_writes(kind: WriteKind) -> None:
    check_write([lock(COMPUTE_A, LockLevel.CAN_NOT_DELETE)], COMPUTE_A, kind)


def test_can_not_delete_blocks_delete() -> None:
    error = blocked([lock(COMPUTE_A, LockLevel.CAN_NOT_DELETE, "no-del")], COMPUTE_A, WriteKind.DELETE)
    assert error.code == "ScopeLocked"
    assert error.status == 409
    assert error.target == COMPUTE_A
    assert error.message == (
        "'a' cannot be deleted: CanNotDelete lock 'no-del' on compute 'a'. "
        "Remove the lock first (cloudlet lock delete -n no-del …)."
    )
    assert error.details == [{"code": "ScopeLocked", "lock": "no-del", "scope": COMPUTE_A}]


@pytest.mark.parametrize(
    ("kind", "verb"),
    [
        (WriteKind.CREATE, "created"),
        (WriteKind.UPDATE, "changed"),
        (WriteKind.DELETE, "deleted"),
        (WriteKind.ACTION, "changed"),
    ],
)
def test_read_only_blocks_every_write(kind: WriteKind, verb: str) -> None:
    error = blocked([lock(COMPUTE_A, LockLevel.READ_ONLY, "frozen")], COMPUTE_A, kind)
    assert error.code == "ScopeLocked"
    assert error.status == 409
    assert f"'a' cannot be {verb}: ReadOnly lock 'frozen' on compute 'a'" in error.message
    assert "Remove the lock first (cloudlet lock delete -n frozen" in error.message


@pytest.mark.parametrize(
    ("scope", "where"),
    [(WS, "workspace 'ws1'"), (RG, "resource group 'rg1'"), (SUB, "subscription '0000-sub'")],
)
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_read_only_is_inherited_by_computes(scope: str, where: str, kind: WriteKind) -> None:
    error = blocked([lock(scope, name="up")], COMPUTE_A, kind)
    assert f"ReadOnly lock 'up' on {where}" in error.message
    assert error.target == COMPUTE_A
    assert error.details[0]["scope"] == scope


@pytest.mark.parametrize("scope", [WS, RG, SUB])
def test_can_not_delete_is_inherited_by_computes(scope: str) -> None:
    locks = [lock(scope, LockLevel.CAN_NOT_DELETE)]
    blocked(locks, COMPUTE_A, WriteKind.DELETE)
    check_write(locks, COMPUTE_A, WriteKind.UPDATE)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_lock_on_another_compute_does_not_apply(kind: WriteKind) -> None:
    check_write([lock(f"{WS}/computes/other")], COMPUTE_A, kind)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_prefix_does_not_confuse_a_with_ab(kind: WriteKind) -> None:
    check_write([lock(COMPUTE_A)], COMPUTE_AB, kind)
    check_write([lock(COMPUTE_AB)], COMPUTE_A, kind)


def test_lock_on_compute_does_not_block_its_workspace() -> None:
    check_write([lock(COMPUTE_A)], WS, WriteKind.DELETE)


def test_lock_in_another_workspace_or_group_does_not_apply() -> None:
    other_ws = f"{RG}/providers/Microsoft.MachineLearningServices/workspaces/ws1-dev"
    other_rg = f"{SUB}/resourceGroups/rg10"
    check_write([lock(other_ws), lock(other_rg)], COMPUTE_A, WriteKind.DELETE)


def test_matching_is_case_insensitive() -> None:
    blocked([lock(WS.upper())], COMPUTE_A, WriteKind.UPDATE)
    blocked([lock(WS)], COMPUTE_A.upper(), WriteKind.UPDATE)


def test_first_applicable_lock_is_reported() -> None:
    locks = [
        lock(f"{WS}/computes/other", name="elsewhere"),
        lock(RG, LockLevel.CAN_NOT_DELETE, name="rg-nodelete"),
        lock(WS, LockLevel.READ_ONLY, name="ws-readonly"),
    ]
    assert "'ws-readonly'" in blocked(locks, COMPUTE_A, WriteKind.UPDATE).message
    assert "'rg-nodelete'" in blocked(locks, COMPUTE_A, WriteKind.DELETE).message


def test_trailing_slash_on_resource() -> None:
    error = blocked([lock(COMPUTE_A)], COMPUTE_A + "/", WriteKind.UPDATE)
    assert error.message.startswith("'a' cannot be changed")


# --- scaling_block ---------------------------------------------------------------------------


@pytest.mark.parametrize("level", list(LockLevel))
@pytest.mark.parametrize(("scope", "where"), [(RG, "resource group 'rg1'"), (SUB, "subscription '0000-sub'")])
def test_lock_above_workspace_blocks_scaling(level: LockLevel, scope: str, where: str) -> None:
    block = scaling_block([lock(scope, level, "rg-lock")], WS)
    assert block is not None
    assert block.reason == f"scaling blocked by {level.value} lock 'rg-lock' on {where}"
    assert block.lock == "rg-lock"
    assert block.scope == scope
    assert "move the lock to the workspace or to individual computes" in block.fix
    assert block.to_dict() == {"reason": block.reason, "lock": "rg-lock", "scope": scope, "fix": block.fix}


@pytest.mark.parametrize("level", list(LockLevel))
@pytest.mark.parametrize("scope", [WS, COMPUTE_A])
def test_workspace_or_compute_lock_does_not_block_scaling(level: LockLevel, scope: str) -> None:
    assert scaling_block([lock(scope, level)], WS) is None


def test_lock_on_another_resource_group_does_not_block_scaling() -> None:
    assert scaling_block([lock(f"{SUB}/resourceGroups/rg10")], WS) is None
    assert scaling_block([lock("/subscriptions/other-sub")], WS) is None


def test_no_locks_no_block() -> None:
    assert scaling_block([], WS) is None


def test_scaling_block_skips_lower_locks_to_find_one_above() -> None:
    block = scaling_block([lock(WS, name="ws"), lock(COMPUTE_A, name="c"), lock(RG, name="rg")], WS)
    assert block is not None and block.lock == "rg"


@pytest.mark.parametrize("rg_name", ["workspaces", "computes"])
def test_resource_group_named_like_a_segment_still_blocks_scaling(rg_name: str) -> None:
    rg = f"{SUB}/resourceGroups/{rg_name}"
    ws = f"{rg}/providers/Microsoft.MachineLearningServices/workspaces/ws1"
    assert scope_kind(rg) == "resource group"
    assert scaling_block([lock(rg)], ws) is not None
