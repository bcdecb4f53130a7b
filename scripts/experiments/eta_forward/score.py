import json, math, statistics, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    rows = [r for r in d["rows"] if r["wait"] >= 60]
    variants = set()
    for r in rows:
        if r["rec"]:
            variants |= {k for k in r["rec"] if k[0] in "fp" and k[1:2].isdigit()}
    from cloudlet.domain.jobs.wait_estimate import paced_start
    def err(eta, wait):
        return abs(eta - wait) / wait if eta is not None and math.isfinite(eta) else math.inf
    res = {"base": statistics.median(err(r["eta"], r["wait"]) for r in rows)}
    for v in sorted(variants):
        raw, bl, hd, nf = [], [], [], 0
        for r in rows:
            rec = r["rec"]
            if rec is None:
                raw.append(err(r["eta"], r["wait"])); bl.append(err(r["eta"], r["wait"])); hd.append(err(r["eta"], r["wait"])); continue
            f = rec[v]
            if f is None:
                nf += 1
            raw.append(err(rec["off"] + f if f is not None else None, r["wait"]))
            p = paced_start(f, rec["short"], 400, rec["pool"], rec["cls"])
            bl.append(err(rec["off"] + p if p is not None else None, r["wait"]))
            if rec is not None:
                h = paced_start(f, rec["short"], 400, rec["pool"], None)
                hd.append(err(rec["off"] + h if h is not None else None, r["wait"]))
            else:
                hd.append(err(r["eta"], r["wait"]))
        res[v] = (round(statistics.median(raw), 4), round(statistics.median(bl), 4), round(statistics.median(hd), 4), nf)
    print(path, len(rows), "wall", round(d["wall"], 1), {k: round(v, 1) for k, v in d["fwd_s"].items()})
    for k, v in res.items():
        print("  ", k, v)
