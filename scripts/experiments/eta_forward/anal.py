import json, math, statistics, sys
from cloudlet.domain.jobs.wait_estimate import paced_start
d = json.load(open(sys.argv[1])); v = sys.argv[2]
rows = [r for r in d["rows"] if r["wait"] >= 60 and r["rec"]]
buckets = [(60, 600), (600, 3600), (3600, 4*3600), (4*3600, 12*3600), (12*3600, 1e9)]
def est(r, kind):
    rec = r["rec"]
    if kind == "base": return r["eta"]
    f = rec[v]
    if f is None: return math.inf
    if kind == "raw": return rec["off"] + f
    p = paced_start(f, rec["short"], 400, rec["pool"], rec["cls"]); return rec["off"] + p if p is not None else math.inf
for kind in ("base", "raw", "blend"):
    print(kind)
    for lo, hi in buckets:
        sel = [r for r in rows if lo <= r["wait"] < hi]
        if not sel: continue
        ratios = [est(r, kind) / r["wait"] for r in sel]
        errs = [abs(x - 1) for x in ratios]
        print(f"  {lo/3600:5.2f}-{hi/3600:6.1f}h n={len(sel):4d} ratio med {statistics.median(ratios):.2f} err med {statistics.median(errs):.3f}")
    ratios = [est(r, kind) / r["wait"] for r in rows]
    print("  all ratio", round(statistics.median(ratios), 3), "err", round(statistics.median(abs(x - 1) for x in ratios), 4))
