"""What the fake harnesses (``claude``, ``codex``, ``agent`` beside this file) share:
the prompt contract, the work an agent does, per-session state, the call record and the
test knobs.

Standard library only: the fakes run under the system ``python3`` with the minimal
environment a turn gets.

- Prompt contract (the-loop renders it): artifacts to write are lines
  ``- `specs/12/requirements.md` with sections: `## Problem`, `## Requirements```; a
  blocked turn's feedback lists the check's messages as lines
  ``- validate-artifacts: specs/12/requirements.md has no 'Requirements' section (...)``.
- First turn of a session: each listed artifact is written with every required section
  but the last (deliberately); no artifact listed: ``IMPLEMENTED.md``.
- Resumed turn: a missing section is added only when a feedback line names it.
- State: ``$HOME/.fake-harness/sessions/<id>.json`` (resume needs the same HOME).
- Every invocation appends ``{argv, stdin, env, cwd, pid}`` to
  ``$HOME/.fake-harness/calls.jsonl``.
- Knobs: ``$HOME/.fake-harness/knobs.json``: ``sleep`` (seconds before the result),
  ``spawn_child`` (a grandchild sleeping with stdout held), ``cost_usd``,
  ``hang_after_result``, ``no_result``, ``exit_code``, ``flood_lines`` (print that many
  lines first), ``new_session_on_resume`` (claude: a resumed run reports a new id),
  ``result_subtype`` (claude), ``bad_result`` (agent: an invalid result file),
  ``fail_tasks`` (task ids whose turns fail: exit 1, no result), ``sleep_tasks`` (task id
  -> seconds to sleep first).
- A task of a plan (``THE_LOOP_TASK`` set) writes ``tasks/<id>.md`` instead of
  ``IMPLEMENTED.md``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ARTIFACT = re.compile(r"^- `(?P<path>[^`]+)` with sections: (?P<sections>.+)$")
FEEDBACK = re.compile(r"^- (?P<hook>[a-z0-9][a-z0-9_-]*): (?P<message>.+)$")
SECTION = re.compile(r"`(#{1,6} [^`]+)`")
QUOTED = re.compile(r"'([^']+)'")


def home() -> Path:
    return Path(os.environ.get("HOME") or "/nonexistent") / ".fake-harness"


def record_call(argv: list[str], stdin: str) -> None:
    """Append this invocation to ``calls.jsonl``."""
    base = home()
    base.mkdir(parents=True, exist_ok=True)
    line = {"argv": argv, "stdin": stdin, "env": dict(os.environ), "cwd": os.getcwd(),
            "pid": os.getpid()}
    with open(base / "calls.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def knobs() -> dict[str, Any]:
    try:
        loaded = json.loads((home() / "knobs.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def session_file(session_id: str) -> Path:
    return home() / "sessions" / f"{session_id}.json"


def load_session(session_id: str) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(session_file(session_id).read_text())
    except (OSError, ValueError):
        return None
    return state


def save_session(session_id: str, state: dict[str, Any]) -> None:
    path = session_file(session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state))


def parse_prompt(prompt: str) -> tuple[dict[str, list[str]], list[str]]:
    """``({path: [headings]}, [feedback messages])`` from a prompt."""
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


def _name(heading: str) -> str:
    return heading.lstrip("#").strip()


def _render(path: str, headings: list[str]) -> str:
    title = Path(path).name  # not a section name: a title must not satisfy a check
    parts = [f"# {title}\n"]
    for heading in headings:
        parts.append(f"\n{heading}\n\nWritten by the fake harness.\n")
    return "".join(parts)


def do_work(prompt: str, state: dict[str, Any] | None, cwd: Path) -> dict[str, Any]:
    """The agent's work for one turn; returns the session's new state.

    ``state`` ``None``: a first turn (writes artifacts without their last section);
    otherwise a resumed turn (adds the sections the feedback names).
    """
    artifacts, feedback = parse_prompt(prompt)
    if state is None:
        state = {"artifacts": {}, "written": {}, "turns": 0}
        state["artifacts"].update(artifacts)
        for path, headings in artifacts.items():
            state["written"][path] = headings[:-1]
        if not artifacts:
            task = os.environ.get("THE_LOOP_TASK")
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
                if _name(heading) in named and heading not in have:
                    have.append(heading)
            have.sort(key=headings.index)
    state["turns"] += 1
    for path, headings in state["written"].items():
        target = cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_render(path, headings), encoding="utf-8")
    return state


def before_result(knob: dict[str, Any], emit: Any) -> None:
    """The knobs that act before the result: flood, grandchild, sleep."""
    for i in range(int(knob.get("flood_lines", 0))):
        emit({"type": "flood", "n": i, "pad": "x" * 100})
    if knob.get("spawn_child"):
        # Inherits stdout: the pipe stays open while it lives (CPython issue 97000).
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if knob.get("sleep"):
        time.sleep(float(knob["sleep"]))
    task = os.environ.get("THE_LOOP_TASK")
    if task and (knob.get("sleep_tasks") or {}).get(task):
        time.sleep(float(knob["sleep_tasks"][task]))
    if task and task in (knob.get("fail_tasks") or ()):
        fail(f"fake harness: task {task} fails (knob fail_tasks)")


def after_result(knob: dict[str, Any]) -> None:
    if knob.get("hang_after_result"):
        time.sleep(3600)


def tokens(prompt: str) -> tuple[int, int]:
    return 100 + len(prompt) // 4, 50


def new_id() -> str:
    return str(uuid.uuid4())


def emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    raise SystemExit(code)
