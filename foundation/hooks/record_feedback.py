"""``record-feedback``: append a gate's decision to the reviewed artifact's
``## Review comments`` section (specification, "Approved with comments — the comments land
in the artifact")."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any

from foundation.hooks.review import (
    append_signed_entry,
    fingerprint,
    verified_approval,
    without_record,
)
from graph.context import HEAD_MOVED
from graph.markers import MARKER_RE, effect_id, marker
from graph.model import DecisionRecord, HookContext, HookResult, Message
from graph.ports import IntegrationError, RetryLater
from graph.registry import hook

MAX_BULLETS = 20
MAX_BULLET_CHARS = 300
_COMMAND = re.compile(r"^\s*/(approve-with-comments|approve|request-changes)\b")
# A comment never closed runs to the end: each "<!--" is scanned to the end at most once.
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)


def follow_ups(body: str | None) -> list[str]:
    """The reviewer's remarks as bullet texts: non-empty lines that are not commands,
    quotes (``>``) or code fences, with HTML comments removed (one never closed hides
    the rest), each one line, bounded."""
    if not body:
        return []
    text = MARKER_RE.sub("", _HTML_COMMENT.sub("", body))
    out: list[str] = []
    in_fence = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence or not line or line.startswith(">") or _COMMAND.match(line):
            continue
        line = re.sub(r"^[-*+]\s+", "", line).lstrip("#").strip()
        if line:
            out.append(line[:MAX_BULLET_CHARS])
        if len(out) >= MAX_BULLETS:
            break
    return out


def _into(params: Mapping[str, Any]) -> tuple[str, ...]:
    into = params.get("into") or ()
    return (into,) if isinstance(into, str) else tuple(into)


@hook("record-feedback", requires={"github": {"get-file", "put-file", "comment"}},
      boundaries={"exit"}, params={"into", "section"},
      records=DecisionRecord(_into, verified_approval, fingerprint=fingerprint,
                             strip=without_record))
def record_feedback(ctx: HookContext) -> HookResult:
    """Append ``### <date> — @<login> — <outcome>``, its hidden reviewed line (the
    :func:`~foundation.hooks.review.fingerprint` of the content decided on), its signed
    record (:mod:`graph.signing`, with ``ctx.config.signer``) and, for an approval with
    comments, the reviewer's follow-ups to each ``into`` artifact. Locally (``ctx.repo``
    set) the file is written in place; in the service it is committed to the pull
    request's head branch in its head repository with the transport's ``put-file`` and
    a SHA precondition (a conflict re-reads and retries) when the-loop may push there
    (``ctx.config.can_push_head``); otherwise (a fork that does not allow maintainers'
    edits, or refuses the push) the entry is posted as a signed comment on the pull
    request instead, never committed to the base repository.

    Returns ``skip`` when no decision precedes it in the chain; ``block`` when the record
    cannot be written (an unrecorded decision must not pass silently).
    """
    name = "record-feedback"
    decided = next((r for r in reversed(ctx.results)
                    if r.status == "pass" and "outcome" in r.data and "actor" in r.data), None)
    if decided is None:
        return HookResult.skipped(name, "no decision earlier in the chain")
    if ctx.repo is None and not ctx.config.head_ref:
        return HookResult.skipped(
            name, "not a pull request: the decision is recorded in state and on the work item")
    outcome, login = str(decided.data["outcome"]), str(decided.data["actor"])
    bullets = follow_ups(ctx.event.body if ctx.event else None) if outcome != "approved" else []
    at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reviewer_id = decided.data.get("actor_id")
    source = decided.data.get("source_key")
    into = ctx.params.get("into") or list(ctx.artifacts) or []
    targets = [into] if isinstance(into, str) else list(into)
    base = ctx.work_item.spec_dir.rstrip("/")
    written, commented = [], []
    head: str | None = None
    for name_ in targets:
        path = f"{base}/{name_}" if base else name_

        def change(text: str, onto: str | None = None, path: str = path) -> str:
            return _with_entry(ctx, path, text, onto, outcome=outcome, login=login,
                               reviewer_id=reviewer_id if isinstance(reviewer_id, int) else None,
                               source=str(source) if source else None, bullets=bullets, at=at)
        try:
            moved = _write(ctx, path, change)
            if moved == _COMMENTED:
                commented.append(path)
                continue
            head = moved or head
        except RetryLater:
            raise  # transient: the delivery is retried, the decision is not lost
        except (IntegrationError, OSError, ValueError) as exc:
            return HookResult.blocked(name, Message(
                f"could not record the review in {path} ({type(exc).__name__})",
                path=path, code="record-failed"))
        written.append(path)
    extra = {"commented": commented} if commented else {}
    if head is not None:  # the branch moved: the rest of the delivery uses its new head
        return HookResult.passed(name, recorded=written, bullets=len(bullets),
                                 **{HEAD_MOVED: head}, **extra)
    return HookResult.passed(name, recorded=written, bullets=len(bullets), **extra)


def _with_entry(ctx: HookContext, path: str, text: str, onto: str | None, *, outcome: str,
                login: str, reviewer_id: int | None, source: str | None, bullets: list[str],
                at: str) -> str:
    """``text`` (or ``onto``, when given) with the decision's entry about ``text``
    appended, signed when the service holds a key."""
    return append_signed_entry(
        text if onto is None else onto, ctx.config.signer, work_item=ctx.work_item.ref,
        gate=ctx.node.id, visit=ctx.visit, path=path, outcome=outcome, login=login,
        reviewer_id=reviewer_id, source=source, head_sha=ctx.config.head_sha,
        bullets=bullets, at=at, reviewed_text=text)


#: What :func:`_write` returns when the record went to a signed comment.
_COMMENTED = "commented"


Change = Callable[[str, str | None], str]


def _write(ctx: HookContext, path: str, change: Change) -> str | None:
    """Write the record; returns the commit made on the pull request branch (``None``
    locally), or :data:`_COMMENTED` when it was posted as a signed comment."""
    if ctx.repo is not None:
        target = (ctx.repo / path).resolve()
        if ctx.repo.resolve() not in target.parents:
            raise ValueError("path leaves the checkout")
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(change(current, None), encoding="utf-8")
        return None
    github = ctx.config.github
    branch = ctx.config.head_ref
    item = ctx.work_item
    if github is None or item.repository is None or not branch:
        raise ValueError("no pull request branch to commit the record to")
    if not ctx.config.can_push_head:
        return _comment(ctx, path, change)
    repo = ctx.config.head_repo or item.repository
    for _ in range(3):
        got = github.get_file(repo=repo, path=path, ref=branch)
        try:
            put = github.put_file(repo=repo, path=path, branch=branch,
                                  text=change(got["text"], None), sha=got["sha"],
                                  message=f"the-loop: record review of {path}")
            commit = put.get("commit") if isinstance(put, dict) else None
            return str(commit) if commit else None
        except IntegrationError as exc:
            if exc.status in (403, 404) and repo.casefold() != item.repository.casefold():
                return _comment(ctx, path, change)  # the fork refused the push
            if exc.status not in (409, 422):  # someone pushed meanwhile: re-read and retry
                raise
    raise ValueError("the branch kept changing while the review was recorded")


def _comment(ctx: HookContext, path: str, change: Change) -> str:
    """Post the signed entry as a comment on the pull request (its head branch is in a
    fork the-loop may not push to); ``validate-artifacts`` accepts it as the record."""
    github = ctx.config.github
    item = ctx.work_item
    if github is None or item.repository is None or item.id is None:
        raise ValueError("no pull request to comment the record on")
    entry = change(ctx.config.files.read_text(path) or "", "").strip("\n")
    effect = effect_id(item.ref, ctx.node.id, ctx.visit, f"record:{path}")
    body = (f"**the-loop** · review record of `{path}` (this pull request's branch is in "
            "a repository the-loop cannot push to, so the record lives here, signed).\n\n"
            f"{entry}\n\n{marker(effect)}")
    github.comment(repo=item.repository, number=item.id, body=body)
    return _COMMENTED
