"""The work of a deterministic agent turn, shared by the demo agent (``demo_agent.py``)
and the test harness fakes (``tests/harnesses/fakelib.py``). Standard library only: the
fakes run under the system ``python3`` with the minimal environment a turn gets.

The prompt contract is the-loop's own (:mod:`runner.prompts`): artifacts to write are
lines ``- `specs/12/requirements.md` with sections: `## Problem`, `## Requirements```;
a blocked turn's feedback lists the check's messages as lines
``- validate-artifacts: specs/12/requirements.md has no 'Requirements' section (...)``.

- First turn of a session: each listed artifact is written with every required section
  but the last (deliberately, so the repair loop shows); no artifact listed:
  ``IMPLEMENTED.md``.
- Resumed turn: a missing section is added only when a feedback line names it
  (``'Name'``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["ARTIFACT", "FEEDBACK", "QUOTED", "SECTION", "do_work", "parse_prompt", "render"]

ARTIFACT = re.compile(r"^- `(?P<path>[^`]+)` with sections: (?P<sections>.+)$")
FEEDBACK = re.compile(r"^- (?P<hook>[a-z0-9][a-z0-9_-]*): (?P<message>.+)$")
SECTION = re.compile(r"`(#{1,6} [^`]+)`")
QUOTED = re.compile(r"'([^']+)'")
#: What a section says when no text is given for it.
FILLER = "Written by the fake harness."


def parse_prompt(prompt: str) -> tuple[dict[str, list[str]], list[str]]:
    """``({path: [headings]}, [feedback messages])`` from a turn's input."""
    artifacts: dict[str, list[str]] = {}
    feedback: list[str] = []
    for line in prompt.splitlines():
        line = line.strip()
        match = ARTIFACT.match(line)
        if match:
            artifacts[match["path"]] = SECTION.findall(match["sections"])
            continue
        match = FEEDBACK.match(line)
        if match:
            feedback.append(match["message"])
    return artifacts, feedback


def section_name(heading: str) -> str:
    """``Problem`` from ``## Problem``."""
    return heading.lstrip("#").strip()


def render(path: str, headings: list[str], filler: str = FILLER,
           texts: dict[str, str] | None = None, revisions: int = 0) -> str:
    """The artifact ``path`` with ``headings``; each section holds ``texts[name]`` (by
    section name) or ``filler``; one line per review it was revised after. The title is
    the file's name, never a section name (a title must not satisfy a check)."""
    parts = [f"# {Path(path).name}\n"]
    for heading in headings:
        body = (texts or {}).get(section_name(heading), filler)
        parts.append(f"\n{heading}\n\n{body}\n")
    for n in range(1, revisions + 1):
        parts.append(f"\nRevised after review {n}.\n")
    return "".join(parts)


def do_work(prompt: str, state: dict[str, Any] | None, cwd: Path, *, filler: str = FILLER,
            texts: dict[str, str] | None = None, task: str | None = None) -> dict[str, Any]:
    """The agent's work for one turn in checkout ``cwd``; returns the session's new state
    (a JSON-able dict: ``artifacts`` path -> headings, ``written`` path -> headings,
    ``turns``).

    ``state`` ``None``: a first turn (writes artifacts without their last section);
    otherwise a resumed turn (adds the sections the feedback names). A node without
    artifacts gets ``IMPLEMENTED.md``, or ``tasks/<task>.md`` for task ``task`` of a plan
    (``THE_LOOP_TASK``).
    """
    artifacts, feedback = parse_prompt(prompt)
    if state is None:
        state = {"artifacts": {}, "written": {}, "turns": 0}
        state["artifacts"].update(artifacts)
        for path, headings in artifacts.items():
            state["written"][path] = headings[:-1]
        if not artifacts:
            name = f"tasks/{task}.md" if task else "IMPLEMENTED.md"
            state["written"][name] = ["## Changes"]
            state["artifacts"][name] = ["## Changes"]
    else:
        for path, headings in artifacts.items():
            state["artifacts"].setdefault(path, headings)
            state["written"].setdefault(path, [])
        named = {name for message in feedback for name in QUOTED.findall(message)}
        for path, headings in state["artifacts"].items():
            have = state["written"].setdefault(path, [])
            for heading in headings:
                if section_name(heading) in named and heading not in have:
                    have.append(heading)
            have.sort(key=headings.index)
    state["turns"] += 1
    if "decided `changes-requested`" in prompt:  # a reviewer asked for changes: revise
        state["revisions"] = int(state.get("revisions", 0)) + 1
    for path, headings in state["written"].items():
        target = cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(path, headings, filler, texts,
                                 int(state.get("revisions", 0))), encoding="utf-8")
    return state
