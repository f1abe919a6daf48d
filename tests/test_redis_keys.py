"""Every Redis key of every store, byte for byte as deployments have them; and the
registry that gives each key namespace to one store (:mod:`foundation.redis.namespaces`).

The expected strings were produced by the single ``Keys`` class that spelled every key
before each store took its own: a key that changes strands an existing deployment's data.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest

from foundation.inbox.keys import Keys
from foundation.redis.namespaces import NAMESPACES, KeySpace, Namespaces, NamespaceTaken, owns
from foundation.turns import TurnKeys
from graph.errors import LoopError
from integrations.github_cache import CacheKeys
from integrations.throttle import ThrottleKeys
from workers.ci import CommitKeys
from workers.identities import IdentityKeys
from workers.reconcile import ReconcileKeys
from workers.state import StateKeys

REF = "github:o/r#7"

#: (key class, method or property, arguments, the key) for prefix ``P``, queue ``Q``.
EXPECTED: list[tuple[type[KeySpace], str, tuple, object]] = [
    # the delivery protocol
    (Keys, "delivery_prefix", (), "P:delivery:"),
    (Keys, "inbox_prefix", (), "P:inbox:"),
    (Keys, "lock_prefix", (), "P:lock:"),
    (Keys, "backoff_prefix", (), "P:backoff:"),
    (Keys, "parked_prefix", (), "P:parked:"),
    (Keys, "ready", (), "P:ready"),
    (Keys, "inboxes", (), "P:inboxes"),
    (Keys, "wake", (), "P:wake"),
    (Keys, "failed", (), "P:deliveries:failed"),
    (Keys, "retry", (), "P:deliveries:retry"),
    (Keys, "invalid", (), "P:deliveries:invalid"),
    (Keys, "workers", (), "P:workers"),
    (Keys, "reaper", (), "P:reaper"),
    (Keys, "seen", ("D1",), "P:delivery:seen:D1"),
    (Keys, "delivery", ("D1",), "P:delivery:D1"),
    (Keys, "inbox", (REF,), "P:inbox:github:o/r#7"),
    (Keys, "inbox", (None,), "P:inbox:~"),
    (Keys, "lock", (REF,), "P:lock:github:o/r#7"),
    (Keys, "backoff", (REF,), "P:backoff:github:o/r#7"),
    (Keys, "parked", (REF,), "P:parked:github:o/r#7"),
    (Keys, "per_ref", (), ("P:inbox:", "P:lock:", "P:backoff:", "P:parked:", "P:delivery:")),
    (Keys, "worker", ("w1",), "P:worker:w1"),
    (Keys, "stuck", ("J1",), "P:stuck:J1"),
    # agent turns
    (TurnKeys, "turns", (), "P:turns"),
    (TurnKeys, "rounds", (), "P:turns:rounds"),
    (TurnKeys, "turn", (REF,), "P:turn:github:o/r#7"),
    (TurnKeys, "turn_ordered", ("O1",), "P:turn:ordered:O1"),
    (TurnKeys, "turn_retired", (REF,), "P:turn:retired:github:o/r#7"),
    (TurnKeys, "turn_lock", (REF,), "P:turn-lock:github:o/r#7"),
    (TurnKeys, "runner_slots", (), "P:runner:slots"),
    (TurnKeys, "runner_slots", (42,), "P:runner:slots:42"),
    (TurnKeys, "workspace", (REF,), "P:workspace:github:o/r#7"),
    (TurnKeys, "alias", ("o/r", 9), "P:alias:o/r#9"),
    (TurnKeys, "turn_log", (REF,), "P:turn-log:github:o/r#7"),
    (TurnKeys, "job_refs", (), "P:turns:refs"),
    (TurnKeys, "affinity", (REF,), "P:affinity:github:o/r#7"),
    (TurnKeys, "runner_alive", ("host-1a2b3c4d",), "P:runner:alive:host-1a2b3c4d"),
    # the state store
    (StateKeys, "state_match", (), "P:state:*"),
    (StateKeys, "state_prefix", (), "P:state:"),
    (StateKeys, "state", (REF,), "P:state:github:o/r#7"),
    (StateKeys, "state_corrupt", (1700000000, REF), "P:state-corrupt:1700000000:github:o/r#7"),
    (StateKeys, "events", (REF,), "P:events:github:o/r#7"),
    (StateKeys, "effects", (REF,), "P:effects:github:o/r#7"),
    (StateKeys, "fence", (REF,), "P:fence:github:o/r#7"),
    (StateKeys, "event_types", (REF,), "P:event-types:github:o/r#7"),
    (StateKeys, "events_by", ("D1", REF), "P:events-by:D1:github:o/r#7"),
    (StateKeys, "due", (), "P:state-due"),
    (StateKeys, "due_backfilled", (), "P:state-due:backfilled"),
    # commits
    (CommitKeys, "head", ("o/r",), "P:head:o/r"),
    (CommitKeys, "ci", ("o/r", "abc"), "P:ci:o/r:abc"),
    (CommitKeys, "sha", ("o/r", "abc"), "P:sha:o/r:abc"),
    (CommitKeys, "ci_order", ("o/r", "abc"), "P:ci-order:o/r:abc"),
    (CommitKeys, "ci_run", ("o/r", "abc"), "P:ci-run:o/r:abc"),
    (CommitKeys, "ci_wait", ("o/r", "abc"), "P:ci-wait:o/r:abc"),
    # repositories, installations, accounts, the App
    (IdentityKeys, "repository", (5,), "P:repository:5"),
    (IdentityKeys, "repository_name", ("O/R",), "P:repository-name:o/r"),
    (IdentityKeys, "repository_key", ("O/R",), "P:repository-key:o/r"),
    (IdentityKeys, "installation", (6,), "P:installation:6"),
    (IdentityKeys, "installation_items", (6,), "P:installation-items:6"),
    (IdentityKeys, "account", ("Ann",), "P:account:ann"),
    (IdentityKeys, "account_checked", ("Ann",), "P:account-checked:ann"),
    (IdentityKeys, "app", (), "P:app"),
    # the reconciler of missed deliveries
    (ReconcileKeys, "lock", (), "P:reconcile:lock"),
    (ReconcileKeys, "state", (), "P:reconcile:state"),
    (ReconcileKeys, "asked", ("g-1",), "P:reconcile:asked:g-1"),
    # GitHub: the write throttle, the rate budget, the ETag cache
    (ThrottleKeys, "writes", ("b1",), "P:github:writes:b1"),
    (ThrottleKeys, "budget", ("b1",), "P:github:budget:b1"),
    (CacheKeys, "etag", ("b1", "dg"), "P:github:etag:b1:dg"),
]


def _key(cls: type[KeySpace], name: str, args: tuple) -> object:
    keys = Keys("P", "Q") if cls is Keys else cls("P")
    value = getattr(keys, name)
    return value(*args) if callable(value) else value


@pytest.mark.parametrize(("cls", "name", "args", "expected"), EXPECTED,
                         ids=[f"{c.__name__}.{n}{a}" for c, n, a, _ in EXPECTED])
def test_every_key_is_byte_identical_to_the_deployed_layout(cls, name, args, expected) -> None:
    assert _key(cls, name, args) == expected


def test_the_expected_keys_cover_every_key_of_every_store() -> None:
    """Each public method and property of each key class is in :data:`EXPECTED` (a key
    added later gets its expected string here)."""
    covered = {(cls, name) for cls, name, _, _ in EXPECTED}
    for cls in {cls for cls, *_ in EXPECTED}:
        names = {n for n in vars(cls) if not n.startswith("_") and n != "namespaces"} \
            - {f.name for f in fields(cls)}
        assert {(cls, n) for n in names} <= covered, cls


def test_each_store_claims_its_namespaces_once() -> None:
    owners = NAMESPACES.owners()
    for cls in {cls for cls, *_ in EXPECTED}:
        assert cls.namespaces and all(owners[ns] == cls.__module__ for ns in cls.namespaces)
    assert owners["fence"] == "workers.state" and owners["runner:slots"] == "foundation.turns"


def test_a_namespace_claimed_by_a_second_store_is_refused() -> None:
    registry = Namespaces()
    registry.claim("workers.state", ["state", "github:writes"])
    registry.claim("workers.state", ["state"])  # the owner imported again: a no-op
    for taken in ("state", "github", "github:writes", "github:writes:x"):
        with pytest.raises(NamespaceTaken) as refused:
            registry.claim("sample.other", [taken])
        assert isinstance(refused.value, LoopError)
        assert refused.value.holder == "workers.state"
    registry.claim("sample.other", ["github:etag", "states"])  # neighbours, not overlaps
    for malformed in ("", ":state", "state:", "st*te", "a b"):
        with pytest.raises(NamespaceTaken):
            registry.claim("sample.other", [malformed])
    assert registry.owners() == {"state": "workers.state", "github:writes": "workers.state",
                                 "github:etag": "sample.other", "states": "sample.other"}


def test_a_key_class_claims_at_definition() -> None:
    registry = Namespaces()

    @owns("sample", registry=registry)
    @dataclass(frozen=True, slots=True)
    class SampleKeys(KeySpace):
        def item(self, ref: str) -> str:
            return self.key("sample", ref)

    assert SampleKeys("P").item("r") == "P:sample:r" and SampleKeys.namespaces == ("sample",)
    assert registry.owners() == {"sample": __name__}
    elsewhere = type("OtherKeys", (KeySpace,), {"__module__": "sample.other"})
    with pytest.raises(NamespaceTaken, match="sample.other claims .* 'sample', which is "
                                             "held by tests.test_redis_keys"):
        owns("sample", registry=registry)(elsewhere)
