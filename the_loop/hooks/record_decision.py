"""``record-decision``: persist a gate's outcome and its inputs to graph state."""

from __future__ import annotations

import time
from dataclasses import replace

from graph.markers import effect_id, marker
from graph.model import HookContext, HookResult, Message
from graph.registry import hook
from the_loop.hooks.jira_ticket import jira_decision

OUTCOME_WORDS = {
    "approved": "approved",
    "approved-with-comments": "approved with comments",
    "changes-requested": "requested changes",
}


@hook("record-decision", requires={"github": {"comment"}}, boundaries={"exit"})
def record_decision(ctx: HookContext) -> HookResult:
    """Find the classification earlier in the chain (a result whose data carries
    ``outcome`` and ``actor``) and pass with ``data["decision"]`` = ``{node, outcome,
    actor, source, delivery, body_sha256, at}``; the runtime appends it to the state's
    ``decisions``. On GitHub it also states the decision and who made it in a marked
    comment on the work item (through the runtime's outbox: posted once per gate visit).
    Blocks (non-retriable) if no classification ran before it: that is a graph error, and
    recording nothing must never look like a decision.
    """
    for prior in reversed(ctx.results):
        if prior.status == "pass" and "outcome" in prior.data and "actor" in prior.data:
            decision = {
                "node": ctx.node.id,
                "outcome": prior.data["outcome"],
                "actor": prior.data["actor"],
                "source": prior.data.get("source"),
                "delivery": prior.data.get("delivery"),
                "body_sha256": prior.data.get("body_sha256"),
                "comment_id": prior.data.get("comment_id"),
                "head_sha": prior.data.get("head_sha"),
                "at": time.time(),
            }
            _announce(ctx, str(decision["actor"]), str(decision["outcome"]))
            refused = jira_decision(ctx, _decision_text(ctx, str(decision["actor"]),
                                                        str(decision["outcome"])))
            result = HookResult.passed("record-decision", decision=decision)
            return replace(result, messages=(refused,)) if refused else result
    return HookResult.blocked(
        "record-decision",
        Message("record-decision found no classification earlier in the chain",
                code="no-decision"),
        retriable=False,
    )


def _decision_text(ctx: HookContext, actor: str, outcome: str) -> str:
    return (f"the-loop: {actor} {OUTCOME_WORDS.get(outcome, outcome)} at gate "
            f"{ctx.node.id} (phase {ctx.node.phase}) of {ctx.work_item.ref}.")


def _announce(ctx: HookContext, actor: str, outcome: str) -> None:
    github = ctx.config.github
    item = ctx.work_item
    if github is None or item.repository is None or item.id is None:
        return
    effect = effect_id(item.ref, ctx.node.id, ctx.visit, "decision")
    text = (f"**the-loop** · @{actor} {OUTCOME_WORDS.get(outcome, outcome)} at gate "
            f"`{ctx.node.id}` (phase `{ctx.node.phase}`).\n\n{marker(effect)}")
    github.comment(repo=item.repository, number=item.id, body=text)
