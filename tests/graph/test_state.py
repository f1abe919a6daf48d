"""One StateStore interface, three backends: the same behaviour from each."""

import hashlib
import json
import os
import stat

import pytest

from graph.context import HookConfig
from graph.model import WorkItem
from graph.runtime import Runtime
from graph.state import MemoryStateStore, StateError, WorkItemState
from the_loop.graphs import load_graph
from the_loop.stores import FileStateStore, LocalFiles
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
    state.record_decision({"node": "gate", "outcome": "approved", "actor": "alice"})
    store.save(state)
    loaded = store.load("github:o/r#1")
    assert loaded.to_dict() == state.to_dict()
    assert loaded.standing["gate"]["decision"]["actor"] == "alice" and loaded.visit == 1
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


# -- local files: modes and seals ----------------------------------------------------------


def test_the_file_store_and_event_log_are_0600_in_0700_directories(tmp_path):
    store = FileStateStore(tmp_path / "repo/.the-loop/state")
    store.save(WorkItemState.new("github:o/r#1", "d", "requirements"))
    store.append_event("github:o/r#1", "edge.taken", {"from": "a", "to": "b"})
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    for path in (store.state_path("github:o/r#1"), store.log_path("github:o/r#1")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # A directory and log an older the-loop left readable are tightened.
    os.chmod(store.directory, 0o755)
    os.chmod(store.log_path("github:o/r#1"), 0o644)
    store.append_event("github:o/r#1", "edge.taken", {"from": "b", "to": "c"})
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.log_path("github:o/r#1").stat().st_mode) == 0o600


def test_a_state_record_carries_a_seal_over_its_canonical_content_keyed_when_configured(
        tmp_path):
    plain = FileStateStore(tmp_path / "plain")
    keyed = FileStateStore(tmp_path / "keyed", seal_key="k" * 32)
    state = WorkItemState.new("github:o/r#1", "d", "requirements")
    plain.save(state)
    keyed.save(state)
    unkeyed_doc = json.loads(plain.state_path(state.ref).read_text())
    keyed_doc = json.loads(keyed.state_path(state.ref).read_text())
    content = {k: v for k, v in unkeyed_doc.items() if k != "seal"}
    assert unkeyed_doc["seal"] == "sha256:" + hashlib.sha256(json.dumps(
        content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert keyed_doc["seal"].startswith("hmac-sha256:")
    assert "k" * 32 not in keyed.state_path(state.ref).read_text()
    assert "k" * 32 not in repr(keyed)
    assert keyed.load(state.ref).current_node == "requirements"
    # Sealed with another key (or none): fails closed.
    with pytest.raises(StateError, match="fails its seal"):
        FileStateStore(tmp_path / "keyed", seal_key="other" * 8).load(state.ref)
    with pytest.raises(StateError, match="fails its seal"):
        FileStateStore(tmp_path / "keyed").load(state.ref)


def test_a_record_failing_its_seal_is_treated_like_one_that_fails_to_parse(tmp_path):
    """Given a state file edited outside the-loop (valid JSON, wrong seal), and one with
    no seal at all
    When the runtime loads it
    Then it fails closed: the file is kept aside, a warning is logged and recorded, and
    the state is reconstructed from the artifacts' verified records."""
    (tmp_path / "specs/1").mkdir(parents=True)
    (tmp_path / "specs/1/requirements.md").write_text(
        "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n")
    store = FileStateStore(tmp_path / "state", seal_key="s" * 32)
    rt = Runtime(load_graph(), store)
    item = WorkItem("github:o/r#1", 1, None, spec_dir="specs/1")
    config = HookConfig(files=LocalFiles(tmp_path))
    rt.enrol(item, config, None, repo=tmp_path)
    path = store.state_path(item.ref)
    doc = json.loads(path.read_text())
    doc.update(current_node="done", status="done")  # forged: the seal no longer matches
    path.write_text(json.dumps(doc))
    with pytest.raises(StateError, match="fails its seal"):
        store.load(item.ref)
    state = rt.load(item, config, repo=tmp_path)
    assert state.current_node == "requirements-approval"  # the first unmet node
    [kept] = store.directory.glob("*.corrupt-*.json")
    assert json.loads(kept.read_text())["current_node"] == "done"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    reconstructed = [e for e in store.events(item.ref) if e.type == "state.reconstructed"]
    assert reconstructed and reconstructed[-1].data["kept_aside"] == str(kept)
    assert store.load(item.ref).current_node == "requirements-approval"  # sealed again

    doc.pop("seal")
    path.write_text(json.dumps(doc))
    with pytest.raises(StateError, match="has no seal"):
        store.load(item.ref)


def test_the_file_store_appends_in_constant_time_without_reading_the_log(tmp_path,
                                                                        monkeypatch):
    import builtins
    import os
    from pathlib import Path

    store = FileStateStore(tmp_path)
    ref = "github:o/r#1"
    store.append_event(ref, "first", {"n": 0})
    log = store.log_path(ref)
    reads: list[str] = []
    real_os_open, real_open = os.open, builtins.open
    real_read_text, real_read_bytes, real_path_open = Path.read_text, Path.read_bytes, Path.open

    def os_open(path, flags, *args, **kwargs):
        if Path(path) == log and not flags & (os.O_WRONLY | os.O_RDWR):
            reads.append("os.open")
        return real_os_open(path, flags, *args, **kwargs)

    def any_open(path, mode="r", *args, **kwargs):
        if isinstance(path, (str, Path)) and Path(path) == log and set(mode) & {"r", "+"}:
            reads.append("open")
        return real_open(path, mode, *args, **kwargs)

    def watched(real, name):
        def read(self, *args, **kwargs):
            if self == log:
                reads.append(name)
            return real(self, *args, **kwargs)
        return read

    def no_events(self, ref):
        raise AssertionError("append read the whole event log")

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", any_open)
    monkeypatch.setattr(Path, "read_text", watched(real_read_text, "read_text"))
    monkeypatch.setattr(Path, "read_bytes", watched(real_read_bytes, "read_bytes"))
    monkeypatch.setattr(Path, "open", watched(real_path_open, "Path.open"))
    monkeypatch.setattr(FileStateStore, "events", no_events)
    seqs = [store.append_event(ref, "next", {"n": n}).seq for n in range(1, 201)]
    monkeypatch.undo()
    assert reads == []
    assert seqs == list(range(2, 202))
    assert [e.seq for e in store.events(ref)] == list(range(1, 202))
    assert [e.data["n"] for e in store.events(ref)] == list(range(201))


def test_a_file_log_written_before_the_counter_goes_on_numbering(tmp_path):
    store = FileStateStore(tmp_path)
    ref = "github:o/r#1"
    for n in range(3):
        store.append_event(ref, "old", {"n": n})
    store.seq_path(ref).unlink()  # as an older the-loop left it
    assert store.append_event(ref, "new", {}).seq == 4
    assert [e.seq for e in store.events(ref)] == [1, 2, 3, 4]
