"""``bench/versus.py``'s headline extraction and its base/head judgement, on sample JSON shaped as
each benchmark writes it (``bench/results/<name>.json``); nothing is run."""

from typing import Any

from bench import versus


def _by_label(headlines: list[versus.Headline]) -> dict[str, float | None]:
    return {h.label: h.value for h in headlines}


def test_dispatch_headlines_read_the_cloudlet_side() -> None:
    data = {
        "cloudlet": {
            "warm": {"latency": {"p50_ms": 15.5, "p99_ms": 22.1}, "put": {"p50_ms": 5.1}, "failed": 0},
            "throughput": {"jobs_per_s": 116.1},
            "throughput_wide": {"jobs_per_s": 124.0},
            "queue": {"warm_dispatch_with_queue": {"p50_ms": 17.2}},
            "scale": {"from_zero_worst_s": 0.157},
        }
    }
    got = _by_label(versus.dispatch_headlines(data))
    assert got["warm dispatch p50 ms"] == 15.5
    assert got["warm dispatch p99 ms"] == 22.1
    assert got["tiny-job throughput, 2 nodes, jobs/s"] == 116.1
    assert got["tiny-job throughput, 4 nodes, jobs/s"] == 124.0
    assert got["warm dispatch failures"] == 0
    assert _by_label(versus.dispatch_headlines({}))["warm dispatch p50 ms"] is None  # a failed run


def test_mixed_load_headlines_per_worker_count() -> None:
    route = {"p99_ms": 170.0, "throughput_rps": 490.0, "errors": 1}
    run = {
        "workers": 2,
        "cloudlet": {key: dict(route) for key in (*versus.MIXED_ROUTES, "healthz")},
        "peer": {"compute_show": {"throughput_rps": 3000.0}},
    }
    got = _by_label(versus.mixed_load_headlines({"runs": [run]}))
    assert got["2w errors"] == 5  # four routes and the probe
    assert got["2w compute show p99 ms"] == 170.0
    assert got["2w job submit req/s"] == 490.0
    assert got["2w (peer) compute show req/s"] == 3000.0


def test_online_gateway_headlines_take_the_gateway_series() -> None:
    series: dict[str, Any] = {
        f"{m}/{p}/{c}": {"p50_ms": 2.0, "p99_ms": 4.0, "throughput_rps": 500.0 if p == "gateway" else 600.0}
        | {"errors": 0}
        for m in ("echo", "sklearn")
        for p in ("direct", "gateway", "haproxy")
        for c in versus.ONLINE_CLIENTS
    }
    got = _by_label(versus.online_gateway_headlines({"series": series}))
    assert got["echo gateway 8c req/s"] == 500.0
    assert got["sklearn (direct) 32c req/s"] == 600.0
    assert got["sklearn gateway 1c p99 ms"] == 4.0
    assert got["gateway errors"] == 0


def test_reconcile_store_headlines() -> None:
    data = {
        "launch_pass_ms": 4961.3,
        "placement_pass_ms": 5627.6,
        "steady_pass": {"p50_ms": 420.4, "max_ms": 494.1},
        "jobs_placed": 10000,
        "peak_rss_mib": 380.0,
    }
    got = _by_label(versus.reconcile_store_headlines(data))
    assert got["placement pass ms"] == 5627.6
    assert got["steady pass p50 ms"] == 420.4
    assert got["launch provider calls ms"] is None  # not in every version's JSON


def _reconcile(steady_p50: float) -> dict[str, Any]:
    return {"steady_pass": {"p50_ms": steady_p50}}


def test_a_worsening_within_the_runs_spread_is_noise() -> None:
    runs = {"base": [_reconcile(400), _reconcile(500)], "head": [_reconcile(480), _reconcile(520)]}
    row = next(r for r in versus.compare("reconcile_store", runs) if r.label == "steady pass p50 ms")
    assert row.base == [400, 500] and row.head == [480, 520]
    assert row.ratio is not None and abs(row.ratio - 500 / 450) < 1e-9
    assert row.spread == 1.25
    assert row.worse_beyond_noise is False


def test_a_worsening_past_the_spread_is_reported() -> None:
    runs = {"base": [_reconcile(400), _reconcile(410)], "head": [_reconcile(600), _reconcile(610)]}
    row = next(r for r in versus.compare("reconcile_store", runs) if r.label == "steady pass p50 ms")
    assert row.worse_beyond_noise is True
    assert "**yes**" in versus.table("reconcile_store", [row])


def test_higher_is_better_and_errors_from_zero() -> None:
    def run(rps: float, errors: int) -> dict[str, Any]:
        cloudlet = {key: {"throughput_rps": rps, "errors": 0} for key in versus.MIXED_ROUTES}
        cloudlet["compute_show"]["errors"] = errors
        return {"runs": [{"workers": 1, "cloudlet": cloudlet, "peer": {}}]}

    rows = {r.label: r for r in versus.compare("mixed_load", {"base": [run(200, 0)], "head": [run(300, 2)]})}
    assert rows["1w compute show req/s"].worse_beyond_noise is False  # faster
    assert rows["1w errors"].worse_beyond_noise is True  # 0 -> 2
    assert rows["1w errors"].ratio is None
    assert rows["1w (peer) compute show req/s"].base == []  # absent, not zero
