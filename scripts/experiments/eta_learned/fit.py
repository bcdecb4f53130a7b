# PYTHONPATH=src python scripts/experiments/eta_learned/fit.py [/tmp/etalearn]
"""Throwaway (etalearn): learned combinations of the estimate's parts and the queue state, scored
offline on the records of harness.py. Choice (features, k) by leave-one-week-out over the training
weeks only (never days 28-49); then fitted on all training weeks and scored once on the held-out
weeks 28-35, 35-42, 42-49, beside today's estimate reproduced from the same records."""

import glob
import json
import math
import os
import statistics
import sys

import numpy as np

from cloudlet.domain.jobs.wait_estimate import HEAD_FRACTION, MAX_AHEAD_LOAD

CAP = 400.0
HELD_OUT = (28.0, 35.0, 42.0)
MIN_WAIT = 60.0


def L(x):
    return math.log(max(x, 1.0))


def today(rec):
    """paced_start on the recorded parts: the simulator's estimate, seconds from the record's pass."""
    r = rec["r"]
    if r is None:
        return None
    rs = r / (1.0 - min(max(rec["ln"], 0.0), MAX_AHEAD_LOAD))
    if rs <= 0.0:
        return 0.0
    if rec["short"] <= HEAD_FRACTION * CAP and rec["pool"] is not None:
        return rec["pool"]
    if rec["cls"] is None:
        return rs
    return math.sqrt(max(rs, 1.0) * max(rec["cls"], 1.0))


def parts(rec):
    r = rec["r"]
    rs = r / (1.0 - min(max(rec["ln"], 0.0), MAX_AHEAD_LOAD))
    cls = rec["cls"] if rec["cls"] is not None else rs
    pool = rec["pool"] if rec["pool"] is not None else rs
    hour = ((rec["now"] + rec["abs0"]) % 86400.0) / 86400.0 * 2 * math.pi
    ent = max(rec["entitled"], 1.0)
    return {
        "rs": L(rs),
        "r": L(r),
        "cls": L(cls),
        "pool": L(pool),
        "today": L(today(rec)),
        "head": 1.0 if rec["short"] <= HEAD_FRACTION * CAP else 0.0,
        "ln": math.log(1.0 - min(max(rec["ln"], 0.0), MAX_AHEAD_LOAD)),
        "tahead": math.log1p(rec["team_ahead"]),
        "ahead": math.log1p(rec["ahead"]),
        "held": math.log((rec["held"] + 1.0) / ent),
        "factor": rec["factor"] if rec["factor"] is not None else 1.0,
        "rank": float(rec["rank"] or 0),
        "twork": L(rec["team_work"] / ent),
        "owork": L(rec["other_work"] / CAP),
        "free": rec["free"] / CAP,
        "queuing": float(rec["queuing"]),
        "cores": math.log(rec["cores"]),
        "run": L(rec["run"]),
        "hsin": math.sin(hour),
        "hcos": math.cos(hour),
        "ownload": rec["own_load"],
        "allload": rec["all_load"],
    }


def load(folder):
    weeks = {}
    for path in sorted(glob.glob(os.path.join(folder, "rec_fair-borrow_*_5.json"))):
        with open(path) as f:
            d = json.load(f)
        day = d["start_day"]
        rows, mism = [], 0
        for r in d["rows"]:
            if r["wait"] < MIN_WAIT:
                continue
            rec = r["rec"]
            row = {
                "wait": r["wait"],
                "eta": r["eta"],
                "team": r["team"],
                "t": day * 86400.0 + r["submit"],
                "started": day * 86400.0 + r["started"],
                "rec": rec,
            }
            if rec is not None:
                rec["abs0"] = day * 86400.0 + d["origin_s"]
                t = today(rec)
                t = rec["off"] + t if t is not None else math.inf
                if not (
                    math.isclose(t, r["eta"], rel_tol=1e-9, abs_tol=1e-6)
                    or (math.isinf(t) and math.isinf(r["eta"]))
                ):
                    mism += 1
                row["x"] = parts(rec) if rec["r"] is not None and rec["r"] > 0 else None
            else:
                row["x"] = None
            rows.append(row)
        weeks[day] = {"rows": rows, "mism": mism, "all": len(d["rows"])}
    return weeks


def score(ests, rows):
    errs = [
        abs(e - r["wait"]) / r["wait"] if math.isfinite(e) else math.inf
        for e, r in zip(ests, rows, strict=True)
    ]
    ratios = [e / r["wait"] for e, r in zip(ests, rows, strict=True)]
    return statistics.median(errs), statistics.median(ratios), sum(x <= 0.25 for x in errs) / len(errs)


def lad(X, y, iters=100):
    """Least absolute deviations by IRLS (median regression)."""
    w = np.linalg.lstsq(X, y, rcond=None)[0]
    for _ in range(iters):
        res = np.abs(y - X @ w)
        wt = 1.0 / np.maximum(res, 1e-4)
        Xw = X * wt[:, None]
        new = np.linalg.solve(X.T @ Xw + 1e-9 * np.eye(X.shape[1]), Xw.T @ y)
        if np.max(np.abs(new - w)) < 1e-7:
            return new
        w = new
    return w


def design(rows, feats):
    X = np.array([[1.0] + [r["x"][f] for f in feats] for r in rows])
    y = np.array([math.log(r["wait"]) for r in rows])
    return X, y


def at_head(r):
    """Today's head rule applies: the pool's pace for the jobs ahead."""
    return r["x"]["head"] == 1.0 and r["rec"]["pool"] is not None


def learned_ests(rows, predict, keep_head=False):
    """Rows without parts (started on the first pass, never, or the replay says now): today's.
    ``keep_head`` (mode "head" or "deep"): today's estimate at the head too."""
    out = []
    for r in rows:
        if r["x"] is None or (keep_head and at_head(r)):
            out.append(r["eta"])
        else:
            out.append(r["rec"]["off"] + math.exp(predict(r)))
    return out


def fit_lad(train, feats, deep=False):
    """``deep``: fitted only on the rows where today's head rule does not apply."""
    usable = [r for r in train if r["x"] is not None and not (deep and at_head(r))]
    X, y = design(usable, feats)
    w = lad(X, y)
    return w, (lambda r: float(w[0] + sum(wi * r["x"][f] for wi, f in zip(w[1:], feats, strict=True))))


def knn_model(train, feats, k, deep=False):
    usable = [r for r in train if r["x"] is not None and not (deep and at_head(r))]
    X = np.array([[r["x"][f] for f in feats] for r in usable])
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Z = (X - mu) / sd
    y = np.array([math.log(r["wait"]) for r in usable])

    def predict(r):
        z = (np.array([r["x"][f] for f in feats]) - mu) / sd
        d = ((Z - z) ** 2).sum(1)
        idx = np.argpartition(d, min(k, len(d) - 1))[:k]
        return float(np.median(y[idx]))

    return predict


FEATURE_SETS = {
    "A today-parts": ["rs", "cls", "pool", "head"],
    "B +depth": ["rs", "cls", "pool", "head", "tahead", "ahead"],
    "C +held/factor": ["rs", "cls", "pool", "head", "held", "factor", "rank"],
    "D +work": ["rs", "cls", "pool", "head", "twork", "owork", "queuing"],
    "E replay split": ["r", "ln", "cls", "pool", "head", "held"],
    "F mixed": ["rs", "cls", "pool", "head", "held", "twork", "owork", "free"],
    "G job+time": ["rs", "cls", "pool", "head", "cores", "run", "hsin", "hcos"],
    "H loads": ["rs", "cls", "pool", "head", "ownload", "allload", "held"],
    "I no replay": ["cls", "pool", "head", "tahead", "twork", "owork", "held", "factor"],
    "J today+state": ["today", "held", "twork", "owork", "tahead"],
}


MODES = (
    "all",
    "head",
    "deep",
)  # learned everywhere / today's head rule kept / that and fitted on deep rows only
MIN_SCORED = 100  # a left-out week with fewer jobs that waited >= 1 min is too small to score alone


def fitted(train, feats, mode, k=None):
    deep = mode == "deep"
    return knn_model(train, feats, k, deep) if k else fit_lad(train, feats, deep)[1]


def lowo(weeks, train_days, feats, mode, k=None):
    """Leave one training week out: per scored week its median error, and the median error of
    every left-out estimate pooled."""
    per, pooled_e, pooled_r = {}, [], []
    for out in train_days:
        train = [r for d in train_days if d != out for r in weeks[d]["rows"]]
        rows = weeks[out]["rows"]
        ests = learned_ests(rows, fitted(train, feats, mode, k), mode != "all")
        if len(rows) >= MIN_SCORED:
            per[out] = score(ests, rows)[0]
        pooled_e += ests
        pooled_r += rows
    return per, score(pooled_e, pooled_r)[0]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/etalearn"
    weeks = load(folder)
    train_days = [d for d in weeks if d not in HELD_OUT]
    held = [d for d in HELD_OUT if d in weeks]
    print(
        "weeks (jobs waited >= 1 min, sampled jobs, today's reproduced mismatches):",
        {d: (len(w["rows"]), w["all"], w["mism"]) for d, w in weeks.items()},
    )
    print("train", train_days, "held out", held)
    print("\ntoday's estimate per week (err / ratio / within25; median wait h, head share):")
    for d, w in sorted(weeks.items()):
        e, q, s = score([r["eta"] for r in w["rows"]], w["rows"])
        waits = [r["wait"] for r in w["rows"]]
        heads = sum(1 for r in w["rows"] if r["x"] is not None and at_head(r)) / len(waits)
        print(
            f"  {d:4g}  {e * 100:5.1f} %  {q:.2f}  {s * 100:4.1f} %"
            f"   {statistics.median(waits) / 3600:5.1f} h  {heads:.2f}"
        )

    # -- choice, on the training weeks only: leave one week out, criterion the pooled median error
    print(
        "\nLOWO over training weeks: pooled median error of all left-out estimates;"
        f" mean over weeks with >= {MIN_SCORED}; per week"
    )
    cv = {}
    tp_e, tp_r, tper = [], [], {}
    for d in train_days:
        tp_e += [r["eta"] for r in weeks[d]["rows"]]
        tp_r += weeks[d]["rows"]
        if len(weeks[d]["rows"]) >= MIN_SCORED:
            tper[d] = score([r["eta"] for r in weeks[d]["rows"]], weeks[d]["rows"])[0]
    print(
        f"  {'today':34s} pooled {score(tp_e, tp_r)[0] * 100:5.1f}"
        f" mean {np.mean(list(tper.values())) * 100:5.1f}  "
        + " ".join(f"{d:g}:{p * 100:.1f}" for d, p in tper.items())
    )
    for name, feats in FEATURE_SETS.items():
        for mode in MODES:
            per, pooled = lowo(weeks, train_days, feats, mode)
            cv[(name, mode, None)] = pooled
            print(
                f"  LAD {name:16s} {mode:5s}         pooled {pooled * 100:5.1f}"
                f" mean {np.mean(list(per.values())) * 100:5.1f}  "
                + " ".join(f"{d:g}:{p * 100:.1f}" for d, p in per.items())
            )
    best = min(cv, key=cv.get)
    print("chosen LAD (lowest pooled LOWO error):", best)
    for k in (10, 30, 100, 300):
        per, pooled = lowo(weeks, train_days, FEATURE_SETS[best[0]], best[1], k)
        cv[(best[0], best[1], k)] = pooled
        print(
            f"  kNN k={k:3d} {best[0]:16s} {best[1]:5s} pooled {pooled * 100:5.1f}"
            f" mean {np.mean(list(per.values())) * 100:5.1f}  "
            + " ".join(f"{d:g}:{p * 100:.1f}" for d, p in per.items())
        )
    best_knn = min((key for key in cv if key[2]), key=cv.get)
    print("chosen kNN:", best_knn)

    # -- once: fitted on all training weeks, scored on the held-out weeks
    train = [r for d in train_days for r in weeks[d]["rows"]]
    feats, mode = FEATURE_SETS[best[0]], best[1]
    w, _ = fit_lad(train, feats, mode == "deep")
    print("\nLAD weights (intercept, " + ", ".join(feats) + "):", np.round(w, 4).tolist())
    print("\nHELD OUT, scored once (err / ratio / within25):")
    for d in held:
        rows = weeks[d]["rows"]
        print(f"  days {d:g}-{d + 7:g} n={len(rows)}")
        for label, ests in (
            ("today", [r["eta"] for r in rows]),
            ("LAD (a)", learned_ests(rows, fitted(train, feats, mode), mode != "all")),
            ("online LAD (b)", online(weeks, d, feats, mode)),
            (
                "kNN (c)",
                learned_ests(
                    rows,
                    fitted(train, FEATURE_SETS[best_knn[0]], best_knn[1], best_knn[2]),
                    best_knn[1] != "all",
                ),
            ),
        ):
            e, q, s = score(ests, rows)
            print(f"    {label:15s} {e * 100:5.1f} %  {q:.2f}  {s * 100:4.1f} %")

    # -- hindsight, NOT used for any choice: every set and mode on the held-out weeks
    print(
        "\nHINDSIGHT (not used to choose): every LAD set/mode fitted on the training weeks,"
        " held-out errors 28 / 35 / 42:"
    )
    for name, fs_ in FEATURE_SETS.items():
        for m in MODES:
            pred = fitted(train, fs_, m)
            errs = [
                score(learned_ests(weeks[d]["rows"], pred, m != "all"), weeks[d]["rows"])[0] for d in held
            ]
            print(f"  {name:16s} {m:5s} " + " / ".join(f"{e * 100:5.1f}" for e in errs))
    print("\nDIAGNOSTIC (not a candidate): the chosen set/mode fitted ON the contended weeks themselves:")
    for fit_on in ([28.0], [35.0], [42.0], [28.0, 42.0], [28.0, 35.0, 42.0]):
        tr = [r for d in fit_on for r in weeks[d]["rows"]]
        pred = fitted(tr, feats, mode)
        errs = [score(learned_ests(weeks[d]["rows"], pred, mode != "all"), weeks[d]["rows"]) for d in held]
        print(f"  fitted on {fit_on}: " + " / ".join(f"{e * 100:5.1f} % ({q:.2f})" for e, q, _ in errs))
    print("\nonline LAD (b) on the training weeks (history: windows up to this one, started by t):")
    for d in sorted(train_days):
        e, q, s = score(online(weeks, d, feats, mode), weeks[d]["rows"])
        print(f"  days {d:g}: {e * 100:5.1f} % {q:.2f} {s * 100:4.1f} %")


def online(weeks, day, feats, mode, refit_s=3600.0, least=200):
    """Fitted inside the week: for a job submitted at t, LAD on the jobs of this window and the earlier
    ones that had started by t (refitted each hour of simulated time); fewer than ``least``: today's."""
    import bisect

    deep = mode == "deep"
    hist = sorted(
        (
            r
            for d, w in weeks.items()
            if d <= day
            for r in w["rows"]
            if r["x"] is not None and not (deep and at_head(r))
        ),
        key=lambda r: r["started"],
    )
    starts = [r["started"] for r in hist]
    out, cache = [], {}
    for r in weeks[day]["rows"]:
        if r["x"] is None or (mode != "all" and at_head(r)):
            out.append(r["eta"])
            continue
        t = r["t"] + r["rec"]["off"]
        slot = math.floor(t / refit_s) * refit_s
        if slot not in cache:
            known = hist[: bisect.bisect_right(starts, slot)]
            cache[slot] = fit_lad(known, feats)[1] if len(known) >= least else None
        pred = cache[slot]
        out.append(r["eta"] if pred is None else r["rec"]["off"] + math.exp(pred(r)))
    return out


if __name__ == "__main__":
    main()
