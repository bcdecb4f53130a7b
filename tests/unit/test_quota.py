"""Unit tests for core quota checks and usage reports (pure)."""

from __future__ import annotations

import pytest

from cloudlet.domain.compute.quota import (
    TOTAL_DEDICATED,
    TOTAL_LOW_PRIORITY,
    CoreHolder,
    CoreRequest,
    QuotaLimits,
    Tier,
    check_request,
    usage_report,
)
from cloudlet.domain.errors import CloudletError

DSV2 = "standardDSv2Family"
NC = "standardNCFamily"

LIMITS = QuotaLimits(families={DSV2: 24, NC: 0}, total_dedicated=100, total_low_priority=10)


def holder(
    compute: str,
    cores: int,
    *,
    family: str = DSV2,
    tier: Tier = Tier.DEDICATED,
    state: str = "Running",
    workspace: str = "ws",
) -> CoreHolder:
    return CoreHolder(
        compute=compute, workspace=workspace, family=family, tier=tier, cores=cores, state=state
    )


def request(
    compute: str = "new",
    *,
    nodes: int = 1,
    cores_per_node: int = 4,
    family: str = DSV2,
    tier: Tier = Tier.DEDICATED,
    reason: str = "min_instances",
) -> CoreRequest:
    return CoreRequest(
        compute=compute, family=family, tier=tier, cores_per_node=cores_per_node, nodes=nodes, reason=reason
    )


def refusal(limits: QuotaLimits, holders: list[CoreHolder], req: CoreRequest) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        check_request(limits, holders, req)
    assert info.value.status == 400
    return info.value


# --- check_request ---------------------------------------------------------------------------


def test_request_cores() -> None:
    assert request(nodes=3, cores_per_node=8).cores == 24


def test_fits_in_empty_pool() -> None:
    check_request(LIMITS, [], request(nodes=6))  # exactly the family limit


def test_fits_exactly_alongside_holders() -> None:
    check_request(LIMITS, [holder("ci1", 4), holder("cpu-cluster", 12)], request(nodes=2))


def test_family_limit_message_names_holders() -> None:
    holders = [holder("ci1", 4, state="Stopped"), holder("cpu-cluster", 12)]
    error = refusal(LIMITS, holders, request("big", nodes=8))
    assert error.code == "ClusterMinNodesExceedCoreQuota"
    assert error.target == "min_instances"
    assert "min_instances 8 × 4 cores > 24 − 16 used (ci1 stopped: 4, cpu-cluster: 12)" in error.message
    assert f"in quota {DSV2}" in error.message
    assert "free cores (delete or shrink a holder) or raise the quota" in error.message
    assert f"`cloudlet quota set --name {DSV2} --limit N`" in error.message
    assert error.details == [{"quota": DSV2, "limit": 24, "used": 16, "requested": 32}]


def test_only_stopped_state_is_shown() -> None:
    holders = [
        holder("a", 4, state="Running"),
        holder("b", 4, state="STOPPED"),
        holder("c", 4, state="Failed"),
    ]
    error = refusal(LIMITS, holders, request(nodes=4))
    assert "(a: 4, b stopped: 4, c: 4)" in error.message


def test_no_holders_no_parentheses() -> None:
    error = refusal(LIMITS, [], request(nodes=7))
    assert "min_instances 7 × 4 cores > 24 − 0 used in quota" in error.message
    assert "(" not in error.message.split(" in quota")[0]


def test_total_dedicated_limit_enforced_across_families() -> None:
    limits = QuotaLimits(
        families={DSV2: 100, "standardESv3Family": 100}, total_dedicated=20, total_low_priority=0
    )
    holders = [holder("mem", 16, family="standardESv3Family")]
    error = refusal(limits, holders, request(nodes=2))  # 8 cores: family fine, total 16+8 > 20
    assert f"in quota {TOTAL_DEDICATED}" in error.message
    assert "> 20 − 16 used (mem: 16)" in error.message
    assert error.details[0]["quota"] == TOTAL_DEDICATED


def test_family_checked_before_total() -> None:
    limits = QuotaLimits(families={DSV2: 8}, total_dedicated=8, total_low_priority=0)
    error = refusal(limits, [holder("x", 4)], request(nodes=2))
    assert error.details[0]["quota"] == DSV2


def test_other_family_holders_do_not_count_against_family() -> None:
    holders = [holder("mem", 50, family="standardESv3Family")]
    check_request(LIMITS, holders, request(nodes=6))


def test_zero_limit_family_says_ask_for_an_increase() -> None:
    error = refusal(LIMITS, [], request(family=NC, cores_per_node=6, reason="instance"))
    assert error.code == "ComputeExceedsCoreQuota"
    assert error.target == "size"
    assert "instance needs 6 cores > 0 − 0 used" in error.message
    assert f"{NC} has no quota here (GPU and special series start at 0): ask for an increase" in error.message
    assert f"--name {NC} --limit N" in error.message


def test_family_missing_from_limits_counts_as_zero() -> None:
    error = refusal(LIMITS, [], request(family="standardNDFamily"))
    assert "ask for an increase" in error.message
    assert LIMITS.family_limit("standardNDFamily") == 0


def test_non_min_instances_reason_targets_size() -> None:
    error = refusal(LIMITS, [holder("a", 24)], request(reason="resize", nodes=1))
    assert error.code == "ComputeExceedsCoreQuota"
    assert error.target == "size"
    assert error.message.startswith("resize needs 4 cores > 24 − 24 used (a: 24)")


def test_own_holding_is_excluded_on_update() -> None:
    holders = [holder("cpu-cluster", 20), holder("ci1", 4)]
    # cpu-cluster asking for 20 cores fits alongside ci1: its own 20 held cores are not counted.
    check_request(LIMITS, holders, request("cpu-cluster", nodes=5))
    error = refusal(LIMITS, holders, request("cpu-cluster", nodes=6))
    assert "24 − 4 used (ci1: 4)" in error.message
    assert "cpu-cluster:" not in error.message


def test_own_holding_in_another_family_is_excluded_on_size_change() -> None:
    limits = QuotaLimits(
        families={DSV2: 24, "standardESv3Family": 24}, total_dedicated=30, total_low_priority=0
    )
    holders = [holder("c", 24, family="standardESv3Family")]
    check_request(limits, holders, request("c", nodes=6))


@pytest.mark.parametrize("family", [DSV2, NC])
def test_low_priority_uses_only_low_priority_total(family: str) -> None:
    # Family (even a zero one) and dedicated totals are ignored; dedicated holders don't count.
    limits = QuotaLimits(families={DSV2: 0, NC: 0}, total_dedicated=0, total_low_priority=16)
    holders = [holder("dedicated-one", 500, family=family), holder("lp", 8, tier=Tier.LOW_PRIORITY)]
    check_request(limits, holders, request(family=family, tier=Tier.LOW_PRIORITY, nodes=2))


def test_low_priority_over_total_refused() -> None:
    holders = [holder("lp", 8, tier=Tier.LOW_PRIORITY), holder("ded", 8)]
    error = refusal(LIMITS, holders, request(tier=Tier.LOW_PRIORITY, nodes=1))
    assert f"in quota {TOTAL_LOW_PRIORITY}" in error.message
    assert "> 10 − 8 used (lp: 8)" in error.message
    assert "ded" not in error.message


def test_low_priority_holders_do_not_count_against_dedicated() -> None:
    holders = [holder("lp", 1000, tier=Tier.LOW_PRIORITY)]
    check_request(LIMITS, holders, request(nodes=6))


def test_zero_core_holders_ignored_in_check() -> None:
    holders = [holder("idle-cluster", 0), holder("ci1", 4)]
    error = refusal(LIMITS, holders, request(nodes=6))
    assert "(ci1: 4)" in error.message
    assert "idle-cluster" not in error.message


def test_zero_core_request_always_fits() -> None:
    check_request(LIMITS, [holder("a", 24)], request(nodes=0))


# --- usage_report ----------------------------------------------------------------------------


def test_usage_report_empty() -> None:
    lines = usage_report(LIMITS, [])
    assert [(line.name, line.kind, line.current_value, line.limit) for line in lines] == [
        (TOTAL_DEDICATED, "total_dedicated", 0, 100),
        (TOTAL_LOW_PRIORITY, "total_low_priority", 0, 10),
        (DSV2, "family", 0, 24),
        (NC, "family", 0, 0),
    ]
    assert all(line.holders == [] for line in lines)


def test_usage_report_totals_and_families_with_holders() -> None:
    ci1 = holder("ci1", 4, state="Stopped")
    cluster = holder("cpu-cluster", 12, workspace="other")
    gpu = holder("gpu", 6, family=NC)
    extra = holder("mem", 8, family="standardESv3Family")
    lp = holder("lp", 2, tier=Tier.LOW_PRIORITY)
    idle = holder("idle", 0)
    lines = {line.name: line for line in usage_report(LIMITS, [ci1, cluster, gpu, extra, lp, idle])}

    assert list(lines) == [
        TOTAL_DEDICATED,
        TOTAL_LOW_PRIORITY,
        DSV2,
        "standardESv3Family",
        NC,
    ]  # families sorted
    assert lines[TOTAL_DEDICATED].current_value == 30
    assert lines[TOTAL_DEDICATED].holders == [ci1, cluster, gpu, extra]
    assert lines[TOTAL_LOW_PRIORITY].current_value == 2
    assert lines[TOTAL_LOW_PRIORITY].holders == [lp]
    assert lines[DSV2].current_value == 16
    assert lines[DSV2].holders == [ci1, cluster]
    assert lines[NC].current_value == 6
    assert lines[NC].limit == 0
    # A family with holders but no configured limit still shows up, at limit 0.
    assert (lines["standardESv3Family"].current_value, lines["standardESv3Family"].limit) == (8, 0)


def test_usage_report_low_priority_not_in_families() -> None:
    lines = {line.name: line for line in usage_report(LIMITS, [holder("lp", 4, tier=Tier.LOW_PRIORITY)])}
    assert lines[DSV2].current_value == 0
    assert lines[DSV2].holders == []


def test_usage_report_ignores_zero_core_holders() -> None:
    lines = usage_report(LIMITS, [holder("idle", 0, family="standardFXFamily")])
    assert "standardFXFamily" not in {line.name for line in lines}
    assert all(line.holders == [] for line in lines)


def test_usage_line_to_dict() -> None:
    lines = {
        line.name: line for line in usage_report(LIMITS, [holder("ci1", 4, state="Stopped", workspace="w1")])
    }
    assert lines[DSV2].to_dict() == {
        "name": DSV2,
        "kind": "family",
        "current_value": 4,
        "limit": 24,
        "unit": "Cores",
        "holders": [{"compute": "ci1", "workspace": "w1", "cores": 4, "state": "Stopped"}],
    }


def test_usage_report_accepts_a_generator() -> None:
    lines = usage_report(LIMITS, (h for h in [holder("a", 4)]))
    assert lines[0].current_value == 4
    assert lines[2].current_value == 4
