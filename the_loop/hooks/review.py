"""The ``## Review comments`` section: the durable, checked-in record of gate decisions.

Entry format (specification, "The recorded section is append-only and attributed")::

    ## Review comments

    ### 2026-07-28 — @reviewer — approved with comments
    - The Security design section should name the fail-closed behaviour explicitly.
"""

from __future__ import annotations

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
    """Whether the latest recorded decision in ``markdown`` is an approval."""
    found = entries(markdown)
    return bool(found) and found[-1][2] in ("approved", "approved-with-comments")


def append_entry(
    markdown: str, *, date: str, login: str, outcome: str, bullets: Sequence[str] = ()
) -> str:
    """``markdown`` with one entry appended to its ``## Review comments`` section (created
    at the end when absent). Append-only: existing text is never changed.

    Raises:
        ValueError: ``outcome`` is not one of the three gate outcomes, or ``login`` is not
            a GitHub login.
    """
    if outcome not in OUTCOME_WORDS:
        raise ValueError(f"unknown outcome {outcome!r}")
    if not re.fullmatch(r"[A-Za-z0-9-]+(?:\[bot\])?", login):
        raise ValueError("login is not a GitHub login")
    entry = [f"### {date} — @{login} — {OUTCOME_WORDS[outcome]}"]
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
