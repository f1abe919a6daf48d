"""Pure translation of GitHub webhook payloads into the graph's WorkItem and InboundEvent.

Field names follow GitHub's "Webhook events and payloads" documentation. Nothing here
performs I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graph.model import InboundEvent, WorkItem
from the_loop.config.repository import DEFAULT_SPEC_DIR


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
        author=((comment.get("user") or {}).get("login")
                if isinstance(comment, Mapping) else None),
        review_commit=review.get("commit_id"),
    )


def head_ref(payload: Mapping[str, Any]) -> str | None:
    """The pull request head branch named by the payload, if any."""
    pull = payload.get("pull_request") or {}
    return (pull.get("head") or {}).get("ref")


@dataclass(frozen=True)
class CIResult:
    """One CI result for a commit: ``name`` (check run, app slug of a check suite,
    workflow name, or status context) and its ``conclusion`` (GitHub's word; a commit
    status's ``state``; ``pending`` while not completed)."""

    repository: str
    sha: str
    name: str
    conclusion: str


def ci_result(event: str, payload: Mapping[str, Any]) -> CIResult | None:
    """The CI result a ``check_run``, ``check_suite``, ``workflow_run`` or ``status``
    payload reports (GitHub docs, "Webhook events and payloads"), else ``None``."""
    repo = (payload.get("repository") or {}).get("full_name")
    if not repo:
        return None
    if event in ("check_run", "check_suite", "workflow_run"):
        obj = payload.get(event) or {}
        if event == "check_suite":
            name = ((obj.get("app") or {}).get("slug")) or "check_suite"
        else:
            name = obj.get("name")
        sha = obj.get("head_sha")
        conclusion = obj.get("conclusion") if obj.get("status") == "completed" else "pending"
    elif event == "status":
        name, sha, conclusion = payload.get("context"), payload.get("sha"), payload.get("state")
    else:
        return None
    if not (name and sha and conclusion):
        return None
    return CIResult(str(repo), str(sha), str(name), str(conclusion))


def head_sha(payload: Mapping[str, Any]) -> str | None:
    """The pull request head commit named by the payload, if any."""
    pull = payload.get("pull_request") or {}
    return (pull.get("head") or {}).get("sha")
