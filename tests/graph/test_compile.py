"""Compiling graphs: every structural error is a load error naming file, node and field."""

import random
import re

import pytest
from jsonschema import Draft202012Validator

from graph.compile import (
    GRAPH_VERSION,
    ID_PATTERN,
    AmbiguousEdgeWarning,
    GraphError,
    compile_graph,
    parse_graph,
    schema,
)
from graph.markers import effect_id, find_effect, marker
from graph.model import HookResult
from graph.registry import HookRegistry
from the_loop.graphs import default_graph_path, load_graph


def registry() -> HookRegistry:
    reg = HookRegistry()
    reg.hook("ok")(lambda ctx: HookResult.passed("ok"))
    reg.hook("decide", outcomes={"approved"}, params={"role"})(
        lambda ctx: HookResult.passed("decide", outcome="approved"))
    return reg


GOOD = """
name: g
nodes:
  - {id: a, exit: [ok]}
  - {id: b, actor: human, exit: [{hook: decide, with: {role: approver}}]}
  - {id: c, actor: system}
edges:
  - {from: a, to: b, on: pass}
  - {from: b, to: c, on: approved}
"""


def test_default_graph_compiles_with_the_spec_shape():
    g = load_graph()
    assert list(g.nodes) == ["requirements", "requirements-approval", "design",
                             "design-approval", "tasks", "implementation", "review", "done"]
    assert g.start == "requirements"
    assert g.node("design-approval").is_gate and g.node("design-approval").session == "inherit"
    assert g.edge("design-approval", "changes-requested").target == "design"
    assert g.is_terminal("done")
    assert "add-label" in g.required_operations()["github"]


def test_edges_keep_on_as_a_string_not_yaml11_boolean():
    g = compile_graph(GOOD, source="g.yaml", registry=registry())
    assert g.edge("a", "pass").target == "b"
    assert g.edge("b", "approved").target == "c"


def test_unknown_hook_fails_at_load():
    text = GOOD.replace("exit: [ok]", "exit: [no-such-hook]")
    with pytest.raises(GraphError) as err:
        compile_graph(text, source="g.yaml", registry=registry())
    msg = str(err.value)
    assert "g.yaml" in msg and "node 'a'" in msg and "no-such-hook" in msg


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("{from: a, to: b, on: pass}", "{from: a, to: zz, on: pass}", "unknown node 'zz'"),
        ("{from: b, to: c, on: approved}", "{from: b, to: c, on: rejected}", "'rejected'"),
        ("{id: c, actor: system}", "{id: c, actor: robot}", "field 'actor'"),
        ("{id: c, actor: system}", "{id: c, colour: red}", "unknown field 'colour'"),
        ("{id: c, actor: system}", "{id: a}", "duplicate id"),
        ("with: {role: approver}", "with: {rol: approver}", "unknown parameter 'rol'"),
        ("{from: a, to: b, on: pass}", "{from: a, to: b}", "missing field 'on'"),
    ],
)
def test_structural_errors_name_the_file_and_the_item(old, new, expected):
    with pytest.raises(GraphError) as err:
        compile_graph(GOOD.replace(old, new), source="g.yaml", registry=registry())
    assert expected in str(err.value)
    assert str(err.value).startswith("g.yaml")


def test_malformed_yaml_names_the_line():
    with pytest.raises(GraphError, match=r"g.yaml: malformed YAML at line \d+"):
        compile_graph("nodes: [\n  {id: a\n", source="g.yaml", registry=registry())


def test_ambiguous_edge_warns_and_first_declared_wins():
    text = GOOD + "  - {from: a, to: c, on: pass}\n"
    with pytest.warns(AmbiguousEdgeWarning):
        g = compile_graph(text, source="g.yaml", registry=registry())
    assert g.edge("a", "pass").target == "b"


def test_compiled_graph_is_immutable_and_digest_is_stable():
    g1 = compile_graph(GOOD, source="g.yaml", registry=registry())
    g2 = compile_graph(GOOD, source="other.yaml", registry=registry())
    assert g1.digest == g2.digest
    with pytest.raises(TypeError):
        g1.nodes["x"] = g1.nodes["a"]  # type: ignore[index]
    changed = compile_graph(GOOD.replace("{id: c, actor: system}", "{id: c, actor: human}"),
                            source="g.yaml", registry=registry())
    assert changed.digest != g1.digest


def test_unreadable_file_is_a_graph_error(tmp_path):
    with pytest.raises(GraphError, match="cannot read graph file"):
        load_graph(tmp_path / "missing.yaml")


# -- one shape authority: graph.schema.json ---------------------------------------------


def test_a_version_other_than_the_supported_one_is_rejected_naming_the_key():
    with pytest.raises(GraphError) as err:
        compile_graph("version: 7\n" + GOOD, source="g.yaml", registry=registry())
    assert str(err.value).startswith("g.yaml: field 'version' is 7")
    assert f"version {GRAPH_VERSION}" in str(err.value)
    assert compile_graph(f"version: {GRAPH_VERSION}\n" + GOOD, source="g.yaml",
                         registry=registry()).name == "g"


def test_a_node_id_with_a_space_is_rejected_naming_the_node_and_the_pattern():
    text = GOOD.replace("{id: a, exit: [ok]}", "{id: Design Review, exit: [ok]}").replace(
        "{from: a, to: b, on: pass}", "{from: Design Review, to: b, on: pass}")
    with pytest.raises(GraphError) as err:
        compile_graph(text, source="g.yaml", registry=registry())
    msg = str(err.value)
    assert msg.startswith("g.yaml: node 'Design Review': field 'id'")
    assert ID_PATTERN in msg


def test_the_compiler_and_the_shipped_schema_agree_on_the_default_graph():
    doc = parse_graph(default_graph_path().read_text(), "pdlc.yaml")
    Draft202012Validator(schema()).validate(doc)
    load_graph()  # and the compiler accepts it


@pytest.mark.parametrize("seed", range(20))
def test_every_node_id_the_schema_accepts_round_trips_through_the_effect_markers(seed):
    """Bug B1: a node id the markers could not find made replays post duplicates. Any id
    the schema accepts, in any effect id the runtime builds, is found in its marker."""
    rng = random.Random(seed)
    first, rest = "abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnopqrstuvwxyz0123456789-"
    pattern = re.compile(ID_PATTERN)
    refs = ["github:o/r#1", "github:Octo-Org/my.repo_name#12345", "local:specs/7"]
    for _ in range(50):
        node_id = rng.choice(first) + "".join(rng.choice(rest) for _ in range(rng.randrange(40)))
        assert pattern.fullmatch(node_id)
        compiled = compile_graph(f"nodes:\n  - {{id: '{node_id}', exit: [ok]}}\n",
                                 source="g.yaml", registry=registry())
        assert list(compiled.nodes) == [node_id]
        hook = rng.choice(["request-review", "log-entry@exit1", "record-decision"])
        effect = effect_id(rng.choice(refs), node_id, rng.randrange(1, 99), hook)
        assert find_effect(f"a comment\n\n{marker(effect)}") == effect
        assert find_effect(marker(f"{effect}/3")) == f"{effect}/3"


def test_approvals_is_a_gates_count_of_distinct_approvers():
    gate = GOOD.replace("{id: c, actor: system}", "{id: c, actor: human, approvals: 2}")
    g = compile_graph(gate, source="g.yaml", registry=registry())
    assert g.node("c").approvals == 2 and g.node("a").approvals == 1
    unset = compile_graph(GOOD.replace("{id: c, actor: system}", "{id: c, actor: human}"),
                          source="g.yaml", registry=registry())
    assert unset.digest != g.digest  # counted in the digest only when set
    with pytest.raises(GraphError, match="node 'c': approvals applies to a gate only"):
        compile_graph(GOOD.replace("{id: c, actor: system}",
                                   "{id: c, actor: system, approvals: 2}"),
                      source="g.yaml", registry=registry())
    with pytest.raises(GraphError, match="field .approvals. must be at least 1"):
        compile_graph(gate.replace("approvals: 2", "approvals: 0"), source="g.yaml",
                      registry=registry())
