"""Where the receiver's time goes under load: the floor app with the receiver's own steps
added one at a time, side by side with the receiver, in one run.

Apps (all under gunicorn with the same settings as ``ingest.py``: ``-c
python:the_loop.gunicorn_conf``, ``--web-workers`` gevent processes, one free loopback port
each): ``floor`` (``floor_app.py``: verify the signature, one ``SET`` of the body, 202),
then the floor with ``THE_LOOP_FLOOR_STEPS`` = ``parse``; ``parse,log``; ``enqueue``
(the receiver's dedupe + inbox script instead of the ``SET``); ``enqueue,log``; and the
receiver itself (``the-loop serve``). Each round runs every app for ``--seconds`` with wrk
(1 thread, ``--connections`` keep-alive connections, the 15.5 KB ``issue_comment``
delivery, a unique ``X-GitHub-Delivery`` per request), the order rotating per round;
each app's requests/s and CPU per request are divided by the floor's of the same round,
and the medians over rounds are reported: what each step costs, as a share of the floor.

Redis: DB 13 (``THE_LOOP_BENCH_REDIS_URL``), a unique prefix per app; the run's keys
are deleted after each run.

    .venv/bin/python benchmarks/receiver_steps.py [--rounds 6] [--seconds 3] [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common as c
import ingest
import redis

from webhook.signature import sign

#: App name -> ``THE_LOOP_FLOOR_STEPS`` of the floor app, or None for the receiver.
STEPS: dict[str, str | None] = {
    "floor": "",
    "parse": "parse",
    "parse+log": "parse,log",
    "enqueue": "enqueue",
    "enqueue+log": "enqueue,log",
    "receiver": None,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="The floor app plus the receiver's steps, one "
                                            "at a time, against the receiver.")
    p.add_argument("--rounds", type=int, default=6, help="rounds (default 6)")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="seconds of wrk per app per round (default 3)")
    p.add_argument("--connections", type=int, default=8, help="wrk connections (default 8)")
    p.add_argument("--web-workers", type=int,
                   default=int(os.environ.get("THE_LOOP_WEB_WORKERS") or 4),
                   help="gunicorn workers per app ($THE_LOOP_WEB_WORKERS or 4)")
    p.add_argument("--json", help="also write the result object to this file")
    args = p.parse_args(argv)
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get update && apt-get install -y wrk")

    token = c.new_token()
    secret = secrets.token_hex(32)
    event, path = "issue_comment", c.ISSUE_COMMENT
    signature = sign(path.read_bytes(), secret)
    conn = redis.Redis.from_url(c.BENCH_REDIS_URL)
    conn.ping()
    log_dir = Path(tempfile.mkdtemp(prefix="the-loop-bench-"))
    apps: dict[str, ingest.App] = {}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in STEPS}
    try:
        for index, (name, steps) in enumerate(STEPS.items()):
            env = c.clean_env(
                REDIS_URL=c.BENCH_REDIS_URL, THE_LOOP_WEBHOOK_SECRET=secret,
                THE_LOOP_QUEUE=f"{token}-{index}-q", THE_LOOP_REDIS_PREFIX=f"{token}-{index}",
                THE_LOOP_WEB_WORKERS=str(args.web_workers), THE_LOOP_LOG_LEVEL="INFO")
            port = c.free_port()
            if steps is None:
                argv_ = [str(c.VENV_BIN / "the-loop"), "serve", "--port", str(port),
                         "--host", "127.0.0.1"]
            else:
                env["THE_LOOP_FLOOR_STEPS"] = steps
                argv_ = [c.PYTHON, "-m", "gunicorn", "-c", "python:the_loop.gunicorn_conf",
                         "--bind", f"127.0.0.1:{port}", "--pythonpath", str(ingest.HERE),
                         "floor_app:app"]
            apps[name] = ingest.App(f"app{index}", argv_, env, port, log_dir)
        for index, app in enumerate(apps.values()):
            app.wait_ready(args.web_workers,
                           ingest._post_once(path.read_bytes(), signature, f"{token}-{index}",
                                             event))
            ingest.run_wrk(app, 2, 1, args.connections, path, signature,
                           f"{token}-warm{index}", event)
        c.cleanup_redis(conn, token)
        names = list(apps)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                run = ingest.run_wrk(apps[name], args.seconds, 1, args.connections, path,
                                     signature, f"{token}-r{r}-{names.index(name)}", event)
                runs[name].append(run)
                c.cleanup_redis(conn, token)
                print(f"  round {r + 1} {name:12s} {run['rps']:8.1f} req/s, "
                      f"CPU {run['app_cpu_us_per_request']} us/req", file=sys.stderr)
    finally:
        for app in apps.values():
            app.stop()
        c.cleanup_redis(conn, token)
        shutil.rmtree(log_dir, ignore_errors=True)

    floor = runs["floor"]
    steps_out: dict[str, Any] = {}
    for name, rs in runs.items():
        steps_out[name] = {
            "steps": STEPS[name], "rps": statistics.median(x["rps"] for x in rs),
            "cpu_us_per_request": statistics.median(x["app_cpu_us_per_request"] for x in rs),
            "rps_over_floor": round(statistics.median(
                x["rps"] / f["rps"] for x, f in zip(rs, floor, strict=True)), 3),
            "cpu_over_floor": round(statistics.median(
                x["app_cpu_us_per_request"] / f["app_cpu_us_per_request"]
                for x, f in zip(rs, floor, strict=True)), 3),
        }
    result = {"machine": c.machine(), "code": c.code_version(),
              "settings": {"rounds": args.rounds, "seconds": args.seconds,
                           "connections": args.connections, "web_workers": args.web_workers,
                           "payload": str(path.relative_to(c.REPO))},
              "apps": steps_out}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    res = main()
    print(f"{'app (floor + steps)':<22}{'req/s':>10}{'CPU us/req':>12}{'req/s / floor':>15}"
          f"{'CPU / floor':>13}")
    for app_name, row in res["apps"].items():
        print(f"{app_name:<22}{row['rps']:>10.1f}{row['cpu_us_per_request']:>12.1f}"
              f"{row['rps_over_floor']:>15.3f}{row['cpu_over_floor']:>13.3f}")
