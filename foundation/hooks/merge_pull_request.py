"""``merge-pull-request``: ``done`` means merged.

The work item's pull request (``HookConfig.pull_number``) is merged as the repository's
``merge`` setting says (``.the-loop/harness-config.yaml``, :class:`foundation.config.
repository.Merge`): with ``auto: true`` the-loop merges it itself once the gate ``with:
{gate}`` (default ``review``) passed and the checks ``with: {checks}`` are green on the
head that gate approved; otherwise the work item waits at this node's entry for a person
to merge it. GitHub's "Merge a pull request" (``PUT /repos/{owner}/{repo}/pulls/
{pull_number}/merge``) is sent with ``sha`` = the approved head (the gate decision's
``head_sha``, or the commit of its review record on top of it, ``recorded_head_sha``), so
a push after the approval is never merged unreviewed: GitHub answers 409 "Head branch was
modified" and the work item waits with that reason in its status comment (as for 405 "not
mergeable": a conflict, or the base branch's protection; and 403/422).

The merged pull request is read back from GitHub (``get-pull-request``: ``merged``,
``merged_by``) on every run, so a person's merge, or the-loop's own whose answer was lost,
passes the hook the same way; the worker then completes the work item (its branches and
workspace, :mod:`workers.routes.closed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from foundation.hooks.verify_tests import FAILED, PASSED
from graph.model import HookContext, HookResult, Message
from graph.ports import IntegrationError, RetryLater
from graph.registry import hook

NAME = "merge-pull-request"
#: The wait codes the status comment shows.
SHOWN = frozenset({"awaiting-merge", "merge-refused", "merge-checks", "no-approved-head",
                   "closed"})


def _check_params(params: Mapping[str, Any]) -> str | None:
    """``gate``: a node id; ``checks``: a list of check names."""
    gate = params.get("gate", "review")
    if not isinstance(gate, str) or not gate:
        return "with.gate must be the id of the gate whose approval is merged"
    checks = params.get("checks", ())
    if not isinstance(checks, list | tuple) or not all(isinstance(c, str) and c
                                                       for c in checks):
        return "with.checks must be a list of check names, e.g. [tests]"
    return None


def _settings(ctx: HookContext) -> tuple[str, bool]:
    """``(method, auto)`` of the repository's ``merge`` setting (validated on load)."""
    merge = ctx.config.harness.get("merge") if ctx.config.harness else None
    merge = merge if isinstance(merge, Mapping) else {}
    return str(merge.get("method") or "squash"), merge.get("auto") is True


def _safe(text: str) -> str:
    """Provider text for a comment: no HTML comment markers, ``@`` mentions defused."""
    return text.replace("<!--", "").replace("-->", "").replace("@", "@\u200b")


# delete-branch: not called here; the worker deletes the merged work item's branches
# (workers/routes/finish.py), which the graph needs once it has this hook.
@hook(NAME, requires={"github": {"get-pull-request", "merge-pull-request", "delete-branch"}},
      boundaries={"entry"}, params={"gate", "checks"}, check=_check_params,
      shown_waits=SHOWN)
def merge_pull_request(ctx: HookContext) -> HookResult:
    """Merge the work item's pull request, or wait for it to be merged.

    Returns:
        ``skip`` without a GitHub repository or a pull request; ``pass`` with ``{pull,
        merged_by, merge_sha, head_sha, method, by_the_loop}`` once it is merged;
        ``wait`` with one message (code ``awaiting-merge``: ``auto`` is off; ``closed``:
        closed unmerged; ``no-approved-head``: the gate's decision names no head;
        ``merge-checks``: a check is pending or failed on the approved head;
        ``merge-refused``: GitHub refused, with its status and reason).

    Raises:
        RetryLater: GitHub failed transiently (the delivery is retried).
    """
    github = ctx.config.github
    repo, number = ctx.work_item.repository, ctx.config.pull_number
    if github is None or repo is None:
        return HookResult.skipped(NAME, "no GitHub repository for this work item")
    if number is None:
        return HookResult.skipped(NAME, "the work item has no pull request to merge")
    pull = github.get_pull_request(repo=repo, number=number)
    if pull.get("merged"):
        return HookResult.passed(NAME, pull=number, merged_by=pull.get("merged_by"),
                                 head_sha=pull.get("head_sha"), by_the_loop=False)
    if pull.get("state") != "open":
        return HookResult.waiting(NAME, Message(
            f"pull request #{number} is closed without being merged", code="closed"))
    method, auto = _settings(ctx)
    if not auto:
        return HookResult.waiting(NAME, Message(
            f"waiting for a person to merge pull request #{number} (merge.auto is false "
            "in .the-loop/harness-config.yaml)", code="awaiting-merge"), pull=number)
    gate = str(ctx.params.get("gate") or "review")
    decision = ctx.decisions.get(gate) or {}
    # The head the gate approved, with the review record the-loop committed on it (if
    # any): GitHub merges it only while it is still the pull request's head.
    approved = decision.get("recorded_head_sha") or decision.get("head_sha")
    if not isinstance(approved, str) or not approved:
        return HookResult.waiting(NAME, Message(
            f"gate {gate} recorded no pull request head, and the-loop merges only the "
            f"commit an approval names: merge pull request #{number} by hand, or approve "
            "it with a pull request review", code="no-approved-head"), pull=number)
    conclusions = ctx.config.ci.conclusions(approved)
    for check in ctx.params.get("checks") or ():
        conclusion = conclusions.get(check)
        if conclusion in PASSED:
            continue
        said = (f"check {check} concluded {conclusion} on {approved[:12]}: not merged"
                if conclusion in FAILED else
                f"waiting for check {check} to pass on {approved[:12]} before merging")
        return HookResult.waiting(NAME, Message(said, code="merge-checks"), pull=number,
                                  check=check, sha=approved)
    try:
        merged = github.merge_pull_request(repo=repo, number=number, sha=approved,
                                           merge_method=method)
    except RetryLater:
        raise
    except IntegrationError as exc:
        reason = _safe(exc.reason) or "no reason given"
        return HookResult.waiting(NAME, Message(
            f"GitHub refused to merge pull request #{number} at {approved[:12]} (HTTP "
            f"{exc.status}): {reason}", code="merge-refused"), pull=number,
            http_status=exc.status, sha=approved)
    if not merged.get("merged"):
        return HookResult.waiting(NAME, Message(
            f"GitHub did not merge pull request #{number} at {approved[:12]}",
            code="merge-refused"), pull=number, sha=approved)
    return HookResult.passed(NAME, pull=number, merged_by=None, head_sha=approved,
                             merge_sha=merged.get("sha"), method=method, by_the_loop=True)
