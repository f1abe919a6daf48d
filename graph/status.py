"""The work item's one status comment: what it says and its effect id.

The rendering is the-loop's own text plus node ids, hook names and repository paths from
the graph; never text from a webhook payload (specification, "Feedback to the harness").
The runtime publishes it through the outbox (:mod:`graph.effects`), edited in place. (The
review request's text, and its withdrawn form, live beside the hook that posts it:
``foundation/hooks/request_review.py``.)
"""

from __future__ import annotations

from collections.abc import Sequence

from graph.markers import marker
from graph.model import Message, Status, WorkItem

STATUS_EFFECT = "status"


def status_effect(ref: str) -> str:
    """Effect id of ``ref``'s status comment (one per work item)."""
    return f"{ref}/{STATUS_EFFECT}"


def render_status(
    work_item: WorkItem,
    node: str,
    phase: str,
    status: Status | str,
    messages: Sequence[Message] = (),
    *,
    hook: str | None = None,
    escalation: str | None = None,
    mentions: Sequence[str] = (),
    working: str | None = None,
    notes: Sequence[str] = (),
    reserved: str | None = None,
    page_url: str | None = None,
) -> str:
    """The status comment body: phase, status, and what the work must do next.

    Args:
        work_item: the work item.
        node, phase: where it is.
        status: ``waiting``, ``blocked``, ``escalated``, ``done`` or ``active``.
        messages: findings of the last block (the work's next input), in priority order.
        hook: the hook that produced them.
        escalation: why a human is asked to step in, in the-loop's words.
        mentions: GitHub logins to @mention (from the repository's collaborators file).
        working: while an agent turn is out, its one line
            (:func:`graph.work.working_line`: ``agent working: turn 2 of 5, 3 min, $0.41``).
        notes: the-loop's notes of this node visit (:meth:`graph.state.WorkItemState.note`:
            a gate re-opened, a deciding comment deleted), in order.
        reserved: at a gate reserved for a person by the work item's risk tier, why
            (``HookConfig.human_reason``), in the-loop's words.
        page_url: the work item's dashboard page (``HookConfig.page_url``), linked under
            the first line; ``None``: no link.
    """
    lines = [f"**the-loop** · phase `{phase}` (node `{node}`) · **{Status(status).value}**", ""]
    if page_url:
        lines += [f"[Graph, timeline, decisions and sessions]({page_url})", ""]
    if working:
        lines += [f"{working[:1].upper()}{working[1:]}.", ""]
    for note in notes:
        lines += [f"Note: {note}", ""]
    if escalation:
        who = " ".join(f"@{m}" for m in mentions)
        lines += [f"A human is needed: {escalation}." + (f" {who}" if who else ""), ""]
    if reserved:
        lines += [f"{reserved[:1].upper()}{reserved[1:]}.", ""]
    if messages:
        lead = ("The agent's next turn repairs what" if working else "What")
        lines.append(f"{lead} `{hook or 'the exit chain'}` needs before this node can complete:")
        for m in messages:
            where = f" (`{m.path}`)" if m.path and m.path not in m.text else ""
            lines.append(f"- {m.text}{where}")
        lines.append("")
    lines.append(
        "To move the phase by hand, an operator runs `the-loop graph force --work-item "
        f"{work_item.ref} --to NODE --reason TEXT`."
    )
    lines += ["", marker(status_effect(work_item.ref))]
    return "\n".join(lines)

