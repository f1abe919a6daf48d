"""Feedback people and runners see: the work item's one status comment, edited in place.

The rendering is the-loop's own text plus node ids, hook names and repository paths from
the graph; never text from a webhook payload (specification, "Feedback to the harness").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from graph.context import HookConfig
from graph.markers import find_effect, marker
from graph.model import Message, WorkItem

STATUS_EFFECT = "status"


def status_effect(ref: str) -> str:
    """Effect id of ``ref``'s status comment (one per work item)."""
    return f"{ref}/{STATUS_EFFECT}"


def render_status(
    work_item: WorkItem,
    node: str,
    phase: str,
    status: str,
    messages: Sequence[Message] = (),
    *,
    hook: str | None = None,
    escalation: str | None = None,
    mentions: Sequence[str] = (),
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
    """
    lines = [f"**the-loop** · phase `{phase}` (node `{node}`) · **{status}**", ""]
    if escalation:
        who = " ".join(f"@{m}" for m in mentions)
        lines += [f"A human is needed: {escalation}." + (f" {who}" if who else ""), ""]
    if messages:
        lines.append(f"What `{hook or 'the exit chain'}` needs before this node can complete:")
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


def digest(body: str) -> str:
    """SHA-256 hex of ``body`` (so an unchanged status is not re-published)."""
    return hashlib.sha256(body.encode()).hexdigest()


def publish_status(config: HookConfig, work_item: WorkItem, body: str) -> int | None:
    """Create or edit in place the work item's status comment through the GitHub
    integration. Returns the comment id, or ``None`` when there is no GitHub repository.

    Raises whatever the integration raises; the runtime records that and continues.
    """
    github = config.github
    if github is None or work_item.repository is None or work_item.id is None:
        return None
    effect = status_effect(work_item.ref)
    comments = github.list_comments(repo=work_item.repository, number=work_item.id)
    for comment in comments["comments"]:
        if find_effect(comment.get("body")) == effect:
            if comment.get("body") != body:
                github.update_comment(repo=work_item.repository, comment_id=comment["id"],
                                      body=body)
            return int(comment["id"])
    posted = github.comment(repo=work_item.repository, number=work_item.id, body=body)
    return int(posted["id"])


CHECK_NAME = "the-loop"
# work item status -> (check run status, conclusion)
CHECK_STATES = {
    "active": ("in_progress", None),
    "waiting": ("in_progress", None),
    "escalated": ("completed", "action_required"),
    "blocked": ("completed", "failure"),
    "done": ("completed", "success"),
}


def publish_check(
    config: HookConfig, work_item: WorkItem, phase: str, status: str, summary: str = ""
) -> int | None:
    """Create or update (by name and head SHA) the ``the-loop`` check run for
    ``work_item``'s pull request head. Returns its id, or ``None`` where there is no pull
    request head or no GitHub integration. Raises what the integration raises."""
    github = config.github
    sha = config.head_sha
    if github is None or work_item.repository is None or not sha:
        return None
    state, conclusion = CHECK_STATES.get(status, ("in_progress", None))
    title = f"phase {phase}: {status}"
    text = summary or f"the-loop: {work_item.ref} is {status} at phase {phase}."
    existing = github.list_check_runs(repo=work_item.repository, head_sha=sha,
                                      name=CHECK_NAME)["check_runs"]
    # A completed run is not reopened: a new run (GitHub shows the latest by name) says
    # the work item is in progress again.
    if existing and not (existing[0].get("status") == "completed" and conclusion is None):
        run_id = int(existing[0]["id"])
        github.update_check_run(repo=work_item.repository, check_run_id=run_id, status=state,
                                conclusion=conclusion, title=title, summary=text)
        return run_id
    created = github.create_check_run(repo=work_item.repository, head_sha=sha,
                                      name=CHECK_NAME, status=state, conclusion=conclusion,
                                      title=title, summary=text)
    return int(created["id"])
