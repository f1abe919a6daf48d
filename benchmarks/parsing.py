"""How long reading untrusted text takes: line commands in comment bodies of GitHub's
full 65,536 characters built against parsers (the corpus of
``tests/support/adversarial.py``), and the artifact readers on hostile artifact text.

    .venv/bin/python benchmarks/parsing.py [--rounds 7] [--json out.json]

Per body, over ``--rounds`` runs: the CPU time (``time.thread_time``: barely moved by
other load on a shared machine) and the wall time of ``classify_feedback.parse_command``,
and side by side the CPU time of the cmark rendering alone (``commands.rendered``: the
floor of this approach). The target is 50 ms per body. For comparison, the regex parser it
replaced is timed on growing runs of backticks in a child process that is killed after
``--old-limit`` seconds (it was cubic: 65,536 of them would take days).
No Redis, no network.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import _common as c

from foundation.commands import rendered
from foundation.hooks.classify_feedback import parse_command
from tests.support.adversarial import SIZE, corpus

TARGET_MS = 50.0

# The previous parser (regexes over the raw body), run only in a child for comparison.
OLD_PARSER = r'''
import re, sys, time
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)
COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
QUOTE = re.compile(r"^[ \t]*>.*$", re.M)
n = int(sys.argv[1])
body = "`" * n
t = time.perf_counter()
text = QUOTE.sub("", COMMENT.sub("", FENCE.sub("", body)))
CODE.sub("", text)
print((time.perf_counter() - t) * 1000)
'''


def _time(fn: Callable[[str], Any], body: str) -> float:
    """Wall milliseconds of ``fn(body)``."""
    t = time.perf_counter()
    fn(body)
    return (time.perf_counter() - t) * 1000


def _cpu(fn: Callable[[str], Any], body: str) -> float:
    """CPU milliseconds of this thread for ``fn(body)`` (other load barely moves it)."""
    t = time.thread_time()
    fn(body)
    return (time.thread_time() - t) * 1000


def commands(rounds: int) -> list[dict[str, Any]]:
    """Each corpus body: parse and render times (ms; CPU and wall), and whether the
    result is right."""
    rows = []
    for case in corpus():
        cpu, wall, render = [], [], []
        for _ in range(rounds):
            cpu.append(_cpu(parse_command, case.body))
            wall.append(_time(parse_command, case.body))
            render.append(_cpu(rendered, case.body))
        rows.append({
            "case": case.name, "chars": len(case.body),
            "correct": parse_command(case.body) == case.expected,
            "parse_cpu_ms": {"best": min(cpu), "median": statistics.median(cpu),
                             "max": max(cpu)},
            "parse_wall_ms": {"best": min(wall), "median": statistics.median(wall),
                              "max": max(wall)},
            "render_cpu_ms": {"median": statistics.median(render)},
        })
    return rows


def artifacts(rounds: int) -> list[dict[str, Any]]:
    """The artifact readers on hostile artifact text of :data:`SIZE` characters (CPU
    ms)."""
    from foundation.hooks.record_feedback import follow_ups
    from foundation.hooks.review import entries, fingerprint
    from foundation.hooks.validate_artifacts import headings
    from graph import tasks

    n = SIZE
    inputs = {
        "unclosed fences with info": "```x\n" * (n // 5),
        "heading + spaces": "# Title" + " " * (n - 9) + "#x",
        "heading + ' #' runs": "# Title" + " #" * ((n - 8) // 2),
        "unclosed comments": "<!--" * (n // 4),
        "entry-like lines": "### 2024-01-01 — @a — approved\n" * (n // 31),
    }
    readers: dict[str, Callable[[str], Any]] = {
        "headings": headings, "tasks.extract": tasks.extract, "follow_ups": follow_ups,
        "review.entries": entries, "review.fingerprint": fingerprint,
    }
    rows = []
    for reader, fn in readers.items():
        for name, text in inputs.items():
            times = [_cpu(fn, text) for _ in range(rounds)]
            rows.append({"reader": reader, "input": name,
                         "median_ms": statistics.median(times), "max_ms": max(times)})
    return rows


def old_parser(limit: float) -> list[dict[str, Any]]:
    """The replaced regex parser on ``n`` backticks, doubling ``n`` from 100 until a run
    takes longer than ``limit`` seconds (then it is killed)."""
    rows: list[dict[str, Any]] = []
    n = 100
    while n <= SIZE:
        try:
            done = subprocess.run([c.PYTHON, "-c", OLD_PARSER, str(n)], capture_output=True,
                                  text=True, timeout=limit, check=True)
            rows.append({"chars": n, "ms": float(done.stdout)})
        except subprocess.TimeoutExpired:
            rows.append({"chars": n, "ms": None, "killed_after_s": limit})
            break
        n *= 2
    return rows


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The figures as text lines."""
    out = [f"line commands, {len(result['commands'])} bodies of {SIZE} chars "
           f"(target {TARGET_MS:g} ms each; machine {result['machine_busy_pct_before']:.0f}% "
           "busy before); ms",
           f"  {'case':<22}{'cpu med':>9}{'cpu max':>9}{'wall med':>9}{'wall max':>9}"
           f"{'render':>9}  correct"]
    for r in result["commands"]:
        cpu, wall = r["parse_cpu_ms"], r["parse_wall_ms"]
        out.append(f"  {r['case']:<22}{cpu['median']:>9.2f}{cpu['max']:>9.2f}"
                   f"{wall['median']:>9.2f}{wall['max']:>9.2f}"
                   f"{r['render_cpu_ms']['median']:>9.2f}  {'yes' if r['correct'] else 'NO'}")
    worst = max(result["commands"], key=lambda r: r["parse_cpu_ms"]["median"])
    slowest = max(result["commands"], key=lambda r: r["parse_wall_ms"]["median"])
    out.append(f"  worst CPU median: {worst['parse_cpu_ms']['median']:.2f} ms "
               f"({worst['case']}); "
               f"{'ok' if worst['parse_cpu_ms']['median'] <= TARGET_MS else 'MISS'}; worst "
               f"wall median {slowest['parse_wall_ms']['median']:.2f} ms ({slowest['case']})")
    out.append("artifact readers (CPU median / max ms)")
    for r in result["artifacts"]:
        out.append(f"  {r['reader']:<20}{r['input']:<28}{r['median_ms']:>8.2f} "
                   f"{r['max_ms']:>8.2f}")
    out.append("replaced regex parser on runs of backticks (ms)")
    for r in result["old_parser"]:
        shown = (f"{r['ms']:.1f}" if r["ms"] is not None
                 else f"killed after {r['killed_after_s']:g} s")
        out.append(f"  {r['chars']:>6} chars: {shown}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--old-limit", type=float, default=10.0,
                   help="seconds before the replaced parser's child is killed")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    busy = c.cpu_busy_pct(0.5)
    result = {"machine": c.machine(), "code": c.code_version(),
              "machine_busy_pct_before": busy, "target_ms": TARGET_MS,
              "commands": commands(args.rounds), "artifacts": artifacts(args.rounds),
              "old_parser": old_parser(args.old_limit)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


if __name__ == "__main__":
    figures = main()
    print("\n".join(summary_lines(figures)))
    sys.exit(0 if all(r["correct"] for r in figures["commands"]) else 1)
