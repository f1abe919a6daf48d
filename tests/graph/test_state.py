"""One StateStore interface, three backends: the same behaviour from each."""

import pytest

from graph.state import MemoryStateStore, StateError, WorkItemState
from the_loop.stores import FileStateStore
from workers.state import RedisStateStore


@pytest.fixture(params=["memory", "file", "redis"])
def store(request, tmp_path):
    if request.param == "memory":
        return MemoryStateStore()
    if request.param == "file":
        return FileStateStore(tmp_path)
    ns = request.getfixturevalue("redis_ns")
    return RedisStateStore(ns.client, ns.prefix)


def test_state_round_trips(store):
    state = WorkItemState.new("github:o/r#1", "digest", "requirements")
    state.decisions.append({"outcome": "approved", "actor": "alice"})
    store.save(state)
    loaded = store.load("github:o/r#1")
    assert loaded.to_dict() == state.to_dict()
    assert loaded.history[0]["via"] == "enrolled" and loaded.visit == 1
    assert store.load("github:o/r#2") is None


def test_event_log_is_append_only_with_the_envelope(store):
    a = store.append_event("github:o/r#1", "delivery.received", {"delivery": "d1"}, "d1")
    b = store.append_event("github:o/r#1", "edge.taken", {"from": "a", "to": "b"}, None)
    events = store.events("github:o/r#1")
    assert [e.seq for e in events] == [1, 2]
    assert [e.id for e in events] == [a.id, b.id]
    assert events[0].to_dict().keys() >= {"seq", "id", "type", "data", "caused_by"}
    assert events[0].caused_by == "d1"
    assert store.events("github:o/r#9") == []


def test_unparseable_file_state_is_a_state_error(tmp_path):
    store = FileStateStore(tmp_path)
    store.state_path("x").parent.mkdir(parents=True, exist_ok=True)
    store.state_path("x").write_text("{not json")
    with pytest.raises(StateError, match="not valid JSON"):
        store.load("x")
