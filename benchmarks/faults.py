"""The fault proof, full size: 2,000 deliveries over 50 work items (10% duplicates), three
workers, a worker SIGKILLed several times, the loopback fake GitHub failing a fraction of
calls -- and every check of :mod:`tests.support.faults` against a clean serial run.

    .venv/bin/python benchmarks/faults.py                 # the defaults below
    .venv/bin/python benchmarks/faults.py --posts 4000 --items 80 --kills 8 --json

Needs Redis at 127.0.0.1:6379 (``THE_LOOP_TEST_REDIS_URL``; database 14) and the GitHub
payload fixtures (``tests/fixtures/github-webhooks``).
It puts a unique token in every key, queue and delivery id it creates and deletes only
those keys afterwards (never FLUSHDB). Exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    import redis

    from tests.conftest import TEST_REDIS_URL, RedisNamespace, _cleanup
    from tests.support.faults import Scenario, logs_dir, run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=2000, help="deliveries sent (with dups)")
    parser.add_argument("--items", type=int, default=50, help="work items")
    parser.add_argument("--duplicates", type=float, default=0.10, help="share sent twice")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=6, help="worker SIGKILLs (+ restarts)")
    parser.add_argument("--fault-rate", type=float, default=0.05,
                        help="share of GitHub calls answered 502 / 403 rate limit / 429")
    parser.add_argument("--after-share", type=float, default=0.33,
                        help="share of those faults injected after doing the work")
    parser.add_argument("--seed", type=int, default=1130)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--logs", type=Path, help="keep the processes' logs here")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    sc = Scenario(items=args.items, posts=args.posts, duplicate_share=args.duplicates,
                  workers=args.workers, kills=args.kills, fault_rate=args.fault_rate,
                  after_share=args.after_share, seed=args.seed, timeout=args.timeout)
    client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=10)
    token = f"t{uuid.uuid4().hex}"
    ns = RedisNamespace(client=client, url=TEST_REDIS_URL, token=token,
                        prefix=f"the-loop-faults-{token}", queue_name=f"the-loop-faults-{token}")
    try:
        with logs_dir(args.logs) as logs:
            report = run(sc, client, ns.url, ns.prefix, ns.queue_name, token, logs)
    finally:
        _cleanup(ns)
    figures = report.figures()
    if args.json:
        print(json.dumps({**figures, "problems": report.problems}, indent=2))
    else:
        width = max(len(k) for k in figures)
        for key, value in figures.items():
            print(f"{key:<{width}}  {value}")
        for problem in report.problems[:50]:
            print(f"PROBLEM: {problem}")
        print("OK: nothing lost, nothing twice, same end states as the clean run"
              if not report.problems else f"FAILED: {len(report.problems)} problems")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
