"""Slow clients cannot starve deliveries: the real receiver (``the-loop serve``: gunicorn
with the_loop/gunicorn_conf.py, its default two processes) keeps answering signed
deliveries while unauthenticated connections trickle their headers or their bodies one
byte at a time, and cuts those connections off.

The latency figure (p50/p99 with and without slow clients) is measured by
``benchmarks/slow_clients.py``; here each delivery only has to be answered within the
client's 10 s timeout (GitHub's own), so the test checks behaviour, not speed.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from foundation.inbox.keys import Keys
from tests.conftest import load_fixture, sign_body
from tests.observability.helpers import wait_until
from tests.support.processes import serve, stop
from tests.support.slow_clients import tricklers

SECRET = "slow-clients-secret-7c1e"
SLOW_CLIENTS = 20
RATE = 20  # deliveries per second
SECONDS = 3
CLIENT_TIMEOUT = 10.0  # GitHub gives up on a delivery after 10 s
WORK_ITEM = "github:Codertocat/Hello-World#1"  # the issues/opened fixture's issue




def _deliver(url: str, body: bytes, delivery: str) -> tuple[int, float]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign_body(body, SECRET)})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:  # timed out or refused: the failure this test is about
        status = 0
    return status, time.monotonic() - started


def test_slow_clients_do_not_starve_signed_deliveries(redis_ns, tmp_path):
    out = tmp_path / "serve.out"
    proc, port = serve(redis_ns, out, THE_LOOP_WEBHOOK_SECRET=SECRET,
                       THE_LOOP_LOG_LEVEL="WARNING")
    url = f"http://127.0.0.1:{port}/webhook"
    body = load_fixture("issues", "opened")
    slow = tricklers(port, SLOW_CLIENTS, body)
    try:
        wait_until(lambda: proc.poll() is None and _deliver(url, body, redis_ns.new_id())[0]
                   == 202, what="the receiver to queue a delivery")
        for trickler in slow:
            trickler.start()
        for trickler in slow:
            assert trickler.connected.wait(5)
        time.sleep(1.0)  # every slow client has sent something and holds its connection

        deliveries = [redis_ns.new_id() for _ in range(RATE * SECONDS)]
        start_at = time.monotonic()

        def scheduled(index: int) -> tuple[int, float]:  # open loop: sent on schedule
            time.sleep(max(0.0, start_at + index / RATE - time.monotonic()))
            return _deliver(url, body, deliveries[index])

        with ThreadPoolExecutor(max_workers=len(deliveries)) as pool:
            answers = list(pool.map(scheduled, range(len(deliveries))))

        assert [status for status, _ in answers] == [202] * len(deliveries), answers
        assert max(seconds for _, seconds in answers) < CLIENT_TIMEOUT
        keys = Keys(redis_ns.prefix, redis_ns.queue_name)
        inbox = {d.decode() for d in redis_ns.client.lrange(keys.inbox(WORK_ITEM), 0, -1)}
        assert set(deliveries) <= inbox
        assert all(redis_ns.client.exists(keys.delivery(d)) for d in deliveries)

        # The slow clients are cut off (headers: keepalive, 5 s; bodies: 10 s), long
        # before they finish trickling.
        for trickler in slow:
            assert trickler.closed.wait(30), "a slow client was never cut off"
        assert not redis_ns.client.exists(keys.delivery("slow"))
    finally:
        for trickler in slow:
            trickler.stop.set()
        stop(proc)
    log = out.read_text()
    assert "Traceback" not in log, log
    assert "request body not received within 10 s" in log
