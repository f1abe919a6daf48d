"""lint-artifacts: Markdown lint (PyMarkdown) and Mermaid diagrams parsed by Mermaid itself.

The diagram tests run the real parser (Node + the npm packages ``make venv`` installs into
``.venv/mermaid``); they fail, never skip, where it is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from foundation.hooks import lint_artifacts as la
from graph.compile import GraphError, compile_graph
from graph.context import HookConfig
from graph.model import HookContext, HookResult, WorkItem
from graph.registry import HookRegistry
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from tests.support.processes import start, stop
from the_loop.graphs import MissingTool, load_graph, missing_tools, require_tools

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "mermaid"
SPEC_DIAGRAMS = (FIXTURES / "spec_diagrams.md").read_text(encoding="utf-8")
REF = "local:lint-1"
DESIGN_OK = """\
# Design

## Overview

The runtime walks the graph.

```mermaid
flowchart TB
    A[enter node] --> B{exit chain}
    B -->|pass| C[next node]
    B -->|block| A
```

## Security design

Nothing is echoed.
"""
# Line 10 of the file becomes an arrow with no target.
DESIGN_BROKEN = DESIGN_OK.replace("    B -->|pass| C[next node]\n", "    B -->|pass|\n")
BROKEN_LINE = 10


class Files:
    """A FileReader serving artifacts from a dict."""

    revision = "test"

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)


def graph_file(tmp_path: Path, lint_with: str = "{diagrams: true}") -> Path:
    path = tmp_path / "lint.yaml"
    path.write_text(f"""\
name: lint-test
nodes:
  - id: design
    produces: [design.md]
    exit:
      - {{hook: validate-artifacts, with: {{sections: ["Overview", "Security design"]}}}}
      - {{hook: lint-artifacts, with: {lint_with}}}
  - id: done
    actor: system
edges:
  - {{from: design, to: done, on: pass}}
""", encoding="utf-8")
    return path


def run_hook(files: dict[str, str], params: dict, produces=("design.md",)) -> HookResult:
    node = compile_graph(
        f"nodes:\n  - {{id: design, produces: [{', '.join(produces)}], "
        "exit: [lint-artifacts]}\n",
        source="t.yaml", registry=_registry()).node("design")
    item = WorkItem(REF, spec_dir="specs/1")
    ctx = HookContext(item, node, "exit", None,
                      {p: f"specs/1/{p}" for p in produces}, None, None, (),
                      HookConfig(files=Files(files)), params=params)
    return la.lint_artifacts(ctx)


def _registry() -> HookRegistry:
    reg = HookRegistry()
    reg.hook("lint-artifacts", boundaries={"exit"},
             params={"markdown", "diagrams", "rules", "artifacts"})(la.lint_artifacts)
    return reg


# -- the Mermaid blocks of a document ----------------------------------------------------------


def test_mermaid_blocks_follow_commonmark_fences():
    doc = (
        "# T\n\n"
        "```mermaid\nflowchart TB\n  A --> B\n```\n\n"          # lines 3-6
        "````markdown\n```mermaid\nnot a block\n```\n````\n\n"   # a fence inside a fence
        "~~~ Mermaid\nsequenceDiagram\n  A->>B: x\n~~~\n\n"      # line 14, tilde, any case
        "   ```mermaid\n   pie\n     \"a\": 1\n   ```\n\n"       # indented three spaces
        "```python\nprint(1)\n```\n\n"
        "```mermaid\nstateDiagram-v2\n  [*] --> a\n"              # unclosed: to the end
    )
    blocks = la.mermaid_blocks(doc)
    assert [b.line for b in blocks] == [3, 14, 19, 28]
    assert blocks[0].text == "flowchart TB\n  A --> B\n"
    assert blocks[2].text == "pie\n  \"a\": 1\n"
    assert blocks[3].text.startswith("stateDiagram-v2")
    assert la.mermaid_blocks(SPEC_DIAGRAMS)[0].text.startswith("sequenceDiagram")
    assert len(la.mermaid_blocks(SPEC_DIAGRAMS)) == 3


# -- Markdown ------------------------------------------------------------------------------


def test_markdown_findings_carry_rule_id_line_and_path_but_no_artifact_text():
    text = "# Title\n## Sub heading\n\nSome <script>alert('pwned')</script> text.\n#Bad\n"
    msgs = la.lint_markdown("specs/1/design.md", text, la.DEFAULT_DISABLED_RULES)
    codes = [(m.code, m.text.split(":")[0]) for m in msgs]
    assert ("markdown-MD022", "specs/1/design.md line 1") in codes
    assert ("markdown-MD033", "specs/1/design.md line 4") in codes
    assert ("markdown-MD018", "specs/1/design.md line 5") in codes
    assert all(m.path == "specs/1/design.md" for m in msgs)
    joined = " ".join(m.text for m in msgs)
    assert "script" not in joined and "pwned" not in joined and "Sub heading" not in joined


def test_line_length_is_off_by_default_and_rules_replace_the_default():
    text = "# Title\n\n" + " ".join(["word"] * 60) + "\n"
    assert la.lint_markdown("a.md", text, la.DEFAULT_DISABLED_RULES) == []
    assert [m.code for m in la.lint_markdown("a.md", text, [])] == ["markdown-MD013"]


def test_front_matter_and_the_spec_fixture_lint_clean():
    text = "---\nlocked: true\n---\n\n# Design\n\n## Overview\n\nx\n"
    assert la.lint_markdown("a.md", text, la.DEFAULT_DISABLED_RULES) == []
    assert la.lint_markdown("a.md", SPEC_DIAGRAMS, la.DEFAULT_DISABLED_RULES) == []


def test_many_findings_are_capped_with_a_count():
    text = "# T\n\n" + "".join(f"#h{i}\n\n" for i in range(80))
    msgs = la.lint_markdown("a.md", text, ())
    assert len(msgs) == la.MAX_MARKDOWN_FINDINGS + 1
    assert msgs[-1].code == "markdown-more"


def test_hook_reports_every_finding_of_every_artifact_in_one_block_and_skips_missing():
    result = run_hook({"specs/1/design.md": "# D\n\n#x\n",
                       "specs/1/tasks.md": "# T\n\n* a\n\n- b\n"},
                      {}, produces=("design.md", "tasks.md", "missing.md", "data.yaml"))
    assert result.status == "block"
    assert {(m.path, m.code) for m in result.messages} == {
        ("specs/1/design.md", "markdown-MD018"), ("specs/1/tasks.md", "markdown-MD004")}
    assert result.data["checked"] == ["specs/1/design.md", "specs/1/tasks.md"]
    assert run_hook({}, {}).status == "skip"
    assert run_hook({"specs/1/design.md": "# D\n\nfine\n"}, {}).status == "pass"


# -- Mermaid --------------------------------------------------------------------------------


def test_mermaid_parser_accepts_the_three_diagram_kinds_and_locates_errors():
    texts = [
        "flowchart TB\n  A --> B\n",
        "sequenceDiagram\n  A->>B: hi\n",
        "stateDiagram-v2\n  [*] --> a: x<br/>y\n  a --> [*]\n",
        "%% a comment\n\nflowchart TB\n  A --> B\n  %% another\n  B -> \n",
        "sequenceDiagram\n  A->>: no target\n",
        "not-a-diagram\n  A --> B\n",
    ]
    version, results = la.parse_diagrams(texts)
    assert version and version.startswith("11.")
    assert [r["ok"] for r in results] == [True, True, True, False, False, False]
    assert [r.get("type") for r in results[:3]] == ["flowchart-v2", "sequence", "stateDiagram"]
    assert results[3]["line"] == 6 and results[3]["kind"] == "syntax"
    assert results[4]["line"] == 2 and "'ACTOR'" in results[4]["expected"]
    assert results[5]["kind"] == "unknown-diagram"


def test_the_specifications_own_diagrams_parse():
    """Given the specification's sequence, state and architecture diagrams
    When lint-artifacts checks them with Mermaid's parser
    Then all three parse and the hook passes."""
    version, results = la.parse_diagrams([d.text for d in la.mermaid_blocks(SPEC_DIAGRAMS)])
    assert [(r["ok"], r["type"]) for r in results] == [
        (True, "sequence"), (True, "stateDiagram"), (True, "flowchart-v2")]
    result = run_hook({"specs/1/design.md": SPEC_DIAGRAMS}, {"diagrams": True})
    assert result.status == "pass", result.messages
    assert result.data["diagrams"] == 3


def test_all_diagrams_of_all_artifacts_go_to_one_parser_process(monkeypatch):
    calls = []
    real_run = subprocess.run

    def counting_run(argv, **kwargs):
        calls.append(argv)
        assert isinstance(argv, list) and "shell" not in kwargs
        return real_run(argv, **kwargs)

    monkeypatch.setattr(la.subprocess, "run", counting_run)
    secret = "SECRET-TOKEN-4711"
    broken = f"# T\n\n```mermaid\nflowchart TB\n  {secret} -->\n```\n"
    result = run_hook({"specs/1/design.md": SPEC_DIAGRAMS, "specs/1/tasks.md": broken},
                      {"diagrams": True, "markdown": False}, produces=("design.md", "tasks.md"))
    assert len(calls) == 1
    assert result.status == "block"
    [finding] = result.messages
    assert finding.code == "mermaid-unparseable" and finding.path == "specs/1/tasks.md"
    assert finding.text.startswith("specs/1/tasks.md line 5: the mermaid diagram opened at "
                                   "line 3 does not parse")
    assert secret not in finding.text


def test_an_oversized_diagram_is_a_finding_without_running_the_parser(monkeypatch):
    monkeypatch.setattr(la, "parse_diagrams", lambda texts: pytest.fail("parser ran"))
    big = "# T\n\n```mermaid\nflowchart TB\n" + "  A --> B\n" * 6000 + "```\n"
    result = run_hook({"specs/1/design.md": big}, {"diagrams": True, "markdown": False})
    assert [m.code for m in result.messages] == ["mermaid-too-large"]


def test_a_parser_that_cannot_run_blocks_and_never_passes(tmp_path, monkeypatch):
    """Given a parser directory that looks installed but holds no working parser
    When the hook runs
    Then the node is blocked (retriable) with mermaid-not-checked, never passed."""
    for package in la.PARSER_PACKAGES:
        (tmp_path / "node_modules" / package).mkdir(parents=True)
        (tmp_path / "node_modules" / package / "package.json").write_text("{}")
    monkeypatch.setenv(la.PARSER_ENV, str(tmp_path))
    result = run_hook({"specs/1/design.md": SPEC_DIAGRAMS}, {"diagrams": True})
    assert result.status == "block" and result.retriable
    assert [(m.code, m.path) for m in result.messages] == [
        ("mermaid-not-checked", "specs/1/design.md")]
    assert "exited with 2" in result.messages[0].text


# -- load time ------------------------------------------------------------------------------


def test_a_graph_asking_for_diagrams_loads_without_the_parser_and_its_runners_refuse(
        tmp_path, monkeypatch):
    """Given no Mermaid parser where THE_LOOP_MERMAID_PARSER points
    When a graph whose design node asks lint-artifacts for diagrams is loaded
    Then it compiles (reading a graph needs no Node), and the start-up check of a process
    that runs its hooks fails naming the file, the node, the hook and what to install."""
    monkeypatch.setenv(la.PARSER_ENV, str(tmp_path / "nowhere"))
    path = graph_file(tmp_path)
    graph = load_graph(path)
    assert graph.node("design").exit[1].params["diagrams"] is True
    problems = missing_tools(graph)
    assert problems == [f"{path}: node 'design': exit[1]: hook 'lint-artifacts': "
                        + la.parser_unavailable()]
    with pytest.raises(MissingTool) as err:
        require_tools(graph)
    text = str(err.value)
    assert isinstance(err.value, GraphError) and "\n" not in text
    assert str(path) in text and "node 'design'" in text and "'lint-artifacts'" in text
    assert "make venv" in text and la.PARSER_ENV in text and "mermaid" in text
    assert "npm ci" in text and str(tmp_path / "nowhere" / "node_modules") in text
    # Markdown alone needs no parser.
    assert missing_tools(load_graph(graph_file(tmp_path, "{markdown: true}"))) == []


def test_with_the_parser_installed_nothing_is_missing():
    assert la.parser_unavailable() is None, la.parser_unavailable()
    assert missing_tools(load_graph()) == []
    require_tools(load_graph())


def test_without_node_on_path_the_graph_loads_and_the_start_up_check_says_install_node(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    graph = load_graph(graph_file(tmp_path))
    with pytest.raises(MissingTool, match="Node.js"):
        require_tools(graph)


@pytest.mark.parametrize(("lint_with", "problem"), [
    ("{markdown: yes}", "'markdown' must be true or false"),
    ("{markdown: false}", "nothing to check"),
    ("{rules: [MD999]}", "unknown Markdown rule 'MD999'"),
    ("{rules: MD013}", "must be a list"),
    ("{artifacts: design.md}", "'artifacts' must be a list"),
])
def test_bad_parameters_fail_at_load(tmp_path, lint_with, problem):
    with pytest.raises(GraphError, match=problem):
        load_graph(graph_file(tmp_path, lint_with))


def test_a_hook_check_message_becomes_a_load_error_naming_file_node_and_hook():
    reg = HookRegistry()
    seen = []

    def check(params):
        seen.append(dict(params))
        return "needs the frobnicator" if params.get("frob") else None

    reg.hook("h", params={"frob"}, check=check)(lambda ctx: HookResult.passed("h"))
    compile_graph("nodes:\n  - {id: a, exit: [h, {hook: h, with: {frob: false}}]}\n",
                  source="ok.yaml", registry=reg)
    assert seen == [{}, {"frob": False}]
    with pytest.raises(GraphError, match=r"^g\.yaml: node 'n': exit\[0\]: hook 'h': needs the "
                                         r"frobnicator$"):
        compile_graph("nodes:\n  - {id: n, exit: [{hook: h, with: {frob: true}}]}\n",
                      source="g.yaml", registry=reg)


# -- the specification's integration scenario ----------------------------------------------


def test_lint_hook_an_unparseable_mermaid_block_blocks_the_design_node(tmp_path):
    """Lint hook.
    Given a design artifact with an unparseable mermaid block
    When the design node's exit chain runs
    Then the node is blocked with a mermaid finding naming the file and line."""
    files = {"specs/1/design.md": DESIGN_BROKEN}
    config = HookConfig(files=Files(files))
    item = WorkItem(REF, spec_dir="specs/1")
    rt = Runtime(load_graph(graph_file(tmp_path)), MemoryStateStore())

    result = rt.enrol(item, config, None)

    assert result.status == "blocked" and result.node == "design"
    [finding] = result.messages
    assert finding.code == "mermaid-unparseable"
    assert finding.path == "specs/1/design.md"
    assert finding.text.startswith(f"specs/1/design.md line {BROKEN_LINE}: ")

    # Repaired, the same chain passes and the work item moves on.
    files["specs/1/design.md"] = DESIGN_OK
    result = rt.advance(item, config, None)
    assert result is not None and result.node == "done"


# -- the shipped graph ----------------------------------------------------------------------


def test_a_design_artifact_with_an_unparseable_mermaid_block_blocks_the_node():
    """Given the shipped graph (its design node's lint-artifacts checks diagrams)
    When design.md holds a mermaid block that does not parse
    Then the design node is blocked with the mermaid finding; repaired, it passes."""
    graph = load_graph()
    [lint] = [c for c in graph.node("design").exit if c.name == "lint-artifacts"]
    assert lint.params.get("diagrams") is True
    files = {"specs/1/requirements.md": "# R\n\n## Problem\n\nx\n\n## Requirements\n\ny\n",
             "specs/1/design.md": DESIGN_BROKEN}
    config = HookConfig(files=Files(files))
    item = WorkItem(REF, spec_dir="specs/1")
    rt = Runtime(graph, MemoryStateStore())
    rt.enrol(item, config, None)
    rt.force(item, config, "design", "lint the design")
    result = rt.advance(item, config, None)
    assert (result.status, result.node) == ("blocked", "design")
    assert [m.code for m in result.messages] == ["mermaid-unparseable"]
    assert result.messages[0].path == "specs/1/design.md"
    files["specs/1/design.md"] = files["specs/1/design.md"].replace(
        "    B -->|pass|\n", "    B -->|pass| C[next node]\n")
    result = rt.advance(item, config, None)
    assert result.node == "design-approval"


def test_a_worker_without_the_mermaid_parser_refuses_to_start_naming_the_fix(
        tmp_path, redis_ns):
    root = Path(__file__).resolve().parents[2]  # this tree's code, not the installed one
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(root),
           "REDIS_URL": redis_ns.url,
           "THE_LOOP_REDIS_PREFIX": redis_ns.prefix, "THE_LOOP_QUEUE": redis_ns.queue_name,
           la.PARSER_ENV: str(tmp_path / "no-parser")}
    log = tmp_path / "worker.log"
    proc = start([str(Path(sys.executable).with_name("the-loop")), "worker"], env, log)
    try:
        code = proc.wait(timeout=60)
    finally:
        stop(proc)
    text = log.read_text()
    assert code != 0
    assert "node 'design'" in text and "'lint-artifacts'" in text
    assert "make venv" in text and la.PARSER_ENV in text
