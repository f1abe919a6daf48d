"""GitHub's API budget end to end: gunicorn and a worker as real processes, the real
Redis and the loopback fake GitHub, through an issue's and a pull request's gates. The
fake's request log is split per delivery: no resource is read twice within one delivery,
GETs go out conditionally once their answer is cached (and some are answered 304), and
the status comment is edited by its id, never searched for again."""

from __future__ import annotations

import collections

import pytest

from tests.e2e.test_end_to_end import REPO, enrol_payload, running_stack, wait_until
from tests.e2e.test_gate_deliveries import (
    DESIGN,
    UNPACED,
    approve,
    pull_request,
    review,
    send,
)

pytestmark = pytest.mark.e2e


def repeated_gets(requests) -> list[str]:
    seen = collections.Counter((r.path, r.query) for r in requests if r.method == "GET")
    return [f"{path}?{query}" for (path, query), n in seen.items() if n > 1]


def test_no_resource_is_read_twice_within_a_delivery_and_reads_go_out_conditionally(
        redis_ns, tmp_path):
    with running_stack(redis_ns, tmp_path, extra_env=UNPACED) as (fake, url, _, store, _):
        fake.add_file(REPO, "specs/1/design.md", DESIGN)
        pr = pull_request(fake)
        head = pr["pull_request"]["head"]
        for ref in (head["sha"], head["ref"]):
            fake.add_file(REPO, "specs/2/design.md", DESIGN, ref=ref)
        deliveries = [  # each delivery (made when sent: a reply during the gate visit)
            # and where its work item waits after it
            ("issues", enrol_payload, 1, "requirements-approval"),
            ("issue_comment", lambda: approve(cid=4242), 1, "design-approval"),
            ("pull_request", lambda: pr, 2, "requirements-approval"),
            ("pull_request_review", lambda: review(pr, rid=5151), 2, "design-approval"),
        ]
        per_delivery = []
        for event, payload, number, node in deliveries:
            start = len(fake.requests)
            send(url, redis_ns, event, payload())
            ref = f"github:{REPO}#{number}"
            wait_until(lambda ref=ref, node=node: (s := store.load(ref)) is not None
                       and s.current_node == node and s.status == "waiting",
                       what=f"{ref} waiting at {node}")
            per_delivery.append([r for r in fake.requests[start:]
                                 if "/access_tokens" not in r.path])
        for event_requests in per_delivery:
            assert repeated_gets(event_requests) == []
        everything = [r for rs in per_delivery for r in rs]
        gets = [r for r in everything if r.method == "GET"]
        assert any(r.conditional for r in gets)
        assert any(r.status == 304 for r in gets)
        assert all(r.status in (200, 201, 204, 304, 404) for r in everything)
        # The status comment of each work item: posted once, then edited by its id (no
        # comment list read whole to find it again).
        for number in (1, 2):
            status = [c for c in fake.comments(REPO, number) if "/status -->" in c["body"]]
            assert len(status) == 1 and "design-approval" in status[0]["body"]
            assert any(r.method == "PATCH" and r.path.endswith(f"/comments/{status[0]['id']}")
                       for r in everything)
        assert not [r for r in per_delivery[1]
                    if r.method == "GET" and r.path.endswith("/issues/1/comments")
                    and "since=" not in r.query]
