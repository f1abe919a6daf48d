"""``python -m tests.support.poison_worker``: a real ``the-loop worker`` whose command
parser a marker in a comment body poisons, for the end-to-end test of deliveries that
freeze or kill their worker (``tests/e2e/test_runaway_deliveries.py``).

``FREEZE-WORKER`` holds the interpreter lock in C code (an exponential regex, as the
backtracking command parser did on a body of backticks): no thread of the process runs
again. ``EXIT-WORKER`` ends the process at once (``os._exit``, as an OOM kill would).
Any other body is parsed as usual.
"""

from __future__ import annotations

import os
import re

from foundation.hooks import classify_feedback

FREEZE, EXIT = "FREEZE-WORKER", "EXIT-WORKER"
_parse = classify_feedback.commands


def poisoned(body: str | None) -> set[str]:
    """:func:`foundation.commands.commands`, unless ``body`` carries a marker."""
    if body and FREEZE in body:
        re.match(r"(a+)+$", "a" * 80 + "b")  # years of backtracking, the lock held
    if body and EXIT in body:
        os._exit(3)
    return _parse(body)


if __name__ == "__main__":
    classify_feedback.commands = poisoned
    from the_loop.cli import main

    main(["worker"])
