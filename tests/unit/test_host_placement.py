"""Placing nodes on SSH hosts (domain/compute/host_placement.py) and reading a host's probe (pure)."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.host_placement import HostRoom, Slice, Total, place, total
from cloudlet.providers.ssh_hosts import HostError, check_facts, parse_facts


def room(key: str, cores: float = 8, memory: float = 32, *slices: Slice, usable: bool = True) -> HostRoom:
    return HostRoom(key, cores, memory, 0, tuple(slices), usable=usable, why_not="unreachable")


def test_nodes_spread_to_the_emptiest_host_then_the_first() -> None:
    hosts = [room("a", 8, 32, Slice("n1", 2, 8)), room("b"), room("c")]
    assert place(hosts, 2, 8).host == "b"


def test_a_slice_needs_free_cores_and_memory() -> None:
    hosts = [room("a", 4, 16, Slice("n1", 3, 4)), room("b", 4, 16, Slice("n2", 1, 14))]
    got = place(hosts, 2, 4)
    assert got.host is None and "a: 1 cores" in got.reason and "b: 3 cores and 2 GB free" in got.reason


def test_a_size_as_large_as_the_host_or_isolated_takes_it_whole_and_alone() -> None:
    busy, empty = room("a", 4, 16, Slice("n1", 1, 1)), room("b", 4, 16)
    whole = place([busy, empty], 4, 8)
    assert whole.host == "b" and whole.whole_host
    isolated = place([busy, empty], 1, 1, isolated=True)
    assert isolated.host == "b" and isolated.whole_host
    held = room("b", 4, 16, Slice("n2", 1, 1, whole_host=True))
    assert place([held], 1, 1).host is None


def test_an_unusable_host_is_named_with_why() -> None:
    got = place([room("a", usable=False)], 1, 1)
    assert got.host is None and "a: unreachable" in got.reason


PROBE = """os=Linux
arch=x86_64
home=/home/u
cores=16
mem_kb=65536000
python=/usr/bin/python3
python_version=3.11.2
init=none
gpu=NVIDIA A100-SXM4-40GB, 40960
gpu=NVIDIA A100-SXM4-40GB, 40960
"""


def test_probe_output_becomes_facts() -> None:
    facts = parse_facts(PROBE)
    assert (facts.cores, facts.memory_gb, facts.python_version) == (16, 62.5, (3, 11, 2))
    assert facts.gpus == ("NVIDIA A100-SXM4-40GB",) * 2 and facts.init == "none"
    check_facts(facts, "python3")


@pytest.mark.parametrize(
    ("change", "says"),
    [("os=Darwin", "Linux"), ("python_version=3.8.10", ">= 3.10"), ("python=", "no 'python3'")],
)
def test_a_host_that_cannot_run_the_agent_says_why(change: str, says: str) -> None:
    key = change.split("=", 1)[0]
    text = "\n".join(line for line in PROBE.splitlines() if not line.startswith(key + "=")) + "\n" + change
    with pytest.raises(HostError, match=says.replace("(", r"\(")):
        check_facts(parse_facts(text), "python3")


def test_a_locations_capacity_counts_each_usable_host() -> None:
    """Two hosts of 2 cores are 4 vCPUs (issue 24: reported as 2), however full they are; an
    unreachable host adds nothing."""
    two = [room("a", 2, 8, Slice("n1", 2, 8, whole_host=True)), room("b", 2, 8)]
    assert total(two) == Total(4, 16, 0, 2)
    assert total([*two, room("c", 16, 64, usable=False)]) == Total(4, 16, 0, 2)
    assert total([room("c", 16, 64, usable=False)]).hosts == 0
