"""graph.refs: the one parser and formatter of work-item refs."""

from __future__ import annotations

import pytest

from graph.errors import LoopError
from graph.refs import RefError, WorkItemRef


@pytest.mark.parametrize("text", [
    "github:octo-org/octo-repo#12",
    "github:Codertocat/Hello-World#1",
    "github:a_b/c.d-e#999999",
])
def test_round_trip(text: str) -> None:
    ref = WorkItemRef.parse(text)
    assert ref.format() == str(ref) == text
    assert WorkItemRef.parse(ref.format()) == ref


def test_parts() -> None:
    ref = WorkItemRef.parse("github:octo-org/octo-repo#12")
    assert (ref.repository, ref.owner, ref.name, ref.number) == (
        "octo-org/octo-repo", "octo-org", "octo-repo", 12)
    assert WorkItemRef("o/r", 2) < WorkItemRef("o/r", 10)  # ordered by number, not text


@pytest.mark.parametrize("text", [
    "", "github:", "github:o/r", "github:o/r#", "github:o/r#0", "github:o/r#-1",
    "github:o/r#1x", "github:o#1", "github:o/r/x#1", "gitlab:o/r#1", " github:o/r#1",
    "github:o/r#1 ", "github:o r/x#1", "github:o/r#01", "local:login-page",
])
def test_malformed_refs_are_refused_naming_the_form(text: str) -> None:
    with pytest.raises(RefError) as info:
        WorkItemRef.parse(text)
    assert repr(text) in str(info.value) and "github:OWNER/REPO#N" in str(info.value)
    assert isinstance(info.value, LoopError) and isinstance(info.value, ValueError)
    assert WorkItemRef.parse_or_none(text) is None


@pytest.mark.parametrize(("repository", "number"), [
    ("o", 1), ("o/r/x", 1), ("o/r#1", 1), ("o/r", 0), ("o/r", True), ("o/r", "1"),
])
def test_malformed_parts_are_refused(repository: object, number: object) -> None:
    with pytest.raises(RefError):
        WorkItemRef(repository, number)  # type: ignore[arg-type]
