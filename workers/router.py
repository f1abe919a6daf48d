"""Route a delivery by (event, action) to what the worker does with it.

The table is data: ``the-loop app manifest`` and its consistency test read it to keep the
App's event subscriptions in step with what is handled. Event names stay plain strings
because GitHub keeps adding events (GitHub docs, "Webhook events and payloads").
"""

from __future__ import annotations

from dataclasses import dataclass

from foundation.events import INTERNAL_EVENTS, MONITOR_EVENT, TURN_EVENT

DRIVE = "drive"  # advance the work item (enrolling it if it carries the label)
DRIVE_IF_ENROLLED = "drive-if-enrolled"  # advance only a work item that already has state
CONFIG = "config"  # repository configuration may have changed
CI_ONLY = "ci"  # a CI result without a pull request reference: record it for verify-tests
LABELS = "labels"  # a label removed: phase-label drift is noticed, never fought
WITHDRAW = "withdraw"  # a comment deleted or a review dismissed: what it said is withdrawn
TURN = "turn"  # the runner's report that an agent turn ended: the node's exit chain runs
INSTALLATION = "installation"  # the App's access changed: tokens, suspended, deleted
CLOSED = "closed"  # the pull request closed: merged completes the work item, else abandoned
IGNORE = "ignore"

# (event, action) -> route; action None matches every action of the event.
ROUTES: dict[tuple[str, str | None], str] = {
    ("issues", "opened"): DRIVE,
    ("issues", "edited"): DRIVE,
    ("issues", "labeled"): DRIVE,
    ("issues", "reopened"): DRIVE,
    ("issues", "unlabeled"): LABELS,
    ("issue_comment", "created"): DRIVE,
    ("issue_comment", "edited"): DRIVE,
    ("issue_comment", "deleted"): WITHDRAW,
    ("pull_request", "opened"): DRIVE,
    ("pull_request", "edited"): DRIVE,
    ("pull_request", "labeled"): DRIVE,
    ("pull_request", "reopened"): DRIVE,
    ("pull_request", "unlabeled"): LABELS,
    ("pull_request", "synchronize"): DRIVE,
    ("pull_request", "ready_for_review"): DRIVE,
    ("pull_request", "converted_to_draft"): DRIVE,
    ("pull_request", "closed"): CLOSED,
    ("pull_request_review", "submitted"): DRIVE,
    ("pull_request_review", "edited"): DRIVE,
    ("pull_request_review", "dismissed"): WITHDRAW,
    ("pull_request_review_comment", "created"): DRIVE,
    ("pull_request_review_comment", "edited"): DRIVE,
    ("pull_request_review_comment", "deleted"): WITHDRAW,
    ("check_run", "completed"): DRIVE_IF_ENROLLED,
    ("check_suite", "completed"): DRIVE_IF_ENROLLED,
    ("workflow_run", "completed"): DRIVE_IF_ENROLLED,
    ("push", None): CONFIG,
    (TURN_EVENT, "completed"): TURN,
    (MONITOR_EVENT, "stale"): DRIVE_IF_ENROLLED,  # a stale gate's reminder is due
    (MONITOR_EVENT, "due"): DRIVE_IF_ENROLLED,  # a waiting hook's time came (a timeout)
    ("status", None): CI_ONLY,
    ("installation", None): INSTALLATION,
    ("installation_repositories", None): INSTALLATION,
}

# Events the App receives and deliberately acknowledges without acting (with the reason).
ACKNOWLEDGED: dict[str, str] = {
    "ping": "webhook configuration check",
    "label": "repository label change; phase labels are managed per work item",
}


@dataclass(frozen=True)
class Route:
    """Where a delivery goes: ``kind`` is one of the constants above; ``reason`` says why
    an ignored delivery is ignored (logged, never an error)."""

    kind: str
    reason: str = ""


def route(event: str, action: str | None) -> Route:
    """The route for ``(event, action)``; unknown pairs are ignored with a reason."""
    kind = ROUTES.get((event, action)) or ROUTES.get((event, None))
    if kind:
        return Route(kind)
    if event in ACKNOWLEDGED:
        return Route(IGNORE, ACKNOWLEDGED[event])
    handled = sorted({a for (e, a) in ROUTES if e == event and a})
    if handled:
        return Route(IGNORE, f"action {action!r} of {event!r} does not move a work item")
    return Route(IGNORE, f"event {event!r} is not handled by the-loop")


def handled_events() -> set[str]:
    """Every event name from GitHub the router acts on or acknowledges (the App's
    subscriptions; the-loop's own events are not GitHub's)."""
    return {e for e, _ in ROUTES if e not in INTERNAL_EVENTS} | set(ACKNOWLEDGED)
