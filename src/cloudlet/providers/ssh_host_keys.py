"""SSH host-key checking for the SSH provider, with asyncssh's own hook
(``SSHClient.validate_host_public_key``) and the pure rules of ``domain/compute/host_keys.py``."""

from __future__ import annotations

from typing import Protocol

import asyncssh

from cloudlet.domain.compute import host_keys


class HostKeyRefused(Exception):
    """A host presented a key that is not the one it must (the message names the host and the fix)."""


class HostKeyStore(Protocol):
    """Where keys learned on first use are kept (``services/compute/host_keys.HostKeyBook``)."""

    def lookup(self, scope: str, address: str, port: int) -> tuple[str, str] | None: ...

    def record(self, scope: str, address: str, port: int, key: str) -> None: ...

    def refused(self, scope: str, address: str, port: int, key: str) -> None: ...


class MemoryHostKeys:
    """Keys learned on first use, for this process only (a provider made without a store)."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str, int], str] = {}

    def lookup(self, scope: str, address: str, port: int) -> tuple[str, str] | None:
        key = self._keys.get((scope, address, port))
        return (key, "") if key else None

    def record(self, scope: str, address: str, port: int, key: str) -> None:
        self._keys.setdefault((scope, address, port), host_keys.normalize(key))

    def refused(self, scope: str, address: str, port: int, key: str) -> None:
        return None


class HostKeyJudge:
    """asyncssh's ``validate_host_public_key`` hook: called for a key asyncssh did not already
    trust (pinned, known_hosts or recorded); the verdict is ``domain/compute/host_keys.decide``'s."""

    def __init__(
        self, where: str, fix: str, pinned: str | None, known: str | None, recorded: tuple[str, str] | None
    ) -> None:
        self.where, self.fix, self.pinned, self.known, self.recorded = where, fix, pinned, known, recorded
        self.verdict: host_keys.Verdict | None = None
        self.presented = ""

    def client(self) -> asyncssh.SSHClient:
        judge = self

        class _Client(asyncssh.SSHClient):
            def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
                return judge.validate(key)

        return _Client()

    def validate(self, key: asyncssh.SSHKey) -> bool:
        self.presented = host_keys.normalize(key.export_public_key("openssh").decode())
        recorded, since = self.recorded or (None, "")
        self.verdict = host_keys.decide(
            self.presented, self.where, self.fix, self.pinned, self.known, recorded, since
        )
        return self.verdict.trusted
