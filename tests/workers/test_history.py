"""A delivery's cost does not grow with its work item's past: the state record holds
where the item is (bounded however many events it has), each outbox effect is its own
small write, a retried delivery consults the log's index instead of reading the log, a
done item's log expires after ``THE_LOOP_RETENTION`` (``the-loop state export`` saves
it first), and the past is still shown where it is asked for (the state command, the
API, recompute). Real Redis, the worker built by ``build_processor``, the in-process
fake GitHub."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.record import DeliveryRecord
from foundation.settings import WorkerSettings
from graph.context import HookConfig
from graph.model import Status
from graph.runtime import Runtime
from graph.state import DECIDED_KEPT, Past, WorkItemState
from tests.conftest import act_as, gh_label, load_payload
from the_loop.cli import main
from the_loop.graphs import load_graph
from the_loop.local import parse_ref
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

REPO = "Codertocat/Hello-World"
REF = f"github:{REPO}#1"
COLLABORATORS = ("version: 1\nroles:\n  approver:\n"
                 "    - {name: Coder, github: Codertocat}\n")
REQUIREMENTS = "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n"


class Item:
    """One work item walked by the real processor against the fake GitHub."""

    def __init__(self, redis_ns: Any) -> None:
        self.gh = FakeGitHub()
        self.gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
        self.gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
        settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
        self.processor = build_processor(settings, redis_ns.client, load_graph(),
                                         lambda _i: self.gh)
        self.queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                                   prefix=redis_ns.prefix)
        self.store: RedisStateStore = self.processor.store
        self.token = redis_ns.token
        self.cid = 5000

    def deliver(self, event: str, payload: dict[str, Any]) -> DeliveryRecord:
        body = json.dumps(payload).encode()
        parsed = parse_delivery({"X-GitHub-Event": event,
                                 "X-GitHub-Delivery": f"{self.token}-{uuid.uuid4()}",
                                 "Content-Type": "application/json"}, body)
        assert self.queue.enqueue(parsed)
        self.processor.drain(parsed.work_item)
        return DeliveryRecord.of(parsed, time.time())

    def comment(self, body: str) -> DeliveryRecord:
        p = load_payload("issue_comment", "created")
        p["issue"].setdefault("labels", []).append(gh_label("the-loop"))
        self.cid += 1
        p["comment"].update(id=self.cid, body=body)
        act_as(p, "Codertocat")
        return self.deliver("issue_comment", p)

    def enrol(self) -> None:
        p = load_payload("issues", "labeled")
        p["issue"].setdefault("labels", []).append(gh_label("the-loop"))
        p["label"] = gh_label("the-loop")
        self.deliver("issues", p)
        assert self.at() == ("requirements-approval", "waiting")

    def at(self) -> tuple[str, str]:
        state = self.store.load(REF)
        assert state is not None
        return state.current_node, str(state.status)

    def loop(self, turn: int) -> None:
        """Changes requested, the artifact changed, back at the gate."""
        self.comment("/request-changes\nplease say more")
        assert self.at()[0] == "requirements"
        self.gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS + f"\nrev {turn}\n",
                         ref="master")
        self.comment("updated")
        assert self.at() == ("requirements-approval", "waiting")

    def record_bytes(self) -> int:
        r = self.store.redis
        return int(r.strlen(self.store.state_key(REF))) + sum(
            len(k) + len(v) for k, v in r.hgetall(self.store.effects_key(REF)).items())


@pytest.fixture
def item(redis_ns) -> Item:
    return Item(redis_ns)


def test_the_state_record_stays_bounded_as_events_grow(item):
    item.enrol()
    # Past the newest decisions whose sources the record keeps (DECIDED_KEPT).
    for turn in range(DECIDED_KEPT):
        item.loop(turn)
    early, early_events = item.record_bytes(), len(item.store.events(REF))
    first = json.loads(item.store.redis.get(item.store.state_key(REF)))
    for turn in range(DECIDED_KEPT, 3 * DECIDED_KEPT):
        item.loop(turn)
    late, late_events = item.record_bytes(), len(item.store.events(REF))
    assert late_events > 2.5 * early_events
    # Counters gain a digit; nothing is kept per past step.
    raw = json.loads(item.store.redis.get(item.store.state_key(REF)))
    assert late <= early + 64, {k: (first[k], v) for k, v in raw.items() if first.get(k) != v}
    assert not {"history", "decisions", "forced", "migrations"} & set(raw)
    assert raw["effects"] == {}  # the outbox lives in its own hash, one field per effect
    past = Past.read(item.store, REF)
    loops = 3 * DECIDED_KEPT
    assert [d["outcome"] for d in past.decisions] == ["changes-requested"] * loops
    assert [h["node"] for h in past.history].count("requirements-approval") == loops + 1
    assert raw["decision_count"] == loops and len(raw["standing"]) == 1


def test_a_transition_saves_the_state_a_few_times_and_each_effect_on_its_own(item,
                                                                             monkeypatch):
    item.enrol()
    saves, effects = [], []
    real_save, real_effect = RedisStateStore.save, RedisStateStore.save_effect
    monkeypatch.setattr(RedisStateStore, "save",
                        lambda self, state: (saves.append(1), real_save(self, state)))
    monkeypatch.setattr(RedisStateStore, "save_effect", lambda self, state, effect: (
        effects.append(effect), real_effect(self, state, effect)))
    item.comment("/approve")
    assert item.at()[0] == "design"
    # Every write the transition made is recorded before and after: on its own.
    assert len(effects) >= 2 * 4, effects
    assert len(saves) <= 6, len(saves)
    stored = item.store.redis.hgetall(item.store.effects_key(REF))
    assert {k.decode() for k in stored} == set(item.store.load(REF).effects)


def test_a_retried_delivery_consults_the_index_and_never_reads_the_event_log(item,
                                                                          monkeypatch):
    item.enrol()
    approve = item.comment("/approve")
    logged = len(item.store.events(REF))
    consulted = []
    real = RedisStateStore.caused_by

    def never(self, ref):
        raise AssertionError("the whole event log was read on the delivery path")

    monkeypatch.setattr(RedisStateStore, "events", never)
    monkeypatch.setattr(RedisStateStore, "caused_by", lambda self, ref, delivery: (
        consulted.append(delivery), real(self, ref, delivery))[1])
    handled = item.processor.handle(approve, replay=True)
    monkeypatch.undo()
    assert handled.outcome == "advanced"
    assert approve.delivery_id in consulted
    events = item.store.events(REF)
    received = [e for e in events if e.type == "delivery.received"
                and e.caused_by == approve.delivery_id]
    assert len(received) == 1  # the index said it was logged already
    assert [d["outcome"] for d in Past.read(item.store, REF).decisions] == ["approved"]
    assert len(events) - logged <= 3  # a tick: a chain result at most, no second decision


def test_a_done_items_log_expires_after_the_retention_and_an_active_ones_does_not(redis_ns):
    store = RedisStateStore(redis_ns.client, redis_ns.prefix, retention=3600)
    graph = load_graph()
    active = WorkItemState.new("github:o/r#1", graph.digest, graph.start)
    done = WorkItemState.new("github:o/r#2", graph.digest, graph.start)
    for state in (active, done):
        store.append_event(state.ref, "delivery.received", {"delivery": "d"}, "d")
    done.status = Status.DONE
    store.save(active)
    store.save(done)
    r = redis_ns.client
    assert r.ttl(store.events_key(active.ref)) == -1  # kept
    assert 0 < r.ttl(store.events_key(done.ref)) <= 3600
    assert 0 < r.ttl(store.keys.event_types(done.ref)) <= 3600
    assert r.ttl(store.state_key(done.ref)) == -1  # the record says it is done
    store.append_event(done.ref, "delivery.received", {"delivery": "e"}, "e")
    assert 0 < r.ttl(store.events_key(done.ref)) <= 3600  # an append keeps the expiry
    done.status = Status.ACTIVE  # moved again (a forced move): its log is kept again
    store.save(done)
    assert r.ttl(store.events_key(done.ref)) == -1


def test_the_worker_store_takes_the_retention_setting(redis_ns):
    from foundation.settings import Settings, SettingsError

    env = {"REDIS_URL": redis_ns.url, "THE_LOOP_REDIS_PREFIX": redis_ns.prefix}
    assert Settings.from_env(env, process="worker").worker.retention == 90 * 86400
    settings = Settings.from_env({**env, "THE_LOOP_RETENTION": "36h"}, process="worker")
    assert settings.worker.retention == 36 * 3600
    store = build_processor(settings.worker, redis_ns.client, load_graph(),
                            lambda _i: FakeGitHub()).store
    assert store.retention == 36 * 3600
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({**env, "THE_LOOP_RETENTION": "forever"}, process="worker")
    assert "THE_LOOP_RETENTION" in str(refused.value) and "forever" not in str(refused.value)


@pytest.fixture
def deployment(monkeypatch, redis_ns):
    monkeypatch.setenv("REDIS_URL", redis_ns.url)
    monkeypatch.setenv("THE_LOOP_REDIS_PREFIX", redis_ns.prefix)
    monkeypatch.setenv("THE_LOOP_QUEUE", redis_ns.queue_name)
    for name in ("GH_TOKEN", "GITHUB_TOKEN", "THE_LOOP_GITHUB_APP_ID", "THE_LOOP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    runtime = Runtime(load_graph(), store)
    runtime.enrol(parse_ref(REF), HookConfig(), None)
    runtime.force(parse_ref(REF), HookConfig(), "design", "reviewed offline")
    return store


def test_state_export_round_trips_the_state_and_the_whole_log(deployment, tmp_path):
    store = deployment
    printed = CliRunner().invoke(main, ["state", "export", REF])
    assert printed.exit_code == 0, printed.output
    doc = json.loads(printed.output)
    assert doc["ref"] == REF
    assert WorkItemState.from_dict(doc["state"]).to_dict() == store.load(REF).to_dict()
    assert doc["events"] == [e.to_dict() for e in store.events(REF)]
    assert Past.of(store.events(REF)).forced[0]["to"] == "design"
    target = tmp_path / "item.json"
    saved = CliRunner().invoke(main, ["state", "export", REF, "--output", str(target)])
    assert saved.exit_code == 0 and json.loads(target.read_text()) == doc
    assert target.stat().st_mode & 0o777 == 0o600
    unknown = CliRunner().invoke(main, ["state", "export", f"github:{REPO}#99"])
    assert unknown.exit_code != 0 and "is not a work item" in unknown.output


def test_the_state_command_shows_the_past_from_the_log(deployment):
    out = CliRunner().invoke(main, ["state", REF, "--json"])
    doc = json.loads(out.output)
    assert [h["node"] for h in doc["history"]] == ["requirements", "design"]
    assert doc["history"][-1]["forced"] is True
    assert doc["forced"][0]["bypassed"] == ["requirements-approval"]
    assert "history" not in doc["state"]
    text = CliRunner().invoke(main, ["state", REF]).output
    assert "entered requirements via enrolled" in text
    assert "entered design via forced (forced)" in text


def test_a_record_of_the_older_format_moves_its_past_into_the_log_once(redis_ns):
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)
    graph = load_graph()
    state = WorkItemState.new(REF, graph.digest, "requirements-approval")
    old = json.loads(state.to_json())
    for key in ("standing", "decision_count", "decided", "visit_started", "forced_count",
                "last_forced", "migration_count"):
        old.pop(key)
    old["history"] = [{"node": "requirements", "via": "enrolled", "at": 1.0, "forced": False},
                      {"node": "requirements-approval", "via": "pass", "at": 2.0,
                       "forced": False}]
    old["decisions"] = [{"node": "requirements-approval", "outcome": "changes-requested",
                         "actor": "alice", "sources": ["issue_comment:9"], "signature": "s"}]
    redis_ns.client.set(store.state_key(REF), json.dumps(old))
    unmoved = store.load(REF)  # read as it is (the state command, the API): shown all the same
    assert Past.read(store, REF, unmoved.legacy).decisions == old["decisions"]
    runtime = Runtime(graph, store)
    loaded = runtime.load(parse_ref(REF), HookConfig())
    assert loaded.visit_started == 2.0 and loaded.decided_sources() == {"issue_comment:9"}
    assert loaded.standing["requirements-approval"]["decision"]["signature"] == "s"
    runtime.load(parse_ref(REF), HookConfig())  # once only
    assert [e.type for e in store.events(REF)] == ["history.imported"]
    past = Past.read(store, REF)
    assert [h["node"] for h in past.history] == ["requirements", "requirements-approval"]
    assert past.decisions == old["decisions"]
    assert "history" not in json.loads(redis_ns.client.get(store.state_key(REF)))
