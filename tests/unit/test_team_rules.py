"""The team document's pure rules (``domain/access/teams``): each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.access.teams import COMPUTE, LOCATION, TeamDocument, check_team
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access.identity import PRINCIPAL_NAME


def check(team: str = "vision", **doc: Any) -> Any:
    return check_team(team, TeamDocument.model_validate(doc), PRINCIPAL_NAME)


def target_of(team: str = "vision", **doc: Any) -> str | None:
    with pytest.raises(CloudletError) as caught:
        check(team, **doc)
    assert caught.value.status == 400
    return caught.value.target


def test_a_full_document() -> None:
    spec = check(
        description="the vision team",
        members=["alice", "bob"],
        shares=[
            {"location": "local", "share": 50, "borrow_limit": None},
            {"workspace": "ws1", "compute": "cpu-cluster", "share": 50, "borrow_limit": 8},
        ],
    )
    assert spec.members == ("alice", "bob")
    assert [(s.kind, s.name, s.workspace, s.share, s.borrow_limit) for s in spec.shares] == [
        (LOCATION, "local", None, 50.0, None),
        (COMPUTE, "cpu-cluster", "ws1", 50.0, 8.0),
    ]


@pytest.mark.parametrize(
    ("share", "target"),
    [
        ({"location": "local", "share": 0}, "shares[0].share"),
        ({"location": "local", "share": -1}, "shares[0].share"),
        ({"location": "local", "share": float("inf")}, "shares[0].share"),
        ({"location": "local", "share": float("nan")}, "shares[0].share"),
        ({"location": "local", "share": 1, "borrow_limit": -1}, "shares[0].borrow_limit"),
        ({"location": "local", "compute": "c", "workspace": "w", "share": 1}, "shares[0]"),
        ({"compute": "c", "share": 1}, "shares[0].workspace"),
        ({"location": "local", "workspace": "w", "share": 1}, "shares[0].workspace"),
        ({"share": 1}, "shares[0]"),
    ],
)
def test_bad_shares(share: dict[str, Any], target: str) -> None:
    assert target_of(shares=[share]) == target


def test_duplicates_and_names() -> None:
    assert target_of(shares=[{"location": "a", "share": 1}, {"location": "a", "share": 2}]) == "shares[1]"
    assert target_of(members=["alice", "alice"]) == "members[1]"
    assert target_of(members=["no body"]) == "members[0]"
    assert target_of("default") == "name"  # the team of users no team lists
    assert target_of("bad name") == "name"
    assert target_of("vision", name="other") == "name"


def test_types_are_strict() -> None:
    with pytest.raises(ValueError):
        TeamDocument.model_validate({"shares": [{"location": "l", "share": "50"}]})
    with pytest.raises(ValueError):
        TeamDocument.model_validate({"members": [], "colour": "red"})
