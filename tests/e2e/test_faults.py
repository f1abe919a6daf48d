"""Nothing lost, nothing twice, under faults: real processes (gunicorn, three workers), the
real Redis, the loopback fake GitHub answering 502 / secondary rate limits (some after
doing the work), a worker SIGKILLed and restarted several times, duplicated deliveries.

This is the short form of ``benchmarks/faults.py`` (which sends 2,000 deliveries); the
scenario and every check live in :mod:`tests.support.faults`. Sizes can be raised with
``THE_LOOP_FAULT_POSTS`` / ``THE_LOOP_FAULT_ITEMS``.
"""

from __future__ import annotations

import os

import pytest

from tests.support.faults import Scenario, run_logged

pytestmark = pytest.mark.e2e


def test_deliveries_survive_kills_faults_and_duplicates(redis_ns):
    """Given 50 work items and their deliveries interleaved at random, 10% sent twice
    When three workers process them while GitHub fails 6% of calls (a third of those after
      doing the work) and a worker is SIGKILLed three times
    Then no delivery is lost or handled twice, the-loop's comments and labels at GitHub
      have no duplicate, and every work item ends exactly where a clean serial run of the
      same deliveries ends."""
    sc = Scenario(
        items=int(os.environ.get("THE_LOOP_FAULT_ITEMS", "50")),
        posts=int(os.environ.get("THE_LOOP_FAULT_POSTS", "500")),
        workers=3, kills=3, fault_rate=0.06, after_share=0.33, timeout=150.0)
    report = run_logged(sc, redis_ns)
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.kills == sc.kills
    assert report.duplicates_answered == sc.posts - sc.unique
    assert sum(report.faults.values()) > 0
