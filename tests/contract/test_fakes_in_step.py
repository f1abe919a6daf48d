"""The project's fake CLIs (tests/harnesses/) stay in step with the real ones: every
event type a fake prints is one the real CLI prints, with no field the real one lacks,
and the fields the adapters read are there in both."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from tests.contract.conftest import CLI, FEEDBACK
from tests.harness.support import FEEDBACK as FAKE_FEEDBACK
from tests.harness.support import Rig

#: What each adapter reads, by event kind (integrations/harness/claude_code.py, codex.py).
READ: dict[str, dict[str, set[str]]] = {
    "claude-code": {"system/init": {"session_id"},
                    "result": {"session_id", "subtype", "is_error", "total_cost_usd",
                               "usage", "num_turns"}},
    "codex": {"thread.started": {"thread_id"}, "turn.completed": {"usage"}},
}


def kind(event: dict[str, Any]) -> str:
    """An event's kind: its ``type``, with Claude Code's ``system`` subtype."""
    if event.get("type") == "system":
        return f"system/{event.get('subtype')}"
    return str(event.get("type"))


def shapes(events: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Each event kind with the union of its top-level fields."""
    seen: dict[str, set[str]] = {}
    for event in events:
        seen.setdefault(kind(event), set()).update(event)
    return seen


def fake_events(adapter: str, root: Path) -> list[dict[str, Any]]:
    """A fake's stdout events over a first turn and its resumed turn."""
    rig = Rig(adapter, root)
    events: list[dict[str, Any]] = []
    first = rig.run(rig.request())
    events += _log(rig.root / "turn.log")
    rig.run(rig.request(FAKE_FEEDBACK, session_id=first.harness_session,
                        resume=first.harness_session))
    return events + _log(rig.root / "turn.log")


def _log(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def test_the_fakes_print_what_the_real_clis_print(cli: CLI, tmp_path: Path) -> None:
    first = cli.turn()
    cli.turn(FEEDBACK, resume=first.harness_session, totals=dict(first.totals))
    real = shapes(cli.stdout)
    fake = shapes(fake_events(cli.adapter, tmp_path / "fake"))

    # Every kind the adapter reads is printed by both, with the fields it reads.
    for name, fields in READ[cli.adapter].items():
        assert fields <= real.get(name, set()), (name, real.get(name))
        assert fields <= fake.get(name, set()), (name, fake.get(name))
    # A fake invents no event kind, and no field of one, the real CLI does not print.
    assert set(fake) <= set(real), sorted(set(fake) - set(real))
    for name, fields in fake.items():
        assert fields <= real[name], (name, sorted(fields - real[name]))
    # The token counts inside usage too (Claude: the result's; Codex: turn.completed's).
    usage = "result" if cli.adapter == "claude-code" else "turn.completed"
    real_usage = {str(key) for e in cli.stdout if kind(e) == usage
                  for key in dict(e["usage"])}  # type: ignore[call-overload]
    fake_usage = {key for e in fake_events(cli.adapter, tmp_path / "again")
                  if kind(e) == usage for key in e["usage"]}
    assert {"input_tokens", "output_tokens"} <= fake_usage <= real_usage, (fake_usage, real_usage)

