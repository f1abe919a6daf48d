"""``verify-tests``: the node's declared check passed on the pull request head.

Results come from CI events GitHub sends (check runs, check suites, workflow runs, commit
statuses), recorded per commit by the worker; see GitHub docs "Webhook events and
payloads" for each event's ``conclusion``/``state``.
"""

from __future__ import annotations

from graph.model import HookContext, HookResult, Message
from graph.registry import hook

PASSED = frozenset({"success", "neutral", "skipped"})
FAILED = frozenset({"failure", "cancelled", "timed_out", "action_required", "error",
                    "startup_failure", "stale"})


@hook("verify-tests", boundaries={"exit"}, params={"check"})
def verify_tests(ctx: HookContext) -> HookResult:
    """``with: {check: NAME}`` names the check run, workflow or status context.

    Returns ``skip`` after ``is-docs-only`` found a docs-only change; ``wait`` while no
    result for the head commit has arrived or it is pending; ``block`` when it failed;
    ``pass`` when it succeeded.
    """
    name = "verify-tests"
    if any(r.outcome == "docs-only" for r in ctx.results):
        return HookResult.skipped(name, "documentation-only change; no tests to verify")
    check = str(ctx.params.get("check") or "tests")
    sha = ctx.config.head_sha
    if not sha:
        return HookResult.waiting(name, Message(
            f"waiting for a pull request head commit to verify check {check}",
            code="no-head"))
    conclusion = ctx.config.ci.conclusions(sha).get(check)
    short = sha[:12]
    if conclusion in PASSED:
        return HookResult.passed(name, check=check, sha=sha, conclusion=conclusion)
    if conclusion in FAILED:
        return HookResult.blocked(name, Message(
            f"check {check} concluded {conclusion} on {short}; fix it and push",
            code="check-failed"), check=check, sha=sha, conclusion=conclusion)
    return HookResult.waiting(name, Message(
        f"waiting for check {check} on {short}", code="check-pending"), check=check, sha=sha)
