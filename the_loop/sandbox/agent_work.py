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
- A task plan (an artifact named ``tasks.md``): its ``## Tasks`` section holds the plan
  :data:`PLAN` as a ```` ```yaml ```` block (``tasks:``, two tasks and one that depends on
  both; graph/tasks.py reads it).
- A task of a plan (``task``): ``tasks/<task>.md`` as before, plus real code and its test,
  ``demo_<name>.py`` and ``tests/test_demo_<name>.py`` (``name``: the task id with ``-``
  as ``_``). The first turn of task :data:`DEFECTIVE` writes its code with one deliberate
  defect its test catches; a resumed turn of that task whose feedback comes from
  ``verify-tests`` (the CI check blocked) fixes it, as does a turn of the node's own
  session (no ``task``: the plan's repair after its waves) on that feedback, for every
  task whose files are in the checkout (it writes no ``IMPLEMENTED.md`` then).
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
#: The task plan the agent writes into a ``tasks.md`` artifact's ``## Tasks`` section.
PLAN = """```yaml
tasks:
  - id: greet
    title: A greeting for a name
    acceptance: ["greet('Ada') == 'Hello, Ada!'"]
    paths: [demo_greet.py, tests/test_demo_greet.py]
  - id: shout
    title: Text in capitals
    acceptance: ["shout('hi') == 'HI'"]
    paths: [demo_shout.py, tests/test_demo_shout.py]
  - id: banner
    title: A shouted greeting, built on greet and shout
    depends_on: [greet, shout]
    acceptance: ["banner('Ada') == 'HELLO, ADA!'"]
    paths: [demo_banner.py, tests/test_demo_banner.py]
```"""
#: The task whose first turn carries the deliberate defect (CI catches it).
DEFECTIVE = "greet"
#: task id -> (code, test); ``{defect}`` in the code is the defect's place.
_CODE = {
    "greet": ('def greet(name: str) -> str:\n    return f"{defect}, {name}!"\n',
              'from demo_greet import greet\n\n\ndef test_greet():\n'
              '    assert greet("Ada") == "Hello, Ada!"\n'),
    "shout": ("def shout(text: str) -> str:\n    return text.upper()\n",
              'from demo_shout import shout\n\n\ndef test_shout():\n'
              '    assert shout("hi") == "HI"\n'),
    "banner": ("from demo_greet import greet\nfrom demo_shout import shout\n\n\n"
               "def banner(name: str) -> str:\n    return shout(greet(name))\n",
               'from demo_banner import banner\n\n\ndef test_banner():\n'
               '    assert banner("Ada") == "HELLO, ADA!"\n'),
}


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
        if section_name(heading) == "Tasks" and Path(path).name == "tasks.md":
            body = f"{body}\n\n{PLAN}"
        parts.append(f"\n{heading}\n\n{body}\n")
    for n in range(1, revisions + 1):
        parts.append(f"\nRevised after review {n}.\n")
    return "".join(parts)


def _hook_feedback(prompt: str, hook: str) -> list[str]:
    """The feedback messages of ``hook`` in a turn's input."""
    return [m["message"] for line in prompt.splitlines()
            if (m := FEEDBACK.match(line.strip())) and m["hook"] == hook]


def task_code(task: str, *, defective: bool) -> dict[str, str]:
    """Repository-relative path -> text of task ``task``'s code and its pytest test
    (``defective``: the deliberate defect, for :data:`DEFECTIVE` only)."""
    name = task.replace("-", "_")
    code, test = _CODE.get(task, (
        f"def {name}() -> str:\n    return {task!r}\n",
        f"from demo_{name} import {name}\n\n\ndef test_{name}():\n"
        f"    assert {name}() == {task!r}\n"))
    code = code.replace("{defect}", "Helo" if defective and task == DEFECTIVE else "Hello")
    return {f"demo_{name}.py": code, f"tests/test_demo_{name}.py": test}


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
    ci_failed = any(m.startswith("check ") for m in _hook_feedback(prompt, "verify-tests"))
    if state is None:
        state = {"artifacts": {}, "written": {}, "turns": 0}
        state["artifacts"].update(artifacts)
        for path, headings in artifacts.items():
            state["written"][path] = headings[:-1]
        if not artifacts and not (ci_failed and not task):
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
    if task:
        if ci_failed:
            state["fixed"] = True  # the CI check blocked the last turn: repair the defect
        for rel, text in task_code(task, defective=not state.get("fixed")).items():
            target = cwd / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    elif ci_failed:
        # The plan node's own session after its waves (the CI check failed on the work
        # item's branch, where every task's work was merged): repair each task's code
        # found in the checkout.
        state["fixed"] = True
        for name in _CODE:
            files = task_code(name, defective=False)
            if all((cwd / rel).is_file() for rel in files):
                for rel, text in files.items():
                    (cwd / rel).write_text(text, encoding="utf-8")
    if "decided `changes-requested`" in prompt:  # a reviewer asked for changes: revise
        state["revisions"] = int(state.get("revisions", 0)) + 1
    for path, headings in state["written"].items():
        target = cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(path, headings, filler, texts,
                                 int(state.get("revisions", 0))), encoding="utf-8")
    return state
