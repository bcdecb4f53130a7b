"""Workspace roles (I3): Owner, Contributor, Reader. Administrators are above every workspace."""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Role(StrEnum):
    READER = "Reader"
    CONTRIBUTOR = "Contributor"
    OWNER = "Owner"


class Access(IntEnum):
    READ = 1
    WRITE = 2
    MANAGE = 3


_GRANTS = {Role.READER: Access.READ, Role.CONTRIBUTOR: Access.WRITE, Role.OWNER: Access.MANAGE}


def allows(role: Role | None, needed: Access) -> bool:
    return role is not None and _GRANTS[role] >= needed


def parse_role(value: str) -> Role:
    for role in Role:
        if role.value.lower() == value.lower():
            return role
    raise ValueError(f"unknown role '{value}'; use Owner, Contributor or Reader")
