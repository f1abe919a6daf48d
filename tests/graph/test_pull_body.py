"""The pull request body's region (``graph/pull_body.py``): what it shows, and that a
person's text around it survives every update."""

from __future__ import annotations

from graph import pull_body
from graph.markers import marker

REF = "github:o/r#7"


def test_an_issue_work_item_is_closed_by_its_pull_request_and_a_pull_request_referred_to():
    assert "Closes #7" in pull_body.render(REF, kind="issue", number=7).splitlines()
    assert "Refs #7" in pull_body.render(REF, kind="pull_request", number=7).splitlines()


def test_the_region_shows_the_artifacts_and_the_task_table():
    plan = {"tasks": [{"id": "a", "title": "A | with a pipe\nand a line", "depends_on": []},
                      {"id": "b", "title": "B", "depends_on": ["a"]}],
            "waves": [["a"], ["b"]], "status": {"a": "passed", "b": "running"}}
    region = pull_body.render(REF, kind="issue", number=7,
                              artifacts=[("specs/7/tasks.md", "https://x/blob/b/specs/7/tasks.md"),
                                         ("specs/7/design.md", None)],
                              tasks=pull_body.plan_rows(plan))
    lines = region.splitlines()
    assert lines[0] == marker(f"{REF}/pull-body")
    assert lines[-1] == marker(f"{REF}/pull-body/end")
    assert "- [`specs/7/tasks.md`](https://x/blob/b/specs/7/tasks.md)" in lines
    assert "- `specs/7/design.md`" in lines
    assert "| `a` | A \\| with a pipe and a line | 1 | - | passed |" in lines
    assert "| `b` | B | 2 | a | running |" in lines


def test_a_persons_text_outside_the_markers_is_kept():
    old = pull_body.render(REF, kind="issue", number=7)
    new = pull_body.render(REF, kind="issue", number=7, artifacts=[("specs/7/design.md", None)])
    body = f"Before.\n\n{old}\n\nAfter, with a {marker('someone/else')} of theirs."
    spliced = pull_body.splice(body, new, REF)
    assert spliced == f"Before.\n\n{new}\n\nAfter, with a {marker('someone/else')} of theirs."
    assert pull_body.splice(spliced, new, REF) == spliced  # idempotent


def test_a_body_without_the_region_gets_it_appended_and_an_empty_one_is_the_region():
    region = pull_body.render(REF, kind="issue", number=7)
    assert pull_body.splice("A person's words.\n", region, REF) == \
        f"A person's words.\n\n{region}"
    assert pull_body.splice(None, region, REF) == region
    # Another work item's region is not this one's.
    other = pull_body.render("github:o/r#8", kind="issue", number=8)
    assert pull_body.splice(other, region, REF) == f"{other}\n\n{region}"


def test_a_region_whose_end_marker_was_deleted_is_added_again():
    region = pull_body.render(REF, kind="issue", number=7)
    broken = region.replace(marker(f"{REF}/pull-body/end"), "")
    assert pull_body.splice(broken, region, REF).endswith(region)
