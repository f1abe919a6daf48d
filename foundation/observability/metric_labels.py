"""The fixed label values of the-loop's Prometheus metrics (pure: no imports).

Shared by the receiver (:mod:`webhook.metrics`) and the worker (:mod:`workers.metrics`).
Event and action names are GitHub's; anything outside these sets is counted as
``other`` -- GitHub adds events, and the headers of a request that fails
authentication are anyone's -- so a label never takes more than a known number of values.
"""

from __future__ import annotations

__all__ = ["ACTIONS", "EVENTS", "NONE", "OTHER", "action_label", "event_label"]

OTHER = "other"
NONE = "none"

#: Events the App subscribes to (app.yml; tests/observability keeps this a superset of
#: ``workers.router.handled_events()``), plus ``ping``.
EVENTS = frozenset({
    "check_run", "check_suite", "installation", "installation_repositories", "issue_comment",
    "issues", "label", "ping", "pull_request", "pull_request_review",
    "pull_request_review_comment", "push", "status", "workflow_run",
})

#: GitHub's action names for those events ("Webhook events and payloads").
ACTIONS = frozenset({
    # issues, pull_request
    "opened", "edited", "deleted", "closed", "reopened", "assigned", "unassigned", "labeled",
    "unlabeled", "locked", "unlocked", "pinned", "unpinned", "transferred", "milestoned",
    "demilestoned", "typed", "untyped", "synchronize", "ready_for_review",
    "converted_to_draft", "review_requested", "review_request_removed", "auto_merge_enabled",
    "auto_merge_disabled", "enqueued", "dequeued",
    # comments, reviews, labels
    "created", "submitted", "dismissed",
    # checks, workflow runs
    "completed", "requested", "rerequested", "requested_action", "in_progress",
    # the-loop's own monitor deliveries
    "stale", "due",
    # installations
    "suspend", "unsuspend", "new_permissions_accepted", "added", "removed",
})


def event_label(event: object) -> str:
    """``event`` if it is one of :data:`EVENTS`, else ``other``."""
    return event if event in EVENTS else OTHER  # type: ignore[return-value]


def action_label(action: object) -> str:
    """``action`` if it is one of :data:`ACTIONS`, ``none`` when absent, else ``other``."""
    if action is None or action == "":
        return NONE
    return action if action in ACTIONS else OTHER  # type: ignore[return-value]
