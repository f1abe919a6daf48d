"""Run every benchmark, print a compact table and write benchmarks/results/latest.json.

    make bench            # = .venv/bin/python benchmarks/run_all.py
    .venv/bin/python benchmarks/run_all.py --quick      # shorter, for a smoke check

The targets from the issue are printed next to the figures; they are measurements to
watch, not assertions (the exit status is 0 whenever the benchmarks ran).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import _common as c
import ingest
import parsing
import turns
import worker

TARGETS = {
    "ingest_ratio": 0.75,       # receiver rps >= 75% of the bare app's (median of rounds)
    "ingest_ratio_node": 0.3,   # and >= 30% of @octokit/webhooks' Node receiver
    "p99_ms": 25.0,             # at 500 req/s
    "worker_rate": 400.0,       # routine deliveries/s per worker process
    "web_rss_mib": 80.0,
    "worker_rss_mib": 120.0,
    "parse_ms": parsing.TARGET_MS,  # one 65,536-character hostile comment body
}


def _mark(ok: bool) -> str:
    return "ok  " if ok else "MISS"


def turn_rows(trn: dict) -> list[tuple[str, str, str, bool | None]]:
    """Rows of the turns benchmark (no targets in the issue: figures to watch)."""
    rows: list[tuple[str, str, str, bool | None]] = []
    over = trn.get("overhead")
    if over:
        m = over["median_ms"]
        rows.append(("turn overhead excl. agent", f"{m['all']['overhead']:.0f} ms (first "
                     f"{m['first']['overhead']:.0f}, repair {m['repair']['overhead']:.0f})",
                     "--", None))
    drain = trn.get("drain") or {}
    items = drain.get("settings", {}).get("work_items")
    for p, d in drain.get("median", {}).items():
        rows.append((f"drain {items} items, {p} runners", f"{d['drain_s']:.1f} s (floor "
                     f"{d['floor_s']:.1f} s)", "--", bool(d["ok"])))
        rows.append(("  runner / worker peak RSS", f"{d['runner_peak_hwm_sum_mib']:.0f} MiB "
                     f"(PSS {d['runner_peak_pss_sum_mib']:.0f}) / "
                     f"{d['worker_peak_hwm_mib']:.0f} MiB", "--", None))
    return rows


def parse_rows(prs: dict) -> list[tuple[str, str, str, bool | None]]:
    """Rows of the parsing benchmark: the slowest hostile body (CPU, and wall)."""
    rows = prs.get("commands") or []
    if not rows:
        return []
    cpu = max(rows, key=lambda r: r["parse_cpu_ms"]["median"])
    wall = max(rows, key=lambda r: r["parse_wall_ms"]["median"])
    ok = cpu["parse_cpu_ms"]["median"] <= TARGETS["parse_ms"] and all(
        r["correct"] for r in rows)
    return [(f"command parse, worst of {len(rows)} bodies",
             f"{cpu['parse_cpu_ms']['median']:.1f} ms CPU ({cpu['case']}), wall "
             f"{wall['parse_wall_ms']['median']:.1f}", "<= 50 ms", ok)]


def table(ing: dict, wrk: dict, trn: dict | None = None,
          prs: dict | None = None) -> list[str]:
    t = ing["throughput"]
    f = ing["fixed_rate"]["receiver"]
    rate = ing["settings"]["rate"]
    web_rss = max(w.get("VmHWM", 0) for w in ing["rss_kib"]["receiver"]["workers"]) / 1024
    loop = wrk["runs"].get("the-loop LoopWorker", {})
    wrate = loop.get("rate") or 0
    dense_label = next((k for k in wrk["runs"] if k.startswith("the-loop, ")), None)
    dense = wrk["runs"].get(dense_label, {}) if dense_label else {}
    wrss = max(loop.get("max_rss_kib") or 0, dense.get("max_rss_kib") or 0) / 1024
    rows = [
        ("ingest rps receiver / bare", f"{t['receiver_rps']:.0f} / {t['bare_rps']:.0f} "
         f"(median ratio {t['ratio']:.1%})", ">= 75%", t["ratio"] >= TARGETS["ingest_ratio"]),
        ("ingest rps receiver / node", f"{t['receiver_rps']:.0f} / {t['node_rps'] or 0:.0f} "
         f"(median ratio {t['ratio_node'] or 0:.1%})", ">= 30%",
         (t["ratio_node"] or 0) >= TARGETS["ingest_ratio_node"]),
        (f"latency @{rate:g} req/s p50 / p99", f"{f['latency_ms']['p50']:.1f} / "
         f"{f['latency_ms']['p99']:.1f} ms (achieved {f['achieved_rate']:.0f}/s)",
         "p99 <= 25 ms", f["latency_ms"]["p99"] <= TARGETS["p99_ms"]),
        ("web worker peak RSS", f"{web_rss:.1f} MiB", "<= 80 MB",
         web_rss <= TARGETS["web_rss_mib"]),
        ("worker deliveries/s (1 process)", f"{wrate:.0f}/s (spread: 1-2 per work item)",
         ">= 400/s", wrate >= TARGETS["worker_rate"]),
    ]
    if dense:
        drate = dense.get("rate") or 0
        rows.append((f"  same, {dense_label[len('the-loop, '):]}", f"{drate:.0f}/s (dense)",
                     ">= 400/s",
                     drate >= TARGETS["worker_rate"]))
    rows += [
        ("RQ worker peak RSS", f"{wrss:.1f} MiB", "<= 120 MB",
         0 < wrss <= TARGETS["worker_rss_mib"]),
    ]
    out = [f"{'figure':<34}{'measured':<42}{'target':<14}"]
    out += [f"{a:<34}{b:<42}{c_:<14}{_mark(ok)}" for a, b, c_, ok in rows]
    out += [f"{a:<34}{b:<42}{c_:<14}{'' if ok is None else _mark(ok)}"
            for a, b, c_, ok in turn_rows(trn or {}) + parse_rows(prs or {})]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run all benchmarks.")
    p.add_argument("--quick", action="store_true", help="short runs (smoke check, noisier)")
    p.add_argument("--wait-quiet", type=float, default=0.0,
                   help="per measured phase, wait up to N s for the machine to be idle")
    p.add_argument("--out", default=str(c.RESULTS / "latest.json"))
    args = p.parse_args(argv)
    wq = ["--wait-quiet", str(args.wait_quiet)]
    if args.quick:
        ing_args = ["--seconds", "3", "--rounds", "1", "--rate-seconds", "4", *wq]
        wrk_args = ["--count", "600", "--compare-count", "300", "--fork-count", "300", *wq]
        trn_args = ["--items", "3", "--rounds", "1", *wq]
    else:
        ing_args = ["--seconds", "6", "--rounds", "2", "--rate-seconds", "8", *wq]
        wrk_args = ["--count", "3000", "--compare-count", "1500", "--fork-count", "1500", *wq]
        trn_args = ["--items", "8", "--rounds", "3", *wq]

    started = time.time()
    mach = c.machine()
    print("ingest benchmark ...", file=sys.stderr)
    ing = ingest.main(ing_args)
    print("worker benchmark ...", file=sys.stderr)
    wrk = worker.main(wrk_args)
    print("turns benchmark ...", file=sys.stderr)
    trn = turns.main(trn_args)
    print("parsing benchmark ...", file=sys.stderr)
    prs = parsing.main(["--rounds", "3" if args.quick else "7"])
    code = c.code_version()
    result = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "machine": mach,
        "code": code,
        "targets": TARGETS,
        "ingest": ing,
        "worker": wrk,
        "turns": {k: v for k, v in trn.items() if k not in ("machine", "code")},
        "parsing": {k: v for k, v in prs.items() if k not in ("machine", "code")},
    }
    c.RESULTS.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"\nmachine: {mach['nproc']} CPUs, {mach['cpu_model']}, {mach['mem_gib']} GiB, "
          f"Python {mach['python']}; commit {code['commit']} "
          f"(+{code['changed_files']} changed files); run took {result['elapsed_s']} s")
    print()
    print("\n".join(ingest.summary_lines(ing)))
    print()
    print("\n".join(worker.summary_lines(wrk)))
    print()
    print("\n".join(turns.summary_lines(trn)))
    print()
    print("\n".join(parsing.summary_lines(prs)))
    print()
    print("\n".join(table(ing, wrk, trn, prs)))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
