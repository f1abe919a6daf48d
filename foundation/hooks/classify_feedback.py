"""``classify-feedback``: turn an authorized person's reply into a closed-enum outcome.

Rules first (pull request review states and line commands), then, optionally, a model
classifier the operator configured. Only text from an author authorized for the gate's
role is read at all (specification, "Security design": the authorization filter runs
before the text is read); the outcome is always one of the gate's declared outcomes, and
policy outranks any model: an approval the harness config reserves for a human is
granted only by an explicit human signal. Anything else keeps the gate waiting.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from foundation.commands import carries_command, commands
from graph.markers import own_effect
from graph.model import HookContext, HookResult, Message
from graph.registry import hook

OUTCOMES = ("approved", "approved-with-comments", "changes-requested")
APPROVALS = frozenset({"approved", "approved-with-comments"})
#: Decisions whose reference (who, which comment, its digest) the next node's work gets.
HANDED_OFF = frozenset({"changes-requested", "approved-with-comments"})
#: Why a reply did not count, worth showing in the status comment (a plain "waiting for a
#: decision" is not repeated there).
SHOWN_WAITS = frozenset({"stale-approval", "reserved-for-human", "edited-by-other",
                         "awaiting-approvals", "account-changed"})
REVIEW_STATES = {"APPROVED": "approved", "CHANGES_REQUESTED": "changes-requested"}
FEEDBACK_KINDS = frozenset({
    "issue_comment.created", "issue_comment.edited",
    "pull_request_review.submitted", "pull_request_review.edited",
    "pull_request_review_comment.created", "pull_request_review_comment.edited",
})
PERMISSION_ORDER = ("none", "read", "triage", "write", "maintain", "admin")


def parse_command(body: str) -> str | None:
    """The outcome of the line command in ``body``, or ``None``.

    A command counts only alone on its own line of a top-level paragraph, as GitHub
    renders the body (a trailing HTML comment is tolerated); quotes, code (fenced,
    indented, inline), lists and HTML are ignored (:func:`foundation.commands.commands`,
    linear time, bodies up to GitHub's 65,536 characters). Two different commands in one
    body are ambiguous and give ``None``.
    """
    found = commands(body)
    return found.pop() if len(found) == 1 else None


def permission_at_least(held: str | None, needed: str) -> bool:
    """Whether GitHub repository permission ``held`` is ``needed`` or stronger."""
    order = {p: i for i, p in enumerate(PERMISSION_ORDER)}
    return order.get(held or "none", 0) >= order.get(needed, len(order))


def _gates(ctx: HookContext) -> Mapping[str, Any]:
    gates = ctx.config.harness.get("gates") if ctx.config.harness else None
    return gates if isinstance(gates, Mapping) else {}


def _stale(ctx: HookContext, actor: str | None, reviewed: str | None) -> str | None:
    """Why an approving review no longer counts, or ``None``: it approved a commit other
    than the pull request head, the trees differ (a rebase to the same tree keeps it),
    and the repository dismisses stale approvals."""
    if not _gates(ctx).get("dismissStaleApprovals", True):
        return None
    head = ctx.config.head_sha or (ctx.event.head_sha if ctx.event else None)
    if not reviewed or not head or reviewed == head:
        return None
    trees = ctx.config.trees
    if trees is not None and trees(reviewed) is not None and trees(reviewed) == trees(head):
        return None
    return (f"the approval by @{actor} was for commit {reviewed[:12]}, but the pull "
            f"request head is now {head[:12]} with different content, so it no longer "
            "counts; review the new head")


def _other_account(ctx: HookContext, login: str, user_id: int | None) -> HookResult | None:
    """``wait`` when the account acting as ``login`` is not the one recorded for it
    (``ctx.config.account_id``): ``account-changed`` with an alarm when the event names
    another account, ``unauthorized`` when no account has the login or the event names
    none; ``None`` when it is the recorded one (or ids are not checked)."""
    if ctx.config.account_id is None:
        return None
    recorded = ctx.config.account_id(login)
    name = "classify-feedback"
    if recorded is None or user_id is None:
        return HookResult.waiting(name, Message(
            f"@{login} cannot be identified by a GitHub user id, so it decides nothing",
            code="awaiting-decision"), ignored="unauthorized")
    if user_id == recorded:
        return None
    return HookResult.waiting(name, Message(
        f"@{login} is now a different GitHub account than the one recorded for that login "
        "(a new account took it), so it decides nothing; an operator checks who it is",
        code="account-changed"), ignored="account-changed", alarm="account-changed")


def _floor(seconds: float) -> float:
    # GitHub's timestamps have whole seconds: a reply in the second the visit began counts.
    return float(int(seconds))


@hook("classify-feedback", outcomes=set(OUTCOMES), boundaries={"exit"},
      params={"outcomes", "role"}, forward=("approved", "approved-with-comments"),
      hands_off=HANDED_OFF, shown_waits=SHOWN_WAITS)
def classify_feedback(ctx: HookContext) -> HookResult:
    """Classify ``ctx.event`` for the gate at ``ctx.node``.

    Parameters (``with:``): ``outcomes`` — the outcomes this gate accepts (default all
    three); ``role`` — the collaborators role allowed to decide (default ``node.role``).
    Policy (``ctx.config.harness``, the harness config): ``gates.minimumPermission``,
    ``gates.dismissStaleApprovals``, ``gates.allowBots``, ``gates.actOnEdits``, and the
    risk tiers reserved for a human (``ctx.config.human_only``).

    Decision rules (``ctx.gate``, the visit): a source (comment or review id) that decided
    a gate visit before never decides again, and one created before the visit began never
    decides it; an edit never decides unless ``gates.actOnEdits`` is true (then the
    author's own edit of a comment made during the visit counts once); with
    ``approvals: N`` the latest decisive reply of each authorized person this visit
    counts, a changes-requested from any of them wins, and N distinct approvers approve.

    Identity (``ctx.config.account_id``): an authorized login decides only as the
    account whose user id is recorded for it; another account with that login (one that
    took a freed login) decides nothing and raises an alarm.

    Returns ``pass`` with ``data = {outcome, actor, actor_id, source, source_key,
    sources, approvers, delivery, body_sha256, comment_id, created_at, updated_at,
    head_sha}`` on a decision; otherwise ``wait`` with ``data["ignored"]`` saying why
    (``bot``, ``own-comment``, ``unauthorized``, ``account-changed``, ``edited-by-other``,
    ``already-decided``, ``before-visit``, ``edit``, ``stale``, ``not-decisive``,
    ``invalid-classification``, ``reserved-for-human``, ``awaiting-approvals`` with the
    reply's ``vote``) and, for a
    command-bearing comment of an authorized person edited by someone else, or an
    authorized login acting from another account, ``data["alarm"]``
    (``edited-by-other``, ``account-changed``).
    """
    name = "classify-feedback"
    role = str(ctx.params.get("role") or ctx.node.role)
    allowed = tuple(ctx.params.get("outcomes") or OUTCOMES)
    event = ctx.event
    waiting = Message(f"waiting for a decision from role {role}", code="awaiting-decision")
    if event is None or event.kind not in FEEDBACK_KINDS:
        return HookResult.waiting(name, waiting)
    actor = event.actor or ""
    allowed_bots = {b.casefold() for b in _gates(ctx).get("allowBots") or ()}
    if actor.casefold() in ctx.config.bot_logins or (
            event.actor_type == "Bot" and actor.casefold() not in allowed_bots):
        return HookResult.waiting(name, waiting, ignored="bot")
    if event.author and event.author.casefold() != actor.casefold():
        # Someone edited another person's comment: it never counts; it is an alarm when
        # the comment is an authorized person's and carries (or carried) a command.
        alarm = ctx.config.collaborators.is_authorized(event.author, role) and (
            carries_command(event.body) or carries_command(event.previous_body))
        return HookResult.waiting(name, Message(
            f"a comment by @{event.author} was edited by someone else; edited comments "
            "only count when their author edits them", code="edited-by-other"),
            ignored="edited-by-other", **({"alarm": "edited-by-other"} if alarm else {}))
    # Authorization before reading: an unauthorized author's text is never looked at.
    if not ctx.config.collaborators.is_authorized(actor, role):
        return HookResult.waiting(name, waiting, ignored="unauthorized")
    changed = _other_account(ctx, actor, event.actor_id)
    if changed is not None:
        return changed
    minimum = _gates(ctx).get("minimumPermission")
    if minimum and ctx.config.permissions is not None and not permission_at_least(
            ctx.config.permissions(actor), str(minimum)):
        return HookResult.waiting(name, waiting, ignored="unauthorized")
    body = event.body or ""
    if own_effect(body, event.author or actor,
                  event.author_id if event.author else event.actor_id,
                  ctx.config.own) is not None:
        return HookResult.waiting(name, waiting, ignored="own-comment")
    gate, source_key = ctx.gate, event.source
    if gate is not None and source_key is not None and source_key in gate.decided:
        return HookResult.waiting(name, waiting, ignored="already-decided")
    if (gate is not None and event.created_at is not None
            and event.created_at < _floor(gate.started_at)):
        return HookResult.waiting(name, waiting, ignored="before-visit")
    if event.edited and not _gates(ctx).get("actOnEdits", False):
        return HookResult.waiting(name, waiting, ignored="edit")
    outcome: str | None
    source: str
    if event.kind.startswith("pull_request_review.") and event.review_state:
        outcome, source = REVIEW_STATES.get(event.review_state.upper()), "review"
        if outcome is None:  # a COMMENTED review may still carry a command
            outcome, source = parse_command(body), "review-body"
    else:
        outcome, source = parse_command(body), "comment"
    if outcome is None and ctx.config.classifier is not None and body.strip():
        outcome, source = ctx.config.classifier(body, allowed), "model"
        if outcome is not None and outcome not in allowed:
            return HookResult.waiting(name, waiting, ignored="invalid-classification")
        if outcome is None:
            return HookResult.waiting(name, waiting, ignored="invalid-classification")
    if outcome is None or outcome not in allowed:
        return HookResult.waiting(name, waiting, ignored="not-decisive")
    if outcome in APPROVALS and source == "model" and ctx.config.human_only(
            ctx.work_item.risk_tier):
        return HookResult.waiting(name, Message(
            "this approval is reserved for an explicit human signal (a line command or a "
            "pull request review); a model's reading of a comment cannot grant it",
            code="reserved-for-human"), ignored="reserved-for-human")
    reviewed = event.review_commit if source == "review" else None
    if outcome in APPROVALS and reviewed:
        stale = _stale(ctx, actor, reviewed)
        if stale:
            return HookResult.waiting(name, Message(stale, code="stale-approval"),
                                      ignored="stale")
    key = source_key or f"delivery:{event.delivery_id}"
    vote = {"actor": actor, "actor_id": event.actor_id, "outcome": outcome, "source": key,
            "kind": source, "review_commit": reviewed, "at": time.time()}
    latest: dict[str, Mapping[str, Any]] = {}
    for v in (*(gate.votes if gate else ()), vote):
        latest[str(v.get("actor") or "").casefold()] = v
    counted = [v for v in latest.values()
               if v is vote or not (v.get("outcome") in APPROVALS and v.get("review_commit")
                                    and _stale(ctx, v.get("actor"), v.get("review_commit")))]
    needed = gate.approvals if gate else 1
    approvers = [v for v in counted if v.get("outcome") in APPROVALS]
    if outcome in APPROVALS and len(approvers) < needed:
        logins = ", ".join(f"@{v['actor']}" for v in approvers)
        return HookResult.waiting(name, Message(
            f"{len(approvers)} of {needed} approvals so far ({logins}); waiting for "
            f"{needed - len(approvers)} more from role {role}", code="awaiting-approvals"),
            ignored="awaiting-approvals", vote=vote)
    deciding = [vote] if outcome not in APPROVALS else approvers
    return HookResult.passed(
        name,
        outcome=outcome,
        actor=actor,
        actor_id=event.actor_id,
        source=source,
        source_key=key,
        sources=[str(v["source"]) for v in deciding],
        approvers=[str(v["actor"]) for v in deciding],
        delivery=event.delivery_id,
        body_sha256=event.body_sha256,
        comment_id=event.comment_id,
        created_at=event.created_at,
        updated_at=event.updated_at,
        head_sha=ctx.config.head_sha or event.head_sha,
    )
