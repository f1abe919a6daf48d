"""validate-artifacts' sections: a section is a heading below the document's title."""

from __future__ import annotations

import pytest

from foundation.hooks.validate_artifacts import headings, sections
from graph.context import HookConfig
from graph.model import WorkItem
from graph.runtime import Runtime
from graph.state import MemoryStateStore
from the_loop.graphs import load_graph

REF = "local:sections-1"


class Files:
    """A FileReader serving artifacts from a dict."""

    revision = "test"

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)


def enrol(requirements: str):
    """Enrol a work item in the shipped graph with ``requirements`` as its
    requirements.md: the requirements node's exit chain (sections: [Problem,
    Requirements]) decides."""
    config = HookConfig(files=Files({"specs/1/requirements.md": requirements}))
    item = WorkItem(REF, spec_dir="specs/1")
    return Runtime(load_graph(), MemoryStateStore()).enrol(item, config, None)


def test_the_title_is_not_a_section_so_the_missing_one_blocks():
    """Given a requirements.md titled `# Requirements` with only `## Problem`
    When the requirements node's exit chain runs
    Then it is blocked naming the missing 'Requirements' section (the title counted
      as that section before)."""
    result = enrol("# Requirements\n\n## Problem\n\nSlow.\n")
    assert (result.status, result.node) == ("blocked", "requirements")
    assert [(m.code, m.path) for m in result.messages] == [
        ("section-missing", "specs/1/requirements.md")]
    assert result.messages[0].text == "specs/1/requirements.md has no 'Requirements' section"


def test_both_sections_under_the_title_pass():
    result = enrol("# Requirements\n\n## Problem\n\nSlow.\n\n## Requirements\n\n- fast\n")
    assert (result.status, result.node) == ("waiting", "requirements-approval")


@pytest.mark.parametrize(("markdown", "expected"), [
    ("# Requirements\n\n## Problem\n", {"problem"}),
    # A level-1 heading after the title is a section.
    ("# Spec\n\n# Problem\n\n# Requirements\n", {"problem", "requirements"}),
    # The title is the first level-1 heading, wherever it stands.
    ("## Problem\n\n# Requirements\n\n## Requirements\n", {"problem", "requirements"}),
    ("## Problem\n\n### Requirements\n", {"problem", "requirements"}),
    # A heading inside a fence is code: neither the title nor a section.
    ("```md\n# Fenced\n```\n\n# Requirements\n\n## Problem\n", {"problem"}),
    ("# Requirements #\n\n## Problem ##\n", {"problem"}),
    ("no headings\n", set()),
])
def test_sections_are_the_headings_but_the_title(markdown, expected):
    assert sections(markdown) == expected
    assert sections(markdown) <= headings(markdown)
