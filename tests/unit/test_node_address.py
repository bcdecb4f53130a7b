"""Where a node is reached: the address its agent reported, else its registration's peer."""

from __future__ import annotations

from cloudlet.domain.compute.node_address import node_address, reported_address


def test_node_address_is_what_the_agent_reported() -> None:
    assert node_address({"address": "10.1.2.3"}) == "10.1.2.3"
    assert node_address({}) is None and node_address(None) is None and node_address({"address": ""}) is None


def test_registration_stores_the_agents_address_else_the_peer() -> None:
    assert reported_address("10.0.0.5", "192.168.1.9") == "10.0.0.5"
    assert reported_address(None, "192.168.1.9") == "192.168.1.9"
    assert reported_address("  ", "192.168.1.9") == "192.168.1.9"
    assert reported_address(None, None) is None
