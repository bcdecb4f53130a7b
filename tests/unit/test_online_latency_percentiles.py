"""The latency percentiles the studio's Monitoring tab draws (``services/endpoints/online_metrics``):
nearest-rank p50/p95 over the samples after a time, the window bounded."""

from __future__ import annotations

from cloudlet.services.endpoints import online_metrics


def test_nearest_rank_over_the_samples_after_since() -> None:
    samples = [(float(t), float(ms)) for t, ms in enumerate(range(1, 101), start=1)]  # at t: t ms
    shown = online_metrics.percentiles(samples, since=0.0)
    assert shown == {"p50_ms": 50.0, "p95_ms": 95.0, "sampled": 100}
    later = online_metrics.percentiles(samples, since=90.0)  # 91..100
    assert later == {"p50_ms": 95.0, "p95_ms": 100.0, "sampled": 10}
    assert online_metrics.percentiles([(1.0, 7.0)], since=0.0) == {"p50_ms": 7.0, "p95_ms": 7.0, "sampled": 1}


def test_no_sample_is_none_and_the_window_is_bounded() -> None:
    assert online_metrics.percentiles([(1.0, 5.0)], since=1.0) == {
        "p50_ms": None,
        "p95_ms": None,
        "sampled": 0,
    }
    window = online_metrics.latency_samples()
    for i in range(online_metrics.RECENT_SAMPLES + 10):
        window.append((float(i), 1.0))
    assert len(window) == online_metrics.RECENT_SAMPLES
    assert window[0][0] == 10.0
