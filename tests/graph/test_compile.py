"""Compiling graphs: every structural error is a load error naming file, node and field."""

import pytest

from graph.compile import AmbiguousEdgeWarning, GraphError, compile_graph, load_graph
from graph.model import HookResult
from graph.registry import HookRegistry


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
