"""A location's capacity: the engine's word when its provider owns its capacity, else the stored
capacity times its overcommit; and how many nodes of a size fit in what is left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cloudlet.providers.base import Capacity, CapacityOwner, NodeHandle, NodeRequest, ProviderError
from cloudlet.providers.capacity import (
    READING_STALE_S,
    LocationCapacity,
    ask_capacity,
    free_nodes,
    location_capacity,
)


@dataclass
class Row:
    capacity: dict[str, Any] = field(default_factory=dict)


class PlainProvider:
    kind = "plain"

    def create(self, req: NodeRequest) -> NodeHandle:
        return NodeHandle(req.node_id)

    def terminate(self, handle: NodeHandle) -> None:
        pass

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        return []


class Engine(PlainProvider):
    """An engine that owns its capacity (a Slurm partition, a Kubernetes namespace's quota)."""

    def __init__(self, offer: Capacity | None) -> None:
        self.offer = offer

    def capacity(self) -> Capacity:
        if self.offer is None:
            raise ProviderError("sinfo timed out")
        return self.offer


STORED = Row({"vcpus": 64, "memory_gb": 256, "gpus": 2, "overcommit": 8.0})


def test_stored_capacity_is_scaled_by_its_overcommit() -> None:
    assert ask_capacity(PlainProvider(), 0.0) is None  # it does not own its capacity: not asked
    got = location_capacity(STORED, None)
    assert got == LocationCapacity(512.0, 2048.0, 2.0, "location")
    assert not isinstance(PlainProvider(), CapacityOwner)


def test_no_overcommit_means_one_and_no_location_means_nothing() -> None:
    assert location_capacity(Row({"vcpus": 8}), None).vcpus == 8.0
    assert location_capacity(None, None) == LocationCapacity(0.0, 0.0, 0.0, "location")


def test_an_engine_that_owns_its_capacity_is_asked_instead() -> None:
    engine = Engine(Capacity(vcpus=96, memory_gb=384, gpus=4))
    assert isinstance(engine, CapacityOwner)
    reading = ask_capacity(engine, 100.0)
    assert location_capacity(STORED, reading, 100.0) == LocationCapacity(96, 384, 4, "provider")


def test_an_engine_that_stopped_answering_is_not_trusted() -> None:
    reading = ask_capacity(Engine(Capacity(vcpus=96, memory_gb=384)), 100.0)
    got = location_capacity(STORED, reading, 100.0 + READING_STALE_S + 1)
    assert got.source == "location" and got.vcpus == 512.0 and "has not said" in got.note


def test_an_engine_that_cannot_say_falls_back_to_the_stored_capacity_and_says_why() -> None:
    got = location_capacity(STORED, ask_capacity(Engine(None), 5.0), 5.0)
    assert got.source == "location" and got.vcpus == 512.0 and "sinfo timed out" in got.note
    _, reason = free_nodes(got, 0, 4, "lab")
    assert "sinfo timed out" in reason


def test_free_nodes_counts_whole_nodes_in_what_is_left() -> None:
    capacity = LocationCapacity(32.0, 0.0, 0.0, "location")
    assert free_nodes(capacity, 20, 4, "lab") == (3, "location lab capacity 20/32 vCPUs in use")
    assert free_nodes(capacity, 40, 4, "lab")[0] == 0  # over: none, never negative
    assert free_nodes(capacity, 0, 0, "lab")[0] == 0
    engine = LocationCapacity(8.0, 0.0, 0.0, "provider")
    assert free_nodes(engine, 0, 4, "hpc") == (
        2,
        "location hpc capacity 0/8 vCPUs in use (as its provider reports)",
    )
