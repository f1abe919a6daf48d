"""Connections that cannot hang: gunicorn and the RQ workers reach Redis through a
loopback proxy that black-holes their connections (stops forwarding, closes nothing),
twice: once only the connections open at that moment, once new connections too for 6 s.
The clients must notice their dead connections and reconnect; every delivery is still
processed exactly once, within the scenario's bounded wait. The scenario and its checks
live in :mod:`tests.support.faults`.
"""

from __future__ import annotations

import os

import pytest

from tests.support.faults import Scenario, run_logged

pytestmark = pytest.mark.e2e


def test_deliveries_survive_black_holed_redis_connections(redis_ns):
    """Given 30 work items and their deliveries interleaved at random, 10% sent twice,
      and every process's Redis connections going through a black-holing proxy
    When the connections open at one moment silently stop forwarding for good, and later
      those open then too while new ones hang for 6 s before they get through
    Then within 150 s every delivery is handled, none lost and none twice, nothing is
      parked, and every work item ends exactly where a clean serial run ends."""
    sc = Scenario(
        items=int(os.environ.get("THE_LOOP_FAULT_ITEMS", "30")),
        posts=int(os.environ.get("THE_LOOP_FAULT_POSTS", "300")),
        workers=2, kills=0, fault_rate=0.0, black_holes=2, black_hole_seconds=6.0,
        timeout=150.0)
    report = run_logged(sc, redis_ns)
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.black_holes == 2
    assert report.black_holed_connections > 0  # the processes' connections were cut


@pytest.mark.parametrize("worker_ttl", [None, 4], ids=["ttl-30s", "ttl-4s"])
def test_deliveries_survive_black_holed_connections_that_resume(redis_ns, worker_ttl):
    """Given 30 work items and their deliveries interleaved at random, 10% sent twice,
      and every process's Redis connections going through a black-holing proxy
    When, six times, the connections open at that moment silently stop forwarding (every
      other time new ones hang too), and each time after 8 s they all forward again
      (so the commands the clients sent into them, timed out on and retried on fresh
      connections reach Redis late, a second time) -- with a worker TTL outlasting the
      longest stall, and with one (4 s) so short that a worker still retrying its writes
      is taken over
    Then within 240 s every delivery is handled exactly once, no decision is lost,
      nothing is parked, and every work item ends exactly where a clean serial run ends."""
    sc = Scenario(
        items=int(os.environ.get("THE_LOOP_FAULT_ITEMS", "30")),
        posts=int(os.environ.get("THE_LOOP_FAULT_POSTS", "300")),
        workers=2, kills=0, fault_rate=0.0, black_holes=6, black_hole_seconds=8.0,
        black_hole_resume=True, worker_ttl=worker_ttl, timeout=240.0)
    report = run_logged(sc, redis_ns)
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.black_holes == sc.black_holes
    assert report.black_holed_connections > 0
