"""``mark-ready``: on entering the review gate, the work item's draft pull request (the one
its agent turns pushed to) is marked ready for review and the gate's people are asked to
review it, as GitHub's Copilot coding agent hands its pull request over when it is done.

* GitHub's REST API cannot take a pull request out of draft; GraphQL's
  ``markPullRequestReadyForReview`` does (``mark-pull-request-ready``,
  :meth:`integrations.github_ops.pulls.PullRequestOperations.mark_pull_request_ready`).
* The people of the gate's role in ``.the-loop/collaborators.yaml`` are requested as
  reviewers (``POST /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers``,
  "Request reviewers for a pull request"): a ``github:`` login as one of ``reviewers``,
  an ``org/team`` entry as one of ``team_reviewers`` (its slug; only a team of the
  repository's owner can be asked). The accounts the-loop writes as are left out
  (GitHub refuses a review request from the pull request's author, the App's bot). GitHub
  refuses the whole request (422, "Reviews may only be requested from collaborators. One
  or more of the users or teams you specified is not a collaborator of the ...
  repository.") when one of them cannot review: then each is asked alone, and each one
  refused is a note of the status comment, never a failure (the review request comment
  and ``/approve`` still work).

Both writes go through the outbox under this hook's effect ids, once per node visit: a
redelivery writes nothing again. Only the work item's own draft pull request (an issue
work item's, found by its branch) is touched; a person's pull request that is the work
item is left as its author keeps it.
"""

from __future__ import annotations

import logging
import re

from graph.model import HookContext, HookResult, Message
from graph.ports import IntegrationError
from graph.registry import hook

log = logging.getLogger(__name__)

NAME = "mark-ready"
#: A GitHub login (``@`` dropped) and an ``org/team`` entry: GitHub's login rules, and a
#: team slug (lower-case letters, digits, ``-``, ``_``, ``.``).
LOGIN_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
TEAM_RE = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/([A-Za-z0-9._-]{1,100})$")


def reviewers(ctx: HookContext, owner: str) -> tuple[list[str], list[str], list[str]]:
    """``(logins, team slugs, skipped)`` to request for ``ctx.node``'s role (or the
    ``role`` parameter): logins other than the accounts the-loop writes as, in the file's
    order, each once; teams of ``owner`` (the repository's owner); ``skipped`` names the
    ``org/team`` entries of another organization."""
    role = str(ctx.params.get("role") or ctx.node.role or "approver")
    logins: list[str] = []
    teams: list[str] = []
    skipped: list[str] = []
    own = {b.casefold() for b in ctx.config.bot_logins}
    for person in ctx.config.collaborators.people(role):
        entry = (person.github or "").lstrip("@")
        team = TEAM_RE.match(entry)
        if team is not None:
            if team.group(1).casefold() != owner.casefold():
                skipped.append(entry)
            elif team.group(2) not in teams:
                teams.append(team.group(2))
            continue
        if (not LOGIN_RE.match(entry) or entry.casefold() in own
                or ctx.config.own.wrote(entry, None)
                or entry.casefold() in {x.casefold() for x in logins}):
            continue
        logins.append(entry)
    return logins, teams, skipped


@hook(NAME, requires={"github": {"find-pull-request", "mark-pull-request-ready",
                                 "request-reviewers"}},
      boundaries={"entry"}, params={"role"})
def mark_ready(ctx: HookContext) -> HookResult:
    """Mark the work item's draft pull request ready and request its reviewers.

    Returns:
        ``skip`` without GitHub, for a pull request work item, or when the work item has
        no pull request yet (nothing was pushed); ``pass`` with ``number``, ``draft``
        (false), ``requested`` and ``teams`` otherwise, its messages the notes (a refused
        review request, an ``org/team`` of another organization).

    Raises:
        IntegrationError: marking it ready failed (the runtime parks it as an entry
            block; a retriable failure is retried with the delivery).
    """
    github = ctx.config.github
    item = ctx.work_item
    repo = item.repository
    if github is None or repo is None or item.id is None:
        return HookResult.skipped(NAME, "no GitHub repository for this work item")
    if item.kind != "issue":
        return HookResult.skipped(NAME, "the work item is a pull request: its author "
                                        "decides when it is ready")
    branch = ctx.config.head_ref
    pull = github.find_pull_request(repo=repo, head=branch) if branch else None
    if pull is None:
        return HookResult.skipped(NAME, "the work item has no pull request yet")
    number = int(pull["number"])
    if pull["draft"]:
        pull = github.mark_pull_request_ready(repo=repo, number=number)
    logins, teams, skipped = reviewers(ctx, repo.partition("/")[0])
    notes = [Message(f"`{entry}` is a team of another organization: only teams of "
                     f"{repo.partition('/')[0]} can be asked to review", code="team-elsewhere")
             for entry in skipped]
    requested: list[str] = []
    requested_teams: list[str] = []
    # GitHub refuses the whole request (422) when one name cannot review; then each is
    # asked alone, so one person who is not a collaborator does not keep the others
    # from being asked.
    batches = [(logins, teams)]
    while batches:
        names, slugs = batches.pop(0)
        if not names and not slugs:
            continue
        try:
            asked = github.request_reviewers(repo=repo, number=number, reviewers=names,
                                             team_reviewers=slugs or None)
            requested, requested_teams = (list(asked["requested"]),
                                          list(asked.get("teams") or ()))
        except IntegrationError as exc:
            if exc.retriable or exc.status != 422:
                raise
            if len(names) + len(slugs) > 1:
                batches = [([n], []) for n in names] + [([], [t]) for t in slugs]
                continue
            who = f"@{names[0]}" if names else f"team `{slugs[0]}`"
            log.info("review request on %s#%d refused: %s", repo, number, exc.summary(repo))
            notes.append(Message(
                f"GitHub refused to request a review from {who} (HTTP 422"
                + (f": {exc.reason}" if exc.reason else "")
                + "): only collaborators of the repository can be asked",
                code="reviewers-refused"))
    return HookResult("pass", NAME, tuple(notes), {
        "number": number, "draft": bool(pull["draft"]), "requested": requested,
        "teams": requested_teams})
