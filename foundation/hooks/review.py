"""The ``## Review comments`` section: the durable, checked-in record of gate decisions.

Entry format (specification, "The recorded section is append-only and attributed")::

    ## Review comments

    ### 2026-07-28 — @reviewer — approved with comments
    <!-- the-loop reviewed=<fingerprint> -->
    <!-- the-loop record=<base64url record> signature=<key id>:<signature> -->
    - The Security design section should name the fail-closed behaviour explicitly.

The hidden ``record`` line is the entry's signed record (:mod:`graph.signing`): the work
item, gate, visit, outcome, reviewer, source, what was approved and when, signed with the
service's key. Reading a record back (:func:`verified_approval`) counts an entry only when
its signature verifies against a trusted key, it names this work item, artifact and gate,
its visible heading and bullets are what was signed, and its reviewer is authorized now.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from graph import signing
from graph.model import Approval, Message, RecordCheck

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
#: The hidden line under an entry that carries its signed record (bounded: linear to
#: match, whatever the text around it).
SIGNED_RE = re.compile(
    r"^<!--[ \t]*the-loop record=([A-Za-z0-9_-]{1,"
    + str(signing.MAX_RECORD_CHARS)
    + r"})[ \t]+signature=([A-Za-z0-9_:-]{1,120})[ \t]*-->[ \t]*$", re.MULTILINE)
_ENTRY_LINE_RE = re.compile(ENTRY_RE.pattern)
APPROVALS = frozenset({"approved", "approved-with-comments"})


def _in_entry(line: str) -> bool:
    """Whether ``line`` continues an entry: a blank line, a hidden line or a bullet."""
    return (not line.strip() or line.startswith("- ") or REVIEWED_RE.fullmatch(line)
            is not None or SIGNED_RE.fullmatch(line) is not None)


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
    and signed-record lines and its bullets, blank lines between them), an emptied
    ``## Review comments`` heading, trailing blanks and runs of blank lines. ``None``
    for an absent artifact. A push that only adds entries keeps it; any other change
    alters it."""
    if markdown is None:
        return None
    kept: list[str] = []
    in_entry = False
    for line in markdown.replace("\r\n", "\n").split("\n"):
        if _ENTRY_LINE_RE.fullmatch(line):
            in_entry = True
            continue
        if in_entry and _in_entry(line):
            if not line.strip():
                kept.append("")  # runs of blank lines collapse below
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


@dataclass(frozen=True)
class Entry:
    """One entry under ``## Review comments``, as written (untrusted until verified).

    Attributes:
        line: 1-based line number of its heading in the artifact.
        date, login, outcome: its visible heading (outcome as a gate outcome id).
        record, signature: its hidden signed-record line's two values, or ``None``.
        bullets: its follow-up bullets, without the ``- ``.
    """

    line: int
    date: str
    login: str
    outcome: str
    record: str | None
    signature: str | None
    bullets: tuple[str, ...]


def parsed_entries(markdown: str | None) -> list[Entry]:
    """Every entry under ``## Review comments`` with its hidden lines and bullets (one
    pass, linear in the text's length)."""
    if not markdown:
        return []
    found: list[Entry] = []
    in_section = False
    current: Entry | None = None
    bullets: list[str] = []

    def close() -> None:
        if current is not None:
            found.append(replace(current, bullets=tuple(bullets)))

    for number, line in enumerate(markdown.replace("\r\n", "\n").split("\n"), start=1):
        if SECTION_RE.fullmatch(line):
            in_section = True
            continue
        head = _ENTRY_LINE_RE.fullmatch(line) if in_section else None
        signed = SIGNED_RE.fullmatch(line) if current is not None else None
        if head:
            close()
            current, bullets = Entry(number, head.group(1), head.group(2),
                                     _WORDS_TO_OUTCOME[head.group(3)], None, None, ()), []
        elif current is not None and signed and current.record is None:
            current = replace(current, record=signed.group(1), signature=signed.group(2))
        elif current is not None and line.startswith("- "):
            bullets.append(line[2:])
        elif current is not None and not _in_entry(line):
            close()
            current = None
        if in_section and re.match(r"##[ \t]+\S", line):
            in_section = False
    close()
    return found


#: Why an entry did not count, in the-loop's words (never the entry's own text).
_NOT_COUNTED = {
    "unsigned": "it carries no signature of the-loop (an entry written by hand)",
    "malformed": "its signed-record line is malformed",
    "unknown-key": "it is signed by a key that is not published in .the-loop/keys/",
    "bad-signature": "its signature does not verify (the record was altered)",
    "altered": "its heading or bullets differ from what was signed (the entry was altered)",
    "elsewhere": "it was signed for another work item or artifact (a copied entry)",
    "unauthorized": "its reviewer is not authorized for this gate now",
}


def entry_problem(entry: Entry,
                  check: RecordCheck) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)`` when ``entry`` is a verified record of ``check``'s work item and
    artifact whose reviewer may decide the gate now; ``(None, None)`` for a verified
    record of another gate (not this gate's to count); else ``(None, problem)`` with a key
    of the reasons above (``unsigned``, ``bad-signature``, ``altered``...)."""
    verified = signing.verify(entry.record, entry.signature, check.keys)
    data = verified.record
    if data is None:
        return None, verified.problem
    approved = data.get("approved")
    if not isinstance(approved, dict):
        return None, "malformed"
    if data.get("work_item") != check.work_item or approved.get("artifact") != check.path:
        return None, "elsewhere"
    if data.get("gate") != check.gate:
        return None, None
    at = data.get("at")
    if (data.get("reviewer"), data.get("outcome"), at[:10] if isinstance(at, str) else None,
            data.get("notes")) != (entry.login, entry.outcome, entry.date,
                                   signing.notes_digest(entry.bullets)):
        return None, "altered"
    reviewer_id = data.get("reviewer_id")
    if not check.authorized(str(data["reviewer"]),
                            reviewer_id if isinstance(reviewer_id, int) else None):
        return None, "unauthorized"
    return dict(data), None


def not_counted(path: str, line: int | None, outcome: str, problem: str) -> Message:
    """The finding for a record that did not count (code ``record-<problem>``)."""
    where = f"the review entry at line {line}" if line else "a review record"
    return Message(f"{path}: {where} ({OUTCOME_WORDS.get(outcome, 'unknown outcome')}) is "
                   f"not counted: {_NOT_COUNTED.get(problem, problem)}",
                   path=path, code=f"record-{problem}")


def verified_approval(markdown: str | None, check: RecordCheck) -> Approval:
    """Whether the latest *verified* entry of ``check.gate`` in ``markdown`` approves the
    artifact's current content (its signed ``approved.digest`` is the current
    :func:`fingerprint`), and a finding for every entry that did not count
    (:func:`entry_problem`). Unsigned, forged, altered, copied entries and those of
    people no longer authorized never decide. Verified records of this artifact in
    ``check.elsewhere`` (a fork's signed comments) count too, the latest by their
    recorded time deciding."""
    counted: list[tuple[str, int, dict[str, Any]]] = []  # (at, order, record)
    findings: list[Message] = []
    for entry in parsed_entries(markdown):
        data, problem = entry_problem(entry, check)
        if problem is not None:
            findings.append(not_counted(check.path, entry.line, entry.outcome, problem))
        elif data is not None:
            counted.append((str(data["at"]), len(counted), data))
    for text in check.elsewhere:  # a fork's signed comments: only valid records count
        for entry in parsed_entries(text):
            data, problem = entry_problem(entry, check)
            if data is not None and problem is None:
                counted.append((str(data["at"]), len(counted), data))
    latest = max(counted, key=lambda c: (c[0], c[1]))[2] if counted else None
    approved = (latest is not None and latest["outcome"] in APPROVALS
                and latest["approved"].get("digest") == fingerprint(markdown))
    return Approval(approved, tuple(findings))


def records_in_comment(body: str | None, *, work_item: str, path: str,
                       keys: Mapping[str, Any]) -> bool:
    """Whether comment ``body`` carries a review record of ``path`` in ``work_item``
    signed with one of ``keys`` (the record of a pull request from a fork the-loop cannot
    push to, posted by record-feedback), its heading and bullets as signed. Who posted
    the comment does not matter: only the service's key makes a valid record."""
    check = RecordCheck(work_item, "", path, keys, lambda login, user_id: True)
    for entry in parsed_entries(body):
        verified = signing.verify(entry.record, entry.signature, keys)
        if verified.record is None:
            continue
        data, problem = entry_problem(entry, replace(check, gate=str(verified.record.get(
            "gate"))))
        if data is not None and problem is None:
            return True
    return False


def append_signed_entry(
    markdown: str, signer: signing.Signer | None, *, work_item: str, gate: str, visit: int,
    path: str, outcome: str, login: str, reviewer_id: int | None = None,
    source: str | None = None, head_sha: str | None = None, bullets: Sequence[str] = (),
    at: str, reviewed_text: str | None = None,
) -> str:
    """``markdown`` with the entry of one gate decision appended (:func:`append_entry`),
    bound to the content decided on (``reviewed_text``, default ``markdown``: its
    :func:`fingerprint` and blob SHA) and, with ``signer``, carrying its signed record
    (:func:`graph.signing.record`: work item, gate, visit, outcome, reviewer id and login,
    source, the approved artifact, blob SHA, fingerprint and head, the bullets' digest,
    ``at``). The one writer of a review entry: record-feedback and the tests use it.

    Args:
        at: UTC time ``YYYY-MM-DDTHH:MM:SSZ``; the heading shows its date.

    Raises:
        ValueError: as :func:`append_entry`.
    """
    text = markdown if reviewed_text is None else reviewed_text
    digest = fingerprint(text)
    signed = None
    if signer is not None:
        data = signing.record(
            work_item=work_item, gate=gate, visit=visit, outcome=outcome, reviewer=login,
            reviewer_id=reviewer_id, source=source,
            approved={"artifact": path, "head_sha": head_sha, "blob_sha": blob_sha(text),
                      "digest": digest},
            notes=signing.notes_digest(tuple(bullets)), at=at)
        signed = signed_line(signing.encode(data), signer.sign(data))
    return append_entry(markdown, date=at[:10], login=login, outcome=outcome,
                        bullets=bullets, reviewed=digest, signed=signed)


def signed_line(encoded: str, signature: str) -> str:
    """The hidden line carrying an entry's signed record (:func:`graph.signing.encode`)
    and its signature (:meth:`graph.signing.Signer.sign`)."""
    return f"<!-- the-loop record={encoded} signature={signature} -->"


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
    reviewed: str | None = None, signed: str | None = None,
) -> str:
    """``markdown`` with one entry appended to its ``## Review comments`` section (created
    at the end when absent). Append-only: existing text is never changed. With
    ``reviewed`` (a :func:`fingerprint`), the entry carries its hidden reviewed line;
    with ``signed`` (:func:`signed_line`), its signed record.

    Raises:
        ValueError: ``outcome`` is not one of the three gate outcomes, or ``login`` is not
            a GitHub login.
    """
    if outcome not in OUTCOME_WORDS:
        raise ValueError(f"unknown outcome {outcome!r}")
    if not re.fullmatch(r"[A-Za-z0-9-]+(?:\[bot\])?", login):
        raise ValueError("login is not a GitHub login")
    # Blank lines around the hidden lines and the bullets keep markdownlint's MD022 and
    # MD032 (headings and lists surrounded by blank lines) met.
    entry = [f"### {date} — @{login} — {OUTCOME_WORDS[outcome]}"]
    hidden = [line for line in (reviewed_line(reviewed) if reviewed else None, signed) if line]
    if hidden:
        entry += ["", *hidden]
    if bullets:
        entry += ["", *(f"- {b}" for b in bullets)]
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
