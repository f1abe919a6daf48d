"""The sandbox's demo agent: a deterministic harness with no model, run by the
``command`` adapter as ``[the-loop-demo-agent]`` (the console script of
``python -m the_loop.sandbox.demo_agent``: the adapter probes ``argv[0] --version``).

It reads the turn's input on stdin (the prompt contract of :mod:`runner.prompts`) and
writes each listed artifact from a template (:mod:`the_loop.sandbox.agent_work`): on the
first turn of a session it leaves out the last required section, so the-loop's exit
checks block it and the repair loop shows; a resumed turn adds the sections its input
names. At ``tasks`` it writes a task plan, and a task's turn (``THE_LOOP_TASK``: the
task's id) writes code and its test (one with a defect until a ``verify-tests`` block
asks for the repair). The session's
state is ``$HOME/.the-loop-demo-agent/sessions/<id>.json`` (the runner's ``homeDir``),
its result ``$THE_LOOP_RESULT_FILE`` (docs/harness.md). Standard library only.

``--version`` prints :data:`VERSION` (pin it as ``harness.version``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from the_loop.sandbox.agent_work import do_work

VERSION = "1.0.0"
FILLER = "Written by the-loop's demo agent (no model): replace this with the real text."


def _state_file(session: str) -> Path:
    return Path(os.environ.get("HOME") or ".") / ".the-loop-demo-agent" / "sessions" / (
        f"{session}.json")


def main(argv: list[str]) -> int:
    """One turn (or ``--version``). Returns the exit status."""
    if argv == ["--version"]:
        print(f"the-loop-demo-agent {VERSION}")
        return 0
    session = os.environ.get("THE_LOOP_SESSION_ID", "")
    if not session or "/" in session:
        sys.stderr.write("demo agent: THE_LOOP_SESSION_ID is not set\n")
        return 2
    prompt = sys.stdin.read()
    resumed = os.environ.get("THE_LOOP_RESUME") == "1"
    path = _state_file(session)
    state: dict[str, Any] | None = None
    if resumed:
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = None
    result_file = os.environ.get("THE_LOOP_RESULT_FILE")
    if resumed and state is None:
        if result_file:
            Path(result_file).write_text(json.dumps({"status": "resume-failed",
                                                     "session_id": session}))
        sys.stderr.write(f"demo agent: no session {session} to resume\n")
        return 1
    node = os.environ.get("THE_LOOP_NODE", "?")
    print(f"demo agent: {'resuming' if resumed else 'starting'} node {node}", flush=True)
    state = do_work(prompt, state, Path.cwd(), filler=FILLER,
                    task=os.environ.get("THE_LOOP_TASK") or None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state), encoding="utf-8")
    for artifact, headings in state["written"].items():
        print(f"demo agent: wrote {artifact} ({len(headings)} sections)", flush=True)
    if result_file:
        Path(result_file).write_text(json.dumps({
            "session_id": session, "cost_usd": 0.0, "input_tokens": len(prompt) // 4,
            "output_tokens": 50, "status": "completed"}))
    return 0


def run() -> None:
    """The ``the-loop-demo-agent`` console script."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    run()
