# PYTHONPATH=src python scripts/experiments/eta_forward/score2.py /tmp/etasim2/rec_*.json [--buckets V]
"""Throwaway (etasim2): the median error at submission (waited >= 1 min) of each combination."""
import math, json, statistics, sys
from cloudlet.domain.jobs.wait_estimate import HEAD_FRACTION, MAX_AHEAD_LOAD

CAP = 400


def st(x, load):
    return None if x is None else x / (1.0 - min(max(load, 0.0), MAX_AHEAD_LOAD))


def gmean(xs):
    return math.exp(sum(math.log(max(x, 1.0)) for x in xs) / len(xs))


def blend(rec, first, parts):
    """paced_start generalised: None if the first replay never starts, 0 if it starts now, the
    pool's pace at the head, else the geometric mean of the parts (a missing pace left out)."""
    if first is None:
        return None
    if first <= 0.0:
        return 0.0
    if rec["short"] <= HEAD_FRACTION * CAP and rec["pool"] is not None:
        return rec["pool"]
    xs = [p for p in parts if p is not None]
    return gmean(xs)


def variants(rec):
    r, f0, cls = rec["r"], rec["f0"], rec["cls"]
    rs = st(r, rec["ln"])  # today's replay, stretched
    sf = st(f0, rec["ln"])  # variant 1: the forward replay stretched (factors of now)
    se = st(f0, rec["le"])  # variant 2: factors at the estimated start
    # a forward replay that never started a job (horizon) while the static replay did: no estimate
    return {
        "today": blend(rec, rs, [rs, cls]),
        "fwd0": blend(rec, f0, [f0, cls]),
        "V1 fwd0*stretch": blend(rec, sf, [sf, cls]),
        "V1 raw (no blend)": sf,
        "V2 fwd0*stretch@start": blend(rec, se, [se, cls]),
        "V3 g(rs,f0,cls)": blend(rec, rs, [rs, f0, cls]),
        "V3 g(rs,f0)": blend(rec, rs, [rs, f0]),
        "V3 g(rs,sf,cls)": blend(rec, rs, [rs, sf, cls]),
        "V3 g(rs,sf)": blend(rec, rs, [rs, sf]),
        "V3 g(r,f0,cls)": blend(rec, r, [r, f0, cls]),
        "V3 g(rs,se,cls)": blend(rec, rs, [rs, se, cls]),
    }


def err(eta, wait):
    return abs(eta - wait) / wait if eta is not None and math.isfinite(eta) else math.inf


buckets = [(60, 600), (600, 3600), (3600, 4 * 3600), (4 * 3600, 12 * 3600), (12 * 3600, 1e12)]
args = [a for a in sys.argv[1:] if not a.startswith("--")]
show = sys.argv[sys.argv.index("--buckets") + 1] if "--buckets" in sys.argv else None
for path in args:
    if path == show:
        continue
    d = json.load(open(path))
    rows = [r for r in d["rows"] if r["wait"] >= 60]
    est = {}
    mism = 0
    for r in rows:
        rec = r["rec"]
        if rec is None:  # started on its first pass: today's 0-wait figure for every variant
            for k in est or variants({"r": 0, "f0": 0, "cls": None, "ln": 0, "le": 0, "short": 0, "pool": None}):
                est.setdefault(k, []).append(r["eta"])
            continue
        vs = variants(rec)
        t = vs["today"]
        t = rec["off"] + t if t is not None else math.inf
        if not (math.isclose(t, r["eta"], rel_tol=1e-9, abs_tol=1e-6) or (math.isinf(t) and math.isinf(r["eta"]))):
            mism += 1
        for k, v in vs.items():
            est.setdefault(k, []).append(rec["off"] + v if v is not None else math.inf)
    waits = [r["wait"] for r in rows]
    print(path, "n", len(rows), "today reproduced mismatches", mism, "wall", round(d["wall"], 1), "fwd_s", round(d["fwd_s"], 1))
    for k, e in est.items():
        errs = [err(x, w) for x, w in zip(e, waits)]
        ratios = [x / w for x, w in zip(e, waits)]
        within = sum(x <= 0.25 for x in errs) / len(errs)
        line = f"  {k:24s} err {statistics.median(errs)*100:5.1f} %  ratio {statistics.median(ratios):.2f}  within25 {within*100:4.1f} %  none {sum(math.isinf(x) for x in e)}"
        if show and k == show:
            for lo, hi in buckets:
                sel = [i for i, w in enumerate(waits) if lo <= w < hi]
                if sel:
                    line += f"\n      {lo/3600:5.2f}-{min(hi/3600, 999):5.0f} h n={len(sel):4d} err {statistics.median(errs[i] for i in sel)*100:5.1f} ratio {statistics.median(ratios[i] for i in sel):.2f}"
        print(line)
