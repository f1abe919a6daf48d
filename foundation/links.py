"""Where things are on the dashboard and on GitHub: the one builder of their URLs.

Paths are relative to the receiver's root (``THE_LOOP_PUBLIC_URL`` when people reach it
from outside). A work-item ref ``github:OWNER/REPO#N`` appears in paths with its ``#``
percent-encoded (``github:OWNER/REPO%23N``); the routes accept any percent-encoding of
it.
"""

from __future__ import annotations

import urllib.parse

API_PREFIX = "/api/v1"
UI_PREFIX = "/ui"


def quote_ref(ref: str) -> str:
    """``ref`` as a path segment: ``github:OWNER/REPO%23N``."""
    return urllib.parse.quote(ref, safe=":/")


def work_item_path(ref: str) -> str:
    """The work item's dashboard page: ``/ui/work-items/github:OWNER/REPO%23N``."""
    return f"{UI_PREFIX}/work-items/{quote_ref(ref)}"


def api_path(ref: str, what: str = "") -> str:
    """``/api/v1/work-items/REF`` (``what``: ``graph`` or ``events`` appended)."""
    return f"{API_PREFIX}/work-items/{quote_ref(ref)}" + (f"/{what}" if what else "")


def page_url(public_url: str | None, ref: str) -> str | None:
    """The absolute URL of ``ref``'s page under ``public_url`` (``THE_LOOP_PUBLIC_URL``),
    or ``None`` without one."""
    return f"{public_url.rstrip('/')}{work_item_path(ref)}" if public_url else None


def github_item(web_url: str, repository: str, number: int) -> str:
    """An issue or pull request on GitHub (``/issues/N`` shows either: GitHub sends a
    pull request's to ``/pull/N``)."""
    return f"{web_url}/{repository}/issues/{number}"


def github_decision(web_url: str, repository: str, number: int, source: str | None,
                    comment_id: int | None) -> str | None:
    """Where a gate decision was made: the review (``#pullrequestreview-ID``) or the
    comment (``#issuecomment-ID``) GitHub shows it at, or ``None`` without its id
    ("Linking to a comment", GitHub docs: the anchors of the conversation tab)."""
    if not isinstance(comment_id, int) or isinstance(comment_id, bool):
        return None
    if source in ("review", "review-body"):
        return f"{web_url}/{repository}/pull/{number}#pullrequestreview-{comment_id}"
    return f"{github_item(web_url, repository, number)}#issuecomment-{comment_id}"
