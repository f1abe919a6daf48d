"""The work item's pull request body: the region the-loop keeps current in it.

The draft pull request the runner opens for a work item carries, between two hidden
markers (:func:`graph.markers.marker` of ``<ref>/pull-body`` and ``<ref>/pull-body/end``),
the-loop's own text: the closing keyword (``Closes #N`` for an issue work item, so that
merging the pull request closes the issue: GitHub docs, "Linking a pull request to an
issue"; ``Refs #N`` for a pull request, which a pull request cannot close), links to the
work item's artifacts on its branch, and the task table of its plan with each task's
status. Whatever a person writes outside the markers is kept: :func:`splice` replaces
only the region (and appends it when the body has none).

Text here is the-loop's own, paths from the graph, and the plan's task ids and titles
(the agent's artifact, not a webhook payload), each made one safe line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graph.markers import marker
from graph.ports import provider_text

PULL_BODY = "pull-body"


def begin_marker(ref: str) -> str:
    """The marker opening ``ref``'s region."""
    return marker(f"{ref}/{PULL_BODY}")


def end_marker(ref: str) -> str:
    """The marker closing ``ref``'s region."""
    return marker(f"{ref}/{PULL_BODY}/end")


def closing_line(kind: str, number: int) -> str:
    """``Closes #N`` for an issue work item, ``Refs #N`` for a pull request."""
    return f"{'Closes' if kind == 'issue' else 'Refs'} #{number}"


def _cell(text: Any, limit: int = 120) -> str:
    """One table cell: a safe line, ``|`` escaped."""
    return provider_text(str(text), limit).replace("|", "\\|") or " "


def render(ref: str, *, kind: str, number: int,
           artifacts: Sequence[tuple[str, str | None]] = (),
           tasks: Sequence[Mapping[str, Any]] = ()) -> str:
    """The region, markers included.

    Args:
        ref: the work item (``github:OWNER/REPO#N``).
        kind, number: the work item's kind (``issue``, ``pull_request``) and number.
        artifacts: ``(path, url or None)`` of each artifact written so far.
        tasks: the plan's rows ``{id, title, wave, depends_on, status}``, in order.

    Returns:
        Markdown: the lead line, the closing keyword, the artifacts, the task table. The
        phase is not in it (the ``phase:`` label and the status comment show it): a
        region that changes only with the artifacts and the tasks costs fewer writes.
    """
    lines = [begin_marker(ref),
             f"The work of the-loop's agent for #{number}, pushed turn by turn: a draft "
             "while the agent works, marked ready for review when the implementation "
             "passes its checks.", "",
             closing_line(kind, number)]
    if artifacts:
        lines += ["", "**Artifacts**", ""]
        lines += [f"- [`{path}`]({url})" if url else f"- `{path}`" for path, url in artifacts]
    if tasks:
        lines += ["", "**Tasks**", "", "| task | title | wave | after | status |",
                  "|---|---|---|---|---|"]
        for t in tasks:
            after = ", ".join(str(d) for d in t.get("depends_on") or ()) or "-"
            lines.append(f"| `{_cell(t.get('id'), 64)}` | {_cell(t.get('title'))} | "
                         f"{_cell(t.get('wave') or '-')} | {_cell(after)} | "
                         f"{_cell(t.get('status') or 'pending', 16)} |")
    lines.append(end_marker(ref))
    return "\n".join(lines)


def splice(body: str | None, region: str, ref: str) -> str:
    """``body`` with ``ref``'s region replaced by ``region`` (both markers found, in
    order), else with ``region`` appended after a blank line; the text outside the
    markers is kept byte for byte."""
    text = body or ""
    begin, end = begin_marker(ref), end_marker(ref)
    start = text.find(begin)
    stop = text.find(end, start + len(begin)) if start >= 0 else -1
    if start >= 0 and stop >= 0:
        return text[:start] + region + text[stop + len(end):]
    if not text.strip():
        return region
    return text.rstrip("\n") + "\n\n" + region


def plan_rows(plan: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The task rows of a plan run (``WorkItemState.plan``: ``tasks``, ``waves``,
    ``status``), in the plan's order; ``[]`` without one."""
    if not plan:
        return []
    waves = {str(t): i for i, wave in enumerate(plan.get("waves") or (), 1) for t in wave}
    status = plan.get("status") or {}
    return [{"id": t.get("id"), "title": t.get("title"),
             "depends_on": list(t.get("depends_on") or ()),
             "wave": waves.get(str(t.get("id"))),
             "status": status.get(str(t.get("id")), "pending")}
            for t in plan.get("tasks") or () if isinstance(t, Mapping)]
