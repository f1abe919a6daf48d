"""``request-review``: post the review request on the work item, marked as the-loop's own."""

from __future__ import annotations

import re

from foundation.hooks.review import fingerprint, verified_approval, without_record
from graph.markers import effect_id, marker
from graph.model import DecisionRecord, HookContext, HookResult, Message
from graph.registry import hook

LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
COMMANDS = ("/approve", "/approve-with-comments", "/request-changes")


def render_request(ctx: HookContext, visit: int) -> str:
    """The review-request comment body: the-loop's own text, graph paths and config logins
    only (never payload text), ending with the hidden marker."""
    people = [
        p.github for p in ctx.config.collaborators.people(ctx.node.role)
        if p.github and LOGIN_RE.match(p.github)
    ]
    who = ", ".join(f"@{login}" for login in people) or (
        f"nobody yet: add people to role `{ctx.node.role}` in `.the-loop/collaborators.yaml`"
    )
    base = ctx.work_item.spec_dir.rstrip("/")
    artifacts = [f"{base}/{a}" for a in ctx.params.get("artifacts", ())]
    lines = [
        f"**the-loop** · phase `{ctx.node.phase}` is waiting for a decision.",
        "",
    ]
    if artifacts:
        lines.append("Please review: " + ", ".join(f"`{a}`" for a in artifacts))
        lines.append("")
    lines += [
        f"Reviewers (role `{ctx.node.role}`): {who}",
        "",
        "Reply with one of these on a line of its own: "
        + ", ".join(f"`{c}`" for c in COMMANDS)
        + " — or submit a pull request review.",
        "",
        marker(effect_id(ctx.work_item.ref, ctx.node.id, visit, "request-review")),
    ]
    return "\n".join(lines)


def render_withdrawn_request(phase: str, effect: str) -> str:
    """The review-request comment of a gate's visit once the request is withdrawn (the
    pull request was converted to a draft), edited in place by the worker: the-loop's own
    text and the phase name only, keeping the marker of ``effect`` (the request's effect
    id, ``<ref>/<node>/<visit>/request-review``) so it stays that effect's one comment.

    Args:
        phase: the gate's phase (from the graph).
        effect: the review request's effect id.

    Returns:
        The comment body (Markdown).
    """
    return "\n".join([
        f"~~**the-loop** · phase `{phase}` is waiting for a decision.~~",
        "",
        "**Withdrawn**: the pull request was converted to a draft. The review is requested "
        "again when it is marked ready for review; decisions made before then do not count.",
        "",
        marker(effect),
    ])


@hook(
    "request-review",
    requires={"github": {"comment", "list-comments", "update-comment"}},
    boundaries={"entry"},
    params={"artifacts"},
    shown_waits=frozenset({"draft"}),
    records=DecisionRecord(lambda params: tuple(params.get("artifacts") or ()),
                           verified_approval,
                           fingerprint=fingerprint, strip=without_record),
)
def request_review(ctx: HookContext) -> HookResult:
    """Post the review request once per node visit: a comment whose marker carries the
    effect id ``<ref>/<node>/<visit>/request-review``. The outbox looks for a comment with
    that marker first (a retried job, rebuilt state) and updates it in place rather than
    posting again (:mod:`graph.effects`).

    A draft pull request is asked for nothing: the hook returns ``wait`` (code
    ``draft``), so the entry chain (and ``notify`` after it) runs again on the next event
    and the review starts when the pull request is marked ready (``ready_for_review``).

    Returns ``skip`` without a GitHub repository; ``pass`` with ``comment_id`` otherwise.
    """
    github = ctx.config.github
    repo, number = ctx.work_item.repository, ctx.work_item.id
    if github is None or repo is None or number is None:
        return HookResult.skipped("request-review", "no GitHub repository for this work item")
    if ctx.config.draft:
        return HookResult.waiting("request-review", Message(
            "the pull request is a draft: the review is requested when it is marked "
            "ready for review", code="draft"), draft=True)
    posted = github.comment(repo=repo, number=number, body=render_request(ctx, ctx.visit))
    return HookResult.passed("request-review", comment_id=posted["id"],
                             reused=bool(posted.get("reused")))

