"""``classify-feedback``: turn an authorized person's reply into a closed-enum outcome.

Deterministic rules for now: pull request review states and line commands. Only text
from an author listed for the gate's role in ``.the-loop/collaborators.yaml`` is read at
all (specification, "Security design": the authorization filter runs before the text is
read); anything else keeps the gate waiting.
"""

from __future__ import annotations

import re

from graph.markers import is_own
from graph.model import HookContext, HookResult, Message
from graph.registry import hook

OUTCOMES = ("approved", "approved-with-comments", "changes-requested")
COMMANDS = {
    "/approve": "approved",
    "/approve-with-comments": "approved-with-comments",
    "/request-changes": "changes-requested",
}
REVIEW_STATES = {"APPROVED": "approved", "CHANGES_REQUESTED": "changes-requested"}
# A command counts only at the start of its own line, as a whole word.
COMMAND_RE = re.compile(r"^[ \t]*(/approve-with-comments|/approve|/request-changes)(?![\w-])",
                        re.MULTILINE)
FEEDBACK_KINDS = frozenset({
    "issue_comment.created", "issue_comment.edited",
    "pull_request_review.submitted", "pull_request_review.edited",
    "pull_request_review_comment.created", "pull_request_review_comment.edited",
})


def parse_command(body: str) -> str | None:
    """The outcome of the first line command in ``body``, or ``None``.

    Only a command at the start of a line counts; ``/approve`` inside a sentence does not.
    Two different commands in one body are ambiguous and give ``None``.
    """
    found = {COMMANDS[m.group(1)] for m in COMMAND_RE.finditer(body)}
    return found.pop() if len(found) == 1 else None


@hook("classify-feedback", outcomes=set(OUTCOMES), boundaries={"exit"},
      params={"outcomes", "role"})
def classify_feedback(ctx: HookContext) -> HookResult:
    """Classify ``ctx.event`` for the gate at ``ctx.node``.

    Parameters (``with:``): ``outcomes`` — the outcomes this gate accepts (default all
    three); ``role`` — the collaborators role allowed to decide (default ``node.role``).

    Returns ``pass`` with ``data = {outcome, actor, source, delivery, body_sha256}`` on a
    decisive reply from an authorized author, else ``wait`` with the-loop's own reason.
    """
    name = "classify-feedback"
    role = str(ctx.params.get("role") or ctx.node.role)
    allowed = tuple(ctx.params.get("outcomes") or OUTCOMES)
    event = ctx.event
    waiting = Message(f"waiting for a decision from role {role}", code="awaiting-decision")
    if event is None or event.kind not in FEEDBACK_KINDS:
        return HookResult.waiting(name, waiting)
    actor = event.actor or ""
    if event.actor_type == "Bot" or actor.casefold() in ctx.config.bot_logins:
        return HookResult.waiting(name, waiting, ignored="bot")
    # Authorization before reading: an unauthorized author's text is never looked at.
    if not ctx.config.collaborators.is_authorized(actor, role):
        return HookResult.waiting(name, waiting, ignored="unauthorized")
    body = event.body or ""
    if is_own(body):
        return HookResult.waiting(name, waiting, ignored="own-comment")
    outcome: str | None
    source: str
    if event.kind.startswith("pull_request_review.") and event.review_state:
        outcome, source = REVIEW_STATES.get(event.review_state.upper()), "review"
        if outcome is None:  # a COMMENTED review may still carry a command
            outcome, source = parse_command(body), "review-body"
    else:
        outcome, source = parse_command(body), "comment"
    if outcome is None or outcome not in allowed:
        return HookResult.waiting(name, waiting, ignored="not-decisive")
    return HookResult.passed(
        name,
        outcome=outcome,
        actor=actor,
        source=source,
        delivery=event.delivery_id,
        body_sha256=event.body_sha256,
        comment_id=event.comment_id,
    )
