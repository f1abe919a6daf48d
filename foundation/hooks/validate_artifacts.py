"""``validate-artifacts``: the node's declared artifacts exist and carry their sections.

Every unmet requirement is reported in one result (specification, "Chain semantics":
aggregation is the hook's job), so the work gets the complete list in a single round.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from foundation.hooks.review import records_in_comment
from graph import tasks as task_plan
from graph.model import HookContext, HookResult, Message
from graph.registry import hook

# Linear on artifact text from a pull request: a heading's closing ``#``s are stripped
# after the match, not by a lazy group (quadratic on a long run of spaces); a fence never
# closed runs to the end (CommonMark), so no opening is scanned to the end twice.
HEADING_RE = re.compile(r"^(#{1,6})[ \t]+(.+)$", re.MULTILINE)
FENCE_RE = re.compile(r"^(```|~~~).*?(?:^\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)


def headings(markdown: str) -> set[str]:
    """ATX headings of ``markdown`` (outside fenced code; a fence never closed runs to
    the end), case-folded, closing ``#``s and spaces stripped."""
    text = FENCE_RE.sub("", markdown)
    return {_heading_text(m.group(2)) for m in HEADING_RE.finditer(text)}


def sections(markdown: str) -> set[str]:
    """The section names of ``markdown``: its headings (as :func:`headings` reads them)
    but the document's title, its first level-1 heading (``# Requirements``), which names
    the document and is no section of it. Every other heading is a section, of any level:
    a level-1 heading after the title too (a document may put its sections at ``#``)."""
    text = FENCE_RE.sub("", markdown)
    found: set[str] = set()
    titled = False
    for m in HEADING_RE.finditer(text):
        if not titled and m.group(1) == "#":
            titled = True
            continue
        found.add(_heading_text(m.group(2)))
    return found


def _heading_text(raw: str) -> str:
    # The shortest non-empty prefix followed only by spaces, tabs and "#"s.
    return (raw.rstrip(" \t#") or raw[:1]).strip().casefold()


def front_matter(markdown: str) -> Mapping[str, Any] | None:
    """The YAML front matter between leading ``---`` lines (YAML 1.2, as graphs and config
    files: only ``true``/``false`` are booleans), or ``None``."""
    if not markdown.startswith("---"):
        return None
    end = markdown.find("\n---", 3)
    if end < 0:
        return None
    try:
        doc = YAML(typ="safe", pure=True).load(markdown[3:end])
    except YAMLError:
        return None
    return doc if isinstance(doc, Mapping) else None


def _sections_for(name: str, sections: Any) -> Sequence[str]:
    if isinstance(sections, Mapping):
        return list(sections.get(name, ()))
    return list(sections or ())


@hook("validate-artifacts", boundaries={"exit"},
      params={"sections", "locked", "artifacts", "reviewed", "tasks"}, validating=True)
def validate_artifacts(ctx: HookContext) -> HookResult:
    """Check each artifact of the node (``produces``, or ``with.artifacts``) in the work
    item's spec directory at the revision ``ctx.config.files`` reads.

    Parameters (``with:``): ``sections`` — sections every artifact must have (a list), or
    artifact name -> list: a section is a heading below the document's title, so the
    first level-1 heading (``# Requirements``) never counts as one, while any later
    heading does, ``#`` included (:func:`sections`); ``locked`` — the front matter must
    say ``locked: true``;
    ``reviewed`` — artifacts that have passed a gate and so must carry their
    ``## Review comments`` record (checked where the record can be written: a local
    checkout or a pull request; an issue's decisions live in state and on the issue; for
    a pull request from a fork the-loop cannot push to, a comment on it carrying the
    artifact's record signed with a trusted key is the record);
    ``tasks`` — the artifact (e.g. ``tasks.md``) whose machine-readable task list must be
    a valid plan (:mod:`graph.tasks`: every finding of the list, each with code
    ``plan-<kind>``: ``plan-cycle``, ``plan-missing-dependency``...).

    Returns ``pass`` when all hold, else one ``block`` listing every finding with its path.
    """
    names = list(ctx.params.get("artifacts") or ctx.artifacts.keys())
    if not names:
        return HookResult.skipped("validate-artifacts", "node declares no artifacts")
    base = ctx.work_item.spec_dir.rstrip("/")
    findings: list[Message] = []
    checked = []
    for name in names:
        path = ctx.artifacts.get(name) or (f"{base}/{name}" if base else name)
        text = ctx.config.files.read_text(path)
        if text is None:
            findings.append(Message(
                f"{path} does not exist at {ctx.config.files.revision}; node {ctx.node.id} "
                "must produce it", path=path, code="artifact-missing"))
            continue
        checked.append(path)
        present = sections(text)
        for section in _sections_for(name, ctx.params.get("sections")):
            if section.casefold() not in present:
                findings.append(Message(
                    f"{path} has no '{section}' section", path=path, code="section-missing"))
        if name == ctx.params.get("tasks"):
            _, problems = task_plan.check(text)
            findings += [Message(f"{path}: {p.message}", path=path, code=f"plan-{p.code}")
                         for p in problems]
        if ctx.params.get("locked"):
            meta = front_matter(text) or {}
            if meta.get("locked") is not True:
                findings.append(Message(
                    f"{path} is not locked (front matter needs 'locked: true')",
                    path=path, code="not-locked"))
    recordable = ctx.repo is not None or ctx.work_item.kind == "pull_request"
    comments: list[str] | None = None
    for name in ctx.params.get("reviewed") or () if recordable else ():
        path = f"{base}/{name}" if base else name
        text = ctx.config.files.read_text(path)
        if text is None or "review comments" in headings(text):
            continue
        if ctx.repo is None and ctx.config.records_elsewhere is not None:
            # A pull request from a fork the-loop cannot (or was refused to) push to: its
            # records are signed comments on the pull request (record-feedback).
            if comments is None:
                comments = list(ctx.config.records_elsewhere())
            if any(records_in_comment(body, work_item=ctx.work_item.ref, path=path,
                                      keys=ctx.config.record_keys) for body in comments):
                continue
        findings.append(Message(
            f"{path} passed a gate but has no '## Review comments' section recording it",
            path=path, code="review-record-missing"))
    if findings:
        return HookResult.blocked("validate-artifacts", *findings, checked=checked)
    return HookResult.passed("validate-artifacts", checked=checked)

