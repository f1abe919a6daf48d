"""``publish-check``: a check run named ``the-loop`` on the pull request head, showing the
current phase and gate state, so a repository can require it before merge (GitHub docs,
"About status checks"; check runs need a GitHub App with ``checks: write``).

The run is created or updated through the outbox (``create-check-run`` is reconciled by
head SHA and name there, see :mod:`graph.effects`) through the registration's
``on_status``: whenever the runtime publishes the node's status (it waits, blocks,
escalates, is done, or has an agent turn out), once per change; and on entering the
terminal node, where it concludes ``success``. A run already showing the same is not
written again (:mod:`graph.effects` compares the parameters it last sent).
"""

from __future__ import annotations

from graph.model import HookContext, HookResult, Status
from graph.registry import hook

NAME = "publish-check"
CHECK_NAME = "the-loop"
#: work item status -> (check run status, conclusion)
CHECK_STATES: dict[Status, tuple[str, str | None]] = {
    Status.ACTIVE: ("in_progress", None),
    Status.WAITING: ("in_progress", None),
    Status.ESCALATED: ("completed", "action_required"),
    Status.BLOCKED: ("completed", "failure"),
    Status.DONE: ("completed", "success"),
    # The pull request was closed unmerged: the-loop stopped working on it.
    Status.ABANDONED: ("completed", "cancelled"),
}


def publish_check(ctx: HookContext, status: Status, summary: str = "") -> int | None:
    """Create or update the ``the-loop`` check run for ``ctx.work_item``'s pull request
    head (``ctx.config.head_sha``) to say ``status`` at ``ctx.node``'s phase; its
    "Details" link is the work item's dashboard page (``ctx.config.page_url``) when
    ``THE_LOOP_PUBLIC_URL`` is set.

    At the terminal node (``actor: system``, no exit chain) a work item that waits
    (for a person's merge, or a merge GitHub refused) concludes ``success``: every gate
    passed, so a branch protection requiring the ``the-loop`` check lets the merge
    through.

    Returns:
        the check run's id, or ``None`` where there is no pull request head or no GitHub
        integration.

    Raises:
        IntegrationError: as the integration raises it.
    """
    github = ctx.config.github
    item, sha, phase = ctx.work_item, ctx.config.head_sha, ctx.node.phase
    if github is None or item.repository is None or not sha:
        return None
    state, conclusion = CHECK_STATES.get(Status(status), ("in_progress", None))
    if status == Status.WAITING and not ctx.node.exit and ctx.node.actor == "system":
        state, conclusion = "completed", "success"  # every gate passed: ready to merge
    run = github.create_check_run(
        repo=item.repository, head_sha=sha, name=CHECK_NAME, status=state,
        conclusion=conclusion, title=f"phase {phase}: {status}",
        summary=summary or f"the-loop: {item.ref} is {status} at phase {phase}.",
        details_url=ctx.config.page_url)
    return int(run["id"])


@hook(NAME, requires={"github": {"list-check-runs", "create-check-run", "update-check-run"}},
      boundaries={"entry"}, on_status=publish_check)
def publish_check_hook(ctx: HookContext) -> HookResult:
    """On entering the terminal node (no exit chain): the run concludes ``success``
    here, so a failure to write it is retried with the delivery. On entering any other
    node nothing is written here: the runtime publishes the status when the node stops
    (it waits, blocks, escalates or has an agent turn out) and calls
    :func:`publish_check` (``on_status``) with the status as it is then; a write here
    would be replaced by that one within the same delivery (a write GitHub's secondary
    rate limit counts for nothing). Returns ``skip`` without a pull request head."""
    if ctx.config.github is None or ctx.work_item.repository is None or not ctx.config.head_sha:
        return HookResult.skipped(NAME, "no pull request head to put a check on")
    if ctx.node.exit or ctx.node.actor != "system":
        return HookResult.passed(NAME, head_sha=ctx.config.head_sha, published="on status")
    run_id = publish_check(ctx, Status.DONE)
    if run_id is None:
        return HookResult.skipped(NAME, "no pull request head to put a check on")
    return HookResult.passed(NAME, check_run_id=run_id, status=str(Status.DONE))
