"""foundation.inbox.record and .keys: the delivery record's one encode and one decode, and
the key layout (pure: no Redis)."""

from __future__ import annotations

import re

from foundation.inbox.keys import SHARED_INBOX, Keys
from foundation.inbox.record import FIELDS, STORED, DeliveryRecord
from foundation.inbox.scripts import source, step_source
from tests.conftest import load_fixture
from webhook.events import parse_delivery

HEADERS = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1",
           "Content-Type": "application/json"}


def test_record_round_trips_through_its_redis_form() -> None:
    delivery = parse_delivery(HEADERS, load_fixture("issues", "opened"))
    record = DeliveryRecord.of(delivery, 1700000000.25)
    flat = record.to_redis()
    stored = dict(zip(flat[::2], flat[1::2], strict=True))
    assert tuple(stored) == STORED
    as_redis = {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in stored.items()}
    assert DeliveryRecord.from_redis(as_redis) == record
    assert record.payload() == delivery.payload
    assert (record.work_item, record.repository, record.installation_id) == (
        "github:Codertocat/Hello-World#1", "Codertocat/Hello-World", None)


def test_decode_reads_bookkeeping_and_absent_values() -> None:
    record = DeliveryRecord.from_redis({
        b"event": b"push", b"action": b"", b"installation_id": b"7", b"work_item": b"",
        b"attempts": b"2", b"started": b"1", b"last_error": b"github get-file: 502",
    }, "d-2")
    assert record == DeliveryRecord("d-2", "push", installation_id=7, attempts=2,
                                    last_error="github get-file: 502")
    assert record.body is None


def test_an_expired_record_decodes_to_none() -> None:
    assert DeliveryRecord.from_redis({b"attempts": b"3", b"started": b"1"}) is None
    assert DeliveryRecord.from_redis({}) is None


def test_keys_spell_the_layout() -> None:
    keys = Keys("P", "Q")
    assert keys.seen("ID") == "P:delivery:seen:ID"
    assert keys.delivery("ID") == "P:delivery:ID"
    assert keys.inbox("github:o/r#1") == "P:inbox:github:o/r#1"
    assert keys.inbox(None) == keys.inbox(SHARED_INBOX) == "P:inbox:~"
    assert (keys.ready, keys.inboxes, keys.wake) == ("P:ready", "P:inboxes", "P:wake")
    assert (keys.lock("R"), keys.backoff("R"), keys.parked("R")) == (
        "P:lock:R", "P:backoff:R", "P:parked:R")
    assert (keys.failed, keys.retry) == ("P:deliveries:failed", "P:deliveries:retry")
    assert (keys.workers, keys.worker("w"), keys.reaper, keys.stuck("j")) == (
        "P:workers", "P:worker:w", "P:reaper", "P:stuck:j")
    # Lua builds per-ref names from these prefixes, in this order.
    assert keys.per_ref() == ("P:inbox:", "P:lock:", "P:backoff:", "P:parked:", "P:delivery:")


def test_step_script_gets_the_fields_and_the_routes_written_in() -> None:
    text = step_source([("issues", "opened"), ("push", None)])
    assert '["issues opened"] = true' in text and '["push *"] = true' in text
    assert "--[[" not in text
    fields = re.search(r"local FIELDS = \{(.*)\}", text).group(1)
    assert tuple(re.findall(r'"(\w+)"', fields)) == FIELDS
    assert "--[[" in source("step")  # the file itself keeps the placeholders
