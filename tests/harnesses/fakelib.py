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
  but the last (deliberately); no artifact listed: ``IMPLEMENTED.md``. A fresh session
  the prompt seeds (``read these files in the checkout first``: the lost-session path)
  reads them instead: it starts from the sections they have and, as a resumed turn does,
  adds those the feedback names (:func:`seeded_state`).
- Resumed turn: a missing section is added only when a feedback line names it; a
  gate's ``changes-requested`` in the prompt revises every artifact (a line
  ``Revised after review N.``), as an agent repairing what a reviewer rejected would.
- MCP calls (``mcp_call``): a prompt naming ``server``/``tool``/``arguments`` in a JSON
  line ``MCP-CALL {...}`` is answered with the structured result
  ``{"ok", "result", "error"}`` (the tool's answer is ``{"server", "tool",
  "arguments", "echo": true}`` when the server is configured; knob ``mcp_error``).
- State: ``$HOME/.fake-harness/sessions/<id>.json`` (resume needs the same HOME).
- Every invocation appends ``{argv, stdin, env, cwd, pid}`` to
  ``$HOME/.fake-harness/calls.jsonl``.
- Knobs: ``$HOME/.fake-harness/knobs.json``: ``sleep`` (seconds before the result),
  ``spawn_child`` (a grandchild sleeping with stdout held), ``cost_usd``,
  ``hang_after_result``, ``no_result``, ``exit_code``, ``flood_lines`` (print that many
  lines first), ``new_session_on_resume`` (claude: a resumed run reports a new id),
  ``result_subtype``, ``is_error``, ``result_text``, ``lose_session_once`` (claude: the
  next resume finds no conversation), ``sleep_resumed`` (claude: seconds a resume of a
  session this HOME holds sleeps first), ``stream_errors``
  (codex: that many ``error`` events before ``turn.completed``, as a retried 5xx
  gives), ``bad_result`` (agent: an invalid result file), ``fail_tasks`` (task ids
  whose turns fail: exit 1, no result), ``sleep_tasks`` (task id -> seconds to sleep first),
  ``sleep_first_call`` (seconds to sleep in the first turn of this HOME only: the attempt
  that takes an interrupted turn over, and the turns after it, go on at once).
- A task of a plan (``THE_LOOP_TASK`` set) writes ``tasks/<id>.md`` instead of
  ``IMPLEMENTED.md``, and its code and pytest test (``demo_<id>.py``,
  ``tests/test_demo_<id>.py``); a ``tasks.md`` artifact's ``## Tasks`` section holds a
  task plan (the_loop/sandbox/agent_work.py says which, and the one defect).
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

# The work itself is the demo agent's (package code, standard library only): the
# repository root goes on the path so the system ``python3`` finds it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from the_loop.sandbox.agent_work import do_work, parse_prompt  # noqa: E402,F401


def home() -> Path:
    """Where this fake keeps its sessions: ``$HOME/.fake-harness`` (resume needs the same
    HOME, as the real CLIs' transcripts do)."""
    return Path(os.environ.get("HOME") or "/nonexistent") / ".fake-harness"


def record_call(argv: list[str], stdin: str) -> None:
    """Append this invocation to ``calls.jsonl``."""
    base = home()
    base.mkdir(parents=True, exist_ok=True)
    line = {"argv": argv, "stdin": stdin, "env": dict(os.environ), "cwd": os.getcwd(),
            "pid": os.getpid()}
    with open(base / "calls.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def _turn_calls() -> int:
    """How many recorded calls were turns (not ``--version``), this one included."""
    try:
        lines = (home() / "calls.jsonl").read_text().splitlines()
    except OSError:
        return 0
    return sum(1 for line in lines
               if line.strip() and json.loads(line)["env"].get("THE_LOOP_TURN"))


def knobs() -> dict[str, Any]:
    try:
        loaded = json.loads((home() / "knobs.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


#: The line of a prompt that seeds a fresh session with what earlier turns wrote.
SEEDED = "read these files in the checkout first"


def seeded_state(prompt: str, cwd: Path) -> dict[str, Any] | None:
    """The state a fresh session seeded by ``prompt`` starts from: each listed artifact's
    sections as the checkout has them (``None`` for an unseeded first turn)."""
    if SEEDED not in prompt:
        return None
    artifacts, _ = parse_prompt(prompt)
    written: dict[str, list[str]] = {}
    for path, headings in artifacts.items():
        file = cwd / path
        lines = file.read_text(errors="replace").splitlines() if file.is_file() else []
        written[path] = [h for h in headings if h in lines]
    return {"artifacts": dict(artifacts), "written": written, "turns": 0}


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


MCP_CALL = re.compile(r"^MCP-CALL (?P<call>\{.*\})$", re.MULTILINE)


def mcp_call(prompt: str, servers: dict[str, Any]) -> dict[str, Any]:
    """The schema-constrained answer to an MCP call prompt: ``{"ok", "result", "error"}``
    (``result`` is the tool's structured result as JSON text). Deterministic: the tool's
    answer echoes the call; an unknown server or tool name is an error."""
    match = MCP_CALL.search(prompt)
    if not match:
        return {"ok": False, "result": "", "error": "no MCP call in the prompt"}
    call = json.loads(match["call"])
    server, tool = call.get("server"), call.get("tool")
    knob = knobs()
    if knob.get("mcp_error"):
        return {"ok": False, "result": "", "error": str(knob["mcp_error"])}
    if server not in servers:
        return {"ok": False, "result": "", "error": f"MCP server {server!r} is not configured"}
    answer = {"server": server, "tool": tool, "arguments": call.get("arguments") or {},
              "echo": True}
    return {"ok": True, "result": json.dumps(answer, sort_keys=True), "error": ""}


def before_result(knob: dict[str, Any], emit: Any) -> None:
    """The knobs that act before the result: flood, grandchild, sleep."""
    for i in range(int(knob.get("flood_lines", 0))):
        emit({"type": "flood", "n": i, "pad": "x" * 100})
    if knob.get("spawn_child"):
        # Inherits stdout: the pipe stays open while it lives (CPython issue 97000).
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if knob.get("sleep"):
        time.sleep(float(knob["sleep"]))
    if knob.get("sleep_first_call") and _turn_calls() == 1:
        time.sleep(float(knob["sleep_first_call"]))
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
