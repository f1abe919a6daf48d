"""The ``## Review comments`` section: the durable, checked-in record of gate decisions.

Entry format (specification, "The recorded section is append-only and attributed")::

    ## Review comments

    ### 2026-07-28 — @reviewer — approved with comments
    - The Security design section should name the fail-closed behaviour explicitly.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

SECTION = "Review comments"
OUTCOME_WORDS = {
    "approved": "approved",
    "approved-with-comments": "approved with comments",
    "changes-requested": "changes requested",
}
_WORDS_TO_OUTCOME = {v: k for k, v in OUTCOME_WORDS.items()}
ENTRY_RE = re.compile(
    r"^###[ \t]+(\d{4}-\d{2}-\d{2})[ \t]+[—-][ \t]+@([A-Za-z0-9-]+(?:\[bot\])?)[ \t]+[—-][ \t]+"
    r"(approved with comments|approved|changes requested)[ \t]*$",
    re.MULTILINE,
)
SECTION_RE = re.compile(r"^##[ \t]+Review comments[ \t]*$", re.MULTILINE | re.IGNORECASE)
#: The hidden line under an entry that binds it to the content reviewed
#: (:func:`fingerprint` of the artifact as it was approved).
REVIEWED_RE = re.compile(r"^<!--[ \t]*the-loop reviewed=([0-9a-f]{64})[ \t]*-->[ \t]*$",
                         re.MULTILINE)
_ENTRY_LINE_RE = re.compile(ENTRY_RE.pattern)


def blob_sha(text: str) -> str:
    """Git's blob SHA of ``text`` (what GitHub reports as a file's ``sha``)."""
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def reviewed_line(print_: str) -> str:
    """The hidden line that binds an entry to fingerprint ``print_``."""
    return f"<!-- the-loop reviewed={print_} -->"


def fingerprint(markdown: str | None) -> str | None:
    """SHA-256 hex of what a reviewer approves in ``markdown``: the text without
    the-loop's own review-record entries (an entry's heading line, its hidden reviewed
    line and its bullets), an emptied ``## Review comments`` heading, trailing blanks and
    runs of blank lines. ``None`` for an absent artifact. A push that only adds entries
    keeps it; any other change alters it."""
    if markdown is None:
        return None
    kept: list[str] = []
    in_entry = False
    for line in markdown.replace("\r\n", "\n").split("\n"):
        if _ENTRY_LINE_RE.fullmatch(line):
            in_entry = True
            continue
        if in_entry and (REVIEWED_RE.fullmatch(line) or line.startswith("- ")):
            continue
        in_entry = False
        kept.append(line.rstrip())
    text = "\n".join(kept)
    text = re.sub(r"^##[ \t]+Review comments[ \t]*\n(?=\s*(?:^##[ \t]|\Z))", "", text,
                  flags=re.MULTILINE | re.IGNORECASE)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def entries(markdown: str | None) -> list[tuple[str, str, str]]:
    """``(date, login, outcome)`` of every entry under ``## Review comments``, in order."""
    if not markdown:
        return []
    match = SECTION_RE.search(markdown)
    if not match:
        return []
    section = markdown[match.end():]
    next_h2 = re.search(r"^##[ \t]+\S", section, re.MULTILINE)
    if next_h2:
        section = section[:next_h2.start()]
    return [(m.group(1), m.group(2), _WORDS_TO_OUTCOME[m.group(3)])
            for m in ENTRY_RE.finditer(section)]


def without_record(markdown: str) -> str:
    """``markdown`` without its ``## Review comments`` section (heading to the next
    ``##`` heading or the end): the artifact's own content, which a repair must change
    (``DecisionRecord.strip``)."""
    match = SECTION_RE.search(markdown)
    if not match:
        return markdown
    rest = markdown[match.end():]
    next_h2 = re.search(r"^##[ \t]+\S", rest, re.MULTILINE)
    tail = rest[next_h2.start():] if next_h2 else ""
    return markdown[:match.start()].rstrip("\n") + "\n" + tail


def approved_in(markdown: str | None) -> bool:
    """Whether the latest recorded decision in ``markdown`` is an approval of its current
    content: an entry bound to a fingerprint (its hidden reviewed line) counts only while
    the artifact's :func:`fingerprint` is still that one."""
    found = entries(markdown)
    if not found or found[-1][2] not in ("approved", "approved-with-comments"):
        return False
    bound = reviewed_of_last(markdown)
    return bound is None or bound == fingerprint(markdown)


def reviewed_of_last(markdown: str | None) -> str | None:
    """The fingerprint the latest entry is bound to, or ``None`` (an entry written by
    hand, or before entries were bound)."""
    if not markdown:
        return None
    heads = list(ENTRY_RE.finditer(markdown))
    if not heads:
        return None
    tail = markdown[heads[-1].end():].lstrip("\n").split("\n", 1)[0]
    match = REVIEWED_RE.fullmatch(tail.strip())
    return match.group(1) if match else None


def append_entry(
    markdown: str, *, date: str, login: str, outcome: str, bullets: Sequence[str] = (),
    reviewed: str | None = None,
) -> str:
    """``markdown`` with one entry appended to its ``## Review comments`` section (created
    at the end when absent). Append-only: existing text is never changed. With
    ``reviewed`` (a :func:`fingerprint`), the entry carries its hidden reviewed line.

    Raises:
        ValueError: ``outcome`` is not one of the three gate outcomes, or ``login`` is not
            a GitHub login.
    """
    if outcome not in OUTCOME_WORDS:
        raise ValueError(f"unknown outcome {outcome!r}")
    if not re.fullmatch(r"[A-Za-z0-9-]+(?:\[bot\])?", login):
        raise ValueError("login is not a GitHub login")
    entry = [f"### {date} — @{login} — {OUTCOME_WORDS[outcome]}"]
    if reviewed:
        entry.append(reviewed_line(reviewed))
    entry += [f"- {b}" for b in bullets]
    block = "\n".join(entry) + "\n"
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    match = SECTION_RE.search(text)
    if not match:
        return f"{text}\n## {SECTION}\n\n{block}"
    rest = text[match.end():]
    next_h2 = re.search(r"^##[ \t]+\S", rest, re.MULTILINE)
    cut = match.end() + (next_h2.start() if next_h2 else len(rest))
    head, tail = text[:cut].rstrip("\n") + "\n\n", text[cut:]
    return head + block + ("\n" + tail if tail else "")
