"""``record-decision``: persist a gate's outcome and its inputs to graph state."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from foundation.hooks.jira_ticket import jira_decision
from foundation.hooks.review import blob_sha, fingerprint
from graph import signing
from graph.context import HEAD_MOVED
from graph.markers import effect_id, marker
from graph.model import HookContext, HookResult, Message
from graph.registry import hook

OUTCOME_WORDS = {
    "approved": "approved",
    "approved-with-comments": "approved with comments",
    "changes-requested": "requested changes",
}


@hook("record-decision", requires={"github": {"comment"}}, boundaries={"exit"})
def record_decision(ctx: HookContext) -> HookResult:
    """Find the classification earlier in the chain (a result whose data carries
    ``outcome`` and ``actor``) and pass with ``data["decision"]`` = ``{node, visit,
    outcome, actor, reviewer_id, approvers, source, source_key, sources, created_at,
    updated_at, delivery, body_sha256, comment_id, head_sha, recorded_head_sha, artifacts,
    at, record, signature}``; the runtime records it as the gate's decision.
    ``recorded_head_sha`` is the commit record-feedback made on top of ``head_sha`` (the
    decision's review record in the artifact; ``None`` when it committed nothing): the
    head to merge, which holds nothing the approval did not see but the-loop's record.
    ``reviewer_id`` is the GitHub user id of ``actor``'s account (``None`` where there is
    none: a local run). ``sources`` are the comments and reviews that decided (none decides
    again); ``artifacts`` binds the decision to what was reviewed: path -> ``{blob_sha,
    digest}`` (git's blob SHA of the artifact at the pull request head, and its review
    fingerprint, :func:`~foundation.hooks.review.fingerprint`), read through
    ``ctx.config.files`` for every artifact the gate reviews (``ctx.artifacts``). On GitHub
    it also states the decision and who made it in a marked comment on the work item
    (through the runtime's outbox: posted once per gate visit).
    ``record`` and ``signature`` are the decision's signed record (:mod:`graph.signing`:
    work item, gate, visit, outcome, reviewer id and login, source, the head and artifact
    SHAs approved, time), ``None`` when the service holds no signing key.
    Blocks (non-retriable) if no classification ran before it: that is a graph error, and
    recording nothing must never look like a decision.
    """
    for prior in reversed(ctx.results):
        if prior.status == "pass" and "outcome" in prior.data and "actor" in prior.data:
            data = prior.data
            decision = {
                "node": ctx.node.id,
                "visit": ctx.visit,
                "outcome": data["outcome"],
                "actor": data["actor"],
                "reviewer_id": data.get("actor_id"),
                "approvers": list(data.get("approvers") or [data["actor"]]),
                "source": data.get("source"),
                "source_key": data.get("source_key"),
                "sources": list(data.get("sources") or
                                ([data["source_key"]] if data.get("source_key") else [])),
                "created_at": data.get("created_at"),
                "updated_at": data.get("updated_at"),
                "delivery": data.get("delivery"),
                "body_sha256": data.get("body_sha256"),
                "comment_id": data.get("comment_id"),
                "head_sha": data.get("head_sha") or ctx.config.head_sha,
                "recorded_head_sha": next((str(r.data[HEAD_MOVED]) for r in ctx.results
                                           if r.data.get(HEAD_MOVED)), None),
                "artifacts": _reviewed(ctx),
                "at": time.time(),
            }
            decision.update(_signed(ctx, decision))
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


def _signed(ctx: HookContext, decision: dict[str, Any]) -> dict[str, str | None]:
    """``{"record", "signature"}`` of ``decision`` (``None`` values without a key)."""
    signer = ctx.config.signer
    if signer is None:
        return {"record": None, "signature": None}
    reviewer_id = decision.get("reviewer_id")
    data = signing.record(
        work_item=ctx.work_item.ref, gate=ctx.node.id, visit=ctx.visit,
        outcome=str(decision["outcome"]), reviewer=str(decision["actor"]),
        reviewer_id=reviewer_id if isinstance(reviewer_id, int) else None,
        source=str(decision["source_key"]) if decision.get("source_key") else None,
        approved={"head_sha": decision.get("head_sha"), "artifacts": decision["artifacts"]},
        notes=signing.notes_digest(()),
        at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(decision["at"]))))
    return {"record": signing.encode(data), "signature": signer.sign(data)}


def _reviewed(ctx: HookContext) -> dict[str, dict[str, Any]]:
    """path -> ``{blob_sha, digest}`` of each artifact the gate reviewed, as read now
    (``None`` values for an absent one)."""
    bound: dict[str, dict[str, Any]] = {}
    for path in sorted(set(ctx.artifacts.values())):
        text = ctx.config.files.read_text(path)
        bound[path] = {"blob_sha": blob_sha(text) if text is not None else None,
                       "digest": fingerprint(text)}
    return bound


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
