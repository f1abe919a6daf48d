"""A graph change with work items in flight: an item whose node keeps its boundaries goes
on (recorded); one whose node changed is held and escalated with the nodes that no
longer match, until ``migrate`` moves it explicitly, recorded like a forced move."""

from __future__ import annotations

from foundation.hooks import REGISTRY
from graph.compile import compile_graph
from graph.runtime import Runtime
from graph.state import Past
from tests.graph.test_runtime import REF, REPO, REQUIREMENTS, setup
from the_loop.graphs import default_graph_path

PDLC = default_graph_path().read_text()


def graph(text):
    return compile_graph(text, source="deployed.yaml", registry=REGISTRY)


def at_design():
    gh, config, item, rt = setup()
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS)
    rt.enrol(item, config, None)
    state = rt.store.load(REF)
    state.current_node = "design"  # an item in flight at an agent node
    rt.store.save(state)
    return gh, config, item, rt


def test_an_unchanged_node_goes_on_and_a_changed_one_is_held_until_migrated():
    gh, config, item, rt = at_design()
    pinned = rt.store.load(REF)
    assert pinned.node_digests == rt.graph.node_digests()
    other_text = PDLC.replace("    freshness: 72h          # waiting longer is stale: the "
                              "approvers are reminded\n", "", 1)  # requirements-approval
    other = graph(other_text)
    assert other.digest != rt.graph.digest
    rt2 = Runtime(other, rt.store)
    rt2.advance(item, config, None)
    state = rt.store.load(REF)
    assert state.graph_digest == other.digest and state.drift is None
    changed = [e.data for e in rt.store.events(REF) if e.type == "graph.changed"]
    assert changed[-1]["migrated"] == "unchanged-node" and changed[-1]["node"] == "design"

    moved = graph(other_text.replace("      - {hook: lint-artifacts, with: {diagrams: true}}\n", "",
                                     1))  # design's exit
    rt3 = Runtime(moved, rt.store)
    before = len([e for e in rt.store.events(REF) if e.type == "chain.completed"])
    r = rt3.advance(item, config, None)
    state = rt.store.load(REF)
    assert r.status == "escalated" and state.drift["nodes"] == ["design"]
    assert state.graph_digest == other.digest  # still pinned: nothing silently drifts
    assert "the-loop state migrate" in state.escalated["reason"]
    rt3.advance(item, config, None)
    assert len([e for e in rt.store.events(REF) if e.type == "chain.completed"]) == before
    assert [e.type for e in rt.store.events(REF)].count("graph.drift") == 1

    plan = rt3.migrate(item, config, reason="lint moved to CI", dry_run=True)
    assert plan["changed"] == ["design"] and plan["reentered"] and plan["dry_run"]
    assert rt.store.load(REF).drift is not None  # a dry run writes nothing

    done = rt3.migrate(item, config, reason="lint moved to CI", operator="ops")
    state = rt.store.load(REF)
    assert done["target"] == "design" and state.graph_digest == moved.digest
    assert state.drift is None and state.escalated is None
    assert Past.read(rt.store, REF).migrations[-1]["reason"] == "lint moved to CI"
    last = Past.read(rt.store, REF).history[-1]
    assert last == {**last, "node": "design", "via": "migrated", "forced": True}
    types = [e.type for e in rt.store.events(REF)]
    assert "work-item.migrated" in types
    assert any(e.type == "checkpoint" and e.data.get("boundary") == "migrated"
               for e in rt.store.events(REF))
    assert any("moved this work item to the deployed graph" in c["body"]
               for c in gh.comments(REPO, 1))
    r = rt3.advance(item, config, None)
    assert r.status != "escalated"  # evaluated again under the new graph


def test_a_removed_node_needs_a_target():
    gh, config, item, rt = at_design()
    gone = graph(PDLC.replace("  - id: design\n", "  - id: design-v2\n", 1)
                 .replace("to: design,", "to: design-v2,")
                 .replace("from: design,", "from: design-v2,"))
    rt2 = Runtime(gone, rt.store)
    assert rt2.advance(item, config, None).status == "escalated"
    try:
        rt2.migrate(item, config, reason="renamed")
    except ValueError as exc:
        assert "--node" in str(exc) and "design-v2" in str(exc)
    else:
        raise AssertionError("a migration to a missing node was accepted")
    rt2.migrate(item, config, reason="renamed", node="design-v2")
    assert rt.store.load(REF).current_node == "design-v2"
