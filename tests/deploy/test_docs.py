"""The operator docs stay true to the code: links resolve, the commands, variables, values
and object names they mention exist, and the example values install."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.deploy.conftest import CHART_DIR, Rendered
from the_loop.cli import main

DOCS = [REPO_ROOT / "docs" / f"{n}.md" for n in ("install", "operations", "upgrade",
                                                  "troubleshooting")]
VALUE_ROOTS = ("image", "imagePullSecrets", "secret", "config", "env", "web", "worker",
               "service", "ingress", "podDisruptionBudget", "serviceAccount", "redis",
               "runner")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(), re.M)}


def code_spans(text: str) -> list[str]:
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return blocks + spans


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_resolve(doc):
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        assert path.exists(), f"{doc.name}: broken link {target}"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{doc.name}: no heading for #{anchor} in {path.name}"


def test_readme_links_the_operator_docs():
    readme = (REPO_ROOT / "README.md").read_text()
    for doc in DOCS:
        assert f"(docs/{doc.name})" in readme


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_loop_commands_exist(doc):
    for code in code_spans(doc.read_text()):
        for match in re.finditer(r"\bthe-loop ((?:[a-z]+ ?){1,2})", code):
            words = match.group(1).split()
            command = main.commands.get(words[0])
            if command is None:
                continue  # a release, Secret or Service named the-loop
            if hasattr(command, "commands") and len(words) > 1 and not getattr(
                    command, "default_command", None):  # `the-loop state REF` is `show`
                assert words[1] in command.commands, f"{doc.name}: the-loop {' '.join(words)}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_environment_variables_exist_in_the_code(doc):
    patterns = ("*/*.py", "foundation/settings/*.py", "charts/the-loop/**/*")
    sources = "\n".join(p.read_text() for pattern in patterns
                        for p in REPO_ROOT.glob(pattern)
                        if p.is_file() and "tests" not in p.parts and ".venv" not in p.parts)
    for var in set(re.findall(r"\bTHE_LOOP_[A-Z_]+[A-Z]\b", doc.read_text())):
        assert var in sources, f"{doc.name} names {var}, which nothing reads or sets"


def _has_path(values: dict, dotted: str) -> bool:
    node: object = values
    for part in dotted.split("."):
        if part == "*" or (isinstance(node, dict) and not node and part.isupper()):
            return True  # a wildcard, or a name inside a free-form map such as env
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_chart_values_named_in_docs_exist(doc):
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    roots = "|".join(VALUE_ROOTS)
    pattern = re.compile(rf"^(?:--set )?((?:{roots})(?:\.[A-Za-z_*]+)+)")
    for span in re.findall(r"`([^`\n]+)`", doc.read_text()):
        match = pattern.match(span)
        if match:
            assert _has_path(values, match.group(1)), f"{doc.name}: no value {match.group(1)}"


def test_object_names_in_docs_are_what_the_chart_creates(helm):
    """The docs use the release name the-loop; those names must be the rendered ones."""
    with helm.Chart.load(str(CHART_DIR)) as chart:
        rendered = Rendered(chart.render(name="the-loop", namespace="the-loop",
                                         is_install=True))
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered.objects}
    assert {("Deployment", "the-loop-web"), ("Deployment", "the-loop-worker"),
            ("Deployment", "the-loop-runner"), ("StatefulSet", "the-loop-redis"),
            ("Service", "the-loop")} <= names
    claim = rendered.get("StatefulSet", "the-loop-redis")["spec"]["volumeClaimTemplates"][0]
    assert f"{claim['metadata']['name']}-the-loop-redis-0" == "data-the-loop-redis-0"
    text = "\n".join(d.read_text() for d in DOCS)
    for name in re.findall(r"(?:deployment|statefulset)/(the-loop-[a-z]+)", text):
        assert ("Deployment", name) in names or ("StatefulSet", name) in names, name


def test_install_example_values_install(helm):
    text = (REPO_ROOT / "docs" / "install.md").read_text()
    block = re.search(r"Create `my-values.yaml`:\n\n```yaml\n(.*?)```", text, re.S)
    assert block, "install.md lost its my-values.yaml example"
    with helm.Chart.load(str(CHART_DIR)) as chart:
        rendered = Rendered(chart.render(yaml.safe_load(block.group(1)), name="the-loop",
                                         namespace="the-loop", is_install=True))
    ingress = rendered.get("Ingress", "the-loop")
    assert ingress["spec"]["rules"][0]["host"] == "loop.example.com"
    # Both images come from the registry the example pushes them to.
    for deployment in ("the-loop-web", "the-loop-runner"):
        (container,) = rendered.get("Deployment", deployment)["spec"]["template"]["spec"][
            "containers"]
        assert container["image"].startswith("registry.example.com/acme/the-loop")
    assert "https://loop.example.com/webhook" in rendered.notes


def test_every_diagram_in_the_docs_parses_as_github_renders_it():
    """Mermaid blocks in README.md and docs/*.md parse with the pinned Mermaid parser (the
    one lint-artifacts uses), so a diagram in the docs never shows as an error on GitHub."""
    from foundation.hooks.lint_artifacts import mermaid_blocks, parse_diagrams, parser_unavailable

    assert parser_unavailable() is None, parser_unavailable()
    docs = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    diagrams = [(doc.name, d) for doc in docs for d in mermaid_blocks(doc.read_text())]
    assert any(name == "architecture.md" for name, _ in diagrams)
    _version, results = parse_diagrams([d.text for _, d in diagrams])
    failed = [(name, d.line, r) for (name, d), r in zip(diagrams, results, strict=True)
              if not r.get("ok")]
    assert failed == []
