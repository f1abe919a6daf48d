"""The worker's own notices on a work item, each posted through the outbox.

Besides what hooks do, the worker tells a work item about three things, in the-loop's own
words (never text from a payload):

- an **alarm**: an approving comment was edited by someone other than its author, or an
  authorized login acted from another GitHub account than the one recorded for it;
- a **retraction**: the approval that passed a gate was dismissed, or its reviewer
  requested changes since, after the work item passed a later gate;
- **drift**: a person changed a ``phase:`` label by hand;

and, per ``routing.reactions``, reacts on the triggering comment (``started``,
``completed``, ``error``).

Every one of them goes through the outbox (:class:`graph.effects.HookEffects`): it is
recorded in the work item's state before it is posted and marked done after, so it is
made once per effect id. For a notice, a transient failure
(:class:`graph.effects.RetryLater`) fails the delivery, which is retried later, and the
retry finds the pending effect and reconciles it (the marked comment is looked for
first) instead of losing or doubling the notice. A permanent refusal (GitHub answers
403, 404, 422) is logged and recorded (``notification.failed``) and does not hold the
work item up. A reaction never fails its delivery: one that failed transiently is tried
once more as the delivery's handling ends (:meth:`Reactions.settle`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from foundation.commands import carries_command
from foundation.config.repository import Collaborators
from graph.effects import HookEffects, RetryLater
from graph.markers import OwnAccounts
from graph.model import InboundEvent, WorkItem
from graph.ports import GitHub, Integration, IntegrationError
from graph.state import StateStore, WorkItemState

log = logging.getLogger("the_loop.worker")

ALARM_TEXT = (
    "**the-loop** · alarm: an approving comment on this work item was edited by someone "
    "other than its author. Edited comments only count when their author edits them; this "
    "one does not count."
)
ACCOUNT_ALARM_TEXT = (
    "**the-loop** · alarm: a login named in `.the-loop/collaborators.yaml` acted on this "
    "work item from a different GitHub account than the one the-loop recorded for it (a "
    "new account may have taken a freed login). It decides nothing; an operator checks "
    "who it is."
)
#: Alarm kind (a hook result's ``data["alarm"]``) -> the notice posted for it.
ALARMS = {"edited-by-other": ALARM_TEXT, "account-changed": ACCOUNT_ALARM_TEXT}
WITHDRAWN_TEXT = (
    "**the-loop** · {what} gate `{gate}` after the work item passed a later gate (it is "
    "now at `{node}`). The decision stays recorded; to return to the gate, an operator "
    "runs `the-loop graph force --work-item {ref} --to {gate} --reason TEXT`."
)
DRIFT_TEXT = (
    "**the-loop** · a `phase:` label was changed by hand. The work item is still at node "
    "`{node}`; labels follow the graph, not the other way round. To move the phase, an "
    "operator runs `the-loop graph force --work-item {ref} --to NODE --reason TEXT`."
)

#: Event types a comment (``issue_comment``, ``pull_request_review_comment``) arrives as.
COMMENT_KINDS = ("issue_comment.", "pull_request_review_comment.")


def alarm_effect(ref: str, decisions: int, node: str, kind: str = "edited-by-other") -> str:
    """The effect id of the alarm of ``kind`` (:data:`ALARMS`) at ``node`` after
    ``decisions`` decisions (the node is its last segment)."""
    if kind == "edited-by-other":
        return f"{ref}/alarm/{decisions}/{node}"
    return f"{ref}/alarm/{kind}/{decisions}/{node}"


def withdrawn_effect(ref: str, source_id: int | str | None) -> str:
    """The effect id of the withdrawal notice for comment or review ``source_id`` (an
    id, or a decision source ``<kind>:<id>``)."""
    return f"{ref}/withdrawn/{source_id}"


def drift_effect(ref: str) -> str:
    """The effect id of the (one) phase-label drift notice of a work item."""
    return f"{ref}/drift"


class Notices:
    """Posts the worker's notices and reactions through the outbox.

    Args:
        store: the state store the outbox records in (the runtime's).
        own: GitHub provider -> the accounts the-loop writes as (only their marked
            comments are its notices); default: :class:`graph.markers.OwnAccounts` (the
            default App's bot).
    """

    def __init__(self, store: StateStore,
                 own: Callable[[GitHub], OwnAccounts] | None = None) -> None:
        self.store = store
        self.own = own or (lambda _github: OwnAccounts())

    def comment(self, github: GitHub, item: WorkItem, effect: str, text: str,
                state: WorkItemState | None = None) -> bool:
        """Post ``text`` on ``item`` once per ``effect`` (the body carries
        ``marker(effect)``).

        Args:
            github: the GitHub provider (unwrapped).
            item: the work item (``repository`` and ``id`` say where).
            effect: the notice's effect id, e.g. :func:`drift_effect`.
            text: the-loop's own wording.
            state: the work item's current state (loaded when ``None``); it is saved
                with the effect's record, so pass only a copy nothing newer was saved
                over.

        Returns:
            whether the notice is on the work item (posted now or before).

        Raises:
            RetryLater: a transient failure; the effect stays pending and the
                delivery's retry posts it.
        """
        if state is None:
            state = self.store.load(item.ref)
        if state is None:
            return False  # not a work item: nothing to record the notice in
        repo, number = item.repository, item.id
        if repo is None or number is None:
            return False  # not on GitHub: nowhere to post
        # In place: the marked comment is looked for first (and brought up to date), as a
        # notice must not be posted twice even when its record is gone (a node entered
        # since clears the visit's effects).
        return self._perform(github, state, effect, "github-comment",
                             lambda outbox: outbox.comment(repo=repo, number=number, body=text),
                             in_place=True, record_failure=True)

    def _perform(self, github: GitHub, state: WorkItemState, effect: str, channel: str,
                 write: Callable[[GitHub], object], *, in_place: bool = False,
                 record_failure: bool = False) -> bool:
        """``write`` (one write on the GitHub port) once per ``effect`` through the
        outbox; a permanent refusal is logged and, with ``record_failure``, recorded
        (``notification.failed``).

        Raises:
            RetryLater: a transient failure (the effect stays pending).
        """
        outbox = HookEffects(state, self.store, f"{state.ref}/notice", own=self.own(github))
        try:
            write(outbox.github(cast(Integration, github), effect=effect, in_place=in_place))
        except RetryLater:
            log.warning("%s %s not made yet (transient failure)", channel, effect)
            raise
        except IntegrationError as exc:
            log.warning("%s %s refused (%s); not retried", channel, effect,
                        type(exc).__name__)
            if record_failure:
                self.store.append_event(state.ref, "notification.failed",
                                        {"channel": channel, "error": type(exc).__name__},
                                        None)
            return False
        return True

    def reactions(self, github: GitHub, item: WorkItem, event: InboundEvent,
                  collaborators: Collaborators, settings: Mapping[str, Any], *,
                  live: bool = True,
                  account_id: Callable[[str], int | None] | None = None) -> Reactions:
        """The reactions on ``event``'s comment, per ``settings`` (``routing.reactions``:
        ``enabled`` and the content per stage): only on a comment by a person authorized
        for some gate role (checked before its text is read), from the account recorded
        for that login (``account_id``, ``HookConfig.account_id``), whose text carries a line
        command (after quotes and code are removed), and that is ``live`` (it may still
        decide: not used by a decision already, not an edit that cannot count). An
        issue comment's reactions go to ``add-reaction``, a review comment's to
        ``add-review-comment-reaction`` (GitHub's two endpoints)."""
        authorized = bool(event.actor) and event.author in (None, event.actor) and any(
            collaborators.is_authorized(event.actor, role) for role in collaborators.roles)
        if authorized and account_id is not None and event.actor:
            authorized = event.actor_id is not None and account_id(event.actor) == event.actor_id
        enabled = bool(settings.get("enabled") and event.comment_id and live and authorized
                       and event.kind.startswith(COMMENT_KINDS)
                       and carries_command(event.body))
        return Reactions(self, github, item, event.comment_id if enabled else None,
                         settings, review_comment=event.comment_kind == "review_comment")


class Reactions:
    """Reactions on one triggering comment (see :meth:`Notices.reactions`); does nothing
    when ``comment_id`` is ``None``.

    A reaction is a courtesy: it never fails (or delays) its delivery. One that failed
    transiently stays pending in the outbox and is tried once more when the delivery's
    handling ends (:meth:`settle`); after that it is logged.
    """

    def __init__(self, notices: Notices, github: GitHub, item: WorkItem,
                 comment_id: int | None, contents: Mapping[str, Any], *,
                 review_comment: bool = False) -> None:
        self.review_comment = review_comment
        self.notices = notices
        self.github = github
        self.item = item
        self.comment_id = comment_id
        self.contents = contents
        self.pending: list[str] = []
        # "started" waits for the end of the delivery: when the delivery also ends in
        # "completed" or "error", that one reaction says it all (one write, not two).
        self.started_due = False

    def begin(self) -> None:
        """The delivery is being handled: ``started`` is made when it ends without
        ``completed`` or ``error`` (at :meth:`settle`)."""
        self.started_due = self.comment_id is not None

    def react(self, stage: str, state: WorkItemState | None = None) -> bool:
        """React for ``stage`` (``started``, ``completed``, ``error``) through the
        outbox, once per comment and stage; returns whether it is made.

        A comment that enrols its work item has no state yet to record in: its
        ``started`` reaction is made directly. A refusal is logged; a transient failure
        leaves the stage for :meth:`settle`. ``state``: the work item's current state
        (loaded when ``None``; see :meth:`Notices.comment`).
        """
        repo, comment_id = self.item.repository, self.comment_id
        if repo is None or comment_id is None:
            return False
        if stage != "started":
            self.started_due = False
        content = str(self.contents[stage])
        if state is None:
            state = self.notices.store.load(self.item.ref)
        def add(github: GitHub) -> object:
            if self.review_comment:
                return github.add_review_comment_reaction(repo=repo, comment_id=comment_id,
                                                          content=content)
            return github.add_reaction(repo=repo, comment_id=comment_id, content=content)

        try:
            if state is None:
                add(self.github)
                return True
            return self.notices._perform(
                self.github, state, f"{self.item.ref}/reaction/{comment_id}/{stage}",
                "reaction", add)
        except IntegrationError as exc:
            if exc.retriable and stage not in self.pending:
                self.pending.append(stage)
            else:
                log.warning("reaction %s not added (%s)", stage, type(exc).__name__)
            return False

    def settle(self) -> None:
        """At the end of the delivery: make ``started`` if it is still due (see
        :meth:`begin`), then try the reactions that failed transiently once more (in
        order)."""
        if self.started_due:
            self.started_due = False
            self.react("started")
        pending, self.pending = self.pending, []
        for stage in pending:
            if not self.react(stage):
                self.pending = []
                log.warning("reaction %s not added; left pending", stage)
