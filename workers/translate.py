"""Pure translation of GitHub webhook payloads into the graph's WorkItem and InboundEvent.

Field names follow GitHub's "Webhook events and payloads" documentation. Nothing here
performs I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graph.context import DEFAULT_SPEC_DIR
from graph.model import InboundEvent, WorkItem


def subject(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The issue or pull request object a payload is about, if any."""
    for key in ("pull_request", "issue"):
        item = payload.get(key)
        if isinstance(item, Mapping):
            return item
    return None


def labels_of(payload: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the labels on the payload's issue or pull request, as GitHub sent them."""
    item = subject(payload) or {}
    return tuple(
        str(label.get("name")) for label in item.get("labels") or () if isinstance(label, Mapping)
    )


def work_item(
    ref: str, payload: Mapping[str, Any], spec_dir: str = DEFAULT_SPEC_DIR
) -> WorkItem:
    """Build the WorkItem for ``ref`` (``github:OWNER/REPO#N``) from ``payload``.

    ``spec_dir`` is a template; ``{number}`` becomes the issue or PR number.
    """
    repo_part, _, number_part = ref.removeprefix("github:").partition("#")
    number = int(number_part)
    item = subject(payload) or {}
    is_pr = "pull_request" in payload or bool(item.get("pull_request"))
    return WorkItem(
        ref=ref,
        id=number,
        repository=repo_part,
        kind="pull_request" if is_pr else "issue",
        tags=labels_of(payload),
        spec_dir=spec_dir.format(number=number),
    )


def inbound_event(event: str, delivery_id: str, payload: Mapping[str, Any]) -> InboundEvent:
    """Reduce a payload to the fields hooks may use (see :class:`graph.model.InboundEvent`)."""
    sender = payload.get("sender") or {}
    comment = payload.get("comment") or payload.get("review") or {}
    review = payload.get("review") or {}
    pull = payload.get("pull_request") or {}
    label = payload.get("label") or {}
    body = comment.get("body") if isinstance(comment, Mapping) else None
    return InboundEvent(
        kind=f"{event}.{payload.get('action')}" if payload.get("action") else event,
        delivery_id=delivery_id,
        actor=sender.get("login"),
        actor_type=sender.get("type"),
        body=body if isinstance(body, str) else None,
        review_state=str(review["state"]).upper() if review.get("state") else None,
        comment_id=comment.get("id") if isinstance(comment, Mapping) else None,
        head_sha=(pull.get("head") or {}).get("sha"),
        label=label.get("name"),
    )


def head_sha(payload: Mapping[str, Any]) -> str | None:
    """The pull request head commit named by the payload, if any."""
    pull = payload.get("pull_request") or {}
    return (pull.get("head") or {}).get("sha")
