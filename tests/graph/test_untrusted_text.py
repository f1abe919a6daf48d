"""Untrusted text is read in linear time: comment bodies of GitHub's full 65,536
characters built to make backtracking parsers hang, and artifact text from a pull
request, parse to the right result. Each parse runs in a child process with a generous
hard bound, so a parser that hangs fails the test instead of freezing the run; no test
here asserts a speed (``benchmarks/parsing.py`` measures it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.adversarial import SIZE, corpus

ROOT = Path(__file__).resolve().parents[2]
#: Seconds the whole child may take: far above what the parsers need, far below a hang.
HARD_BOUND = 60


def in_child(code: str) -> object:
    """Run ``code`` (which prints one JSON document) in a fresh interpreter at the
    repository root; fails the test if it runs past :data:`HARD_BOUND`."""
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=HARD_BOUND, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the parse did not end within {HARD_BOUND} s") from None
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_65536_adversarial_characters_parse_correctly_and_promptly():
    """Given bodies of exactly 65,536 characters of backticks, tildes, nested quotes,
      brackets, asterisks, whitespace, CRLF, many /approve lines and more, each ending
      with a visible or a hidden command
    When each is parsed for a line command (and checked for carrying one)
    Then every one gives its expected outcome, and the whole corpus ends well within
      the hard bound."""
    cases = corpus()
    assert cases and all(len(c.body) == SIZE for c in cases)
    got = in_child(
        "import json\n"
        "from tests.support.adversarial import corpus\n"
        "from foundation.hooks.classify_feedback import carries_command, parse_command\n"
        "print(json.dumps({c.name: [parse_command(c.body), carries_command(c.body)]\n"
        "                  for c in corpus()}))\n")
    expected = {c.name: [c.expected, c.expected is not None or c.name == "ambiguous"]
                for c in cases}
    assert got == expected


def test_artifact_text_from_a_pull_request_is_read_in_linear_time():
    """Given artifact text of 65,536 characters that made the artifact readers quadratic
      (unclosed fences with an info string, a heading with a long run of spaces or
      hashes, a reviewer's follow-ups full of unclosed HTML comments)
    When the headings, the task list and the follow-ups are read
    Then each gives the CommonMark reading (a fence never closed runs to the end) within
      the hard bound."""
    got = in_child(
        "import json\n"
        "from graph import tasks\n"
        "from foundation.hooks.record_feedback import follow_ups\n"
        "from foundation.hooks.validate_artifacts import headings\n"
        "n = 65536\n"
        "fences = '```x\\n' * ((n - 6) // 5) + '# Late'\n"
        "spaces = '# Title' + ' ' * (n - 9) + '#x'\n"
        "hashes = '# Title' + ' #' * ((n - 8) // 2)\n"
        "yaml = '```yaml\\n' + '```x\\n' * ((n - 20) // 5) + 'tasks: []\\n'\n"
        "print(json.dumps({\n"
        "  'fences': sorted(headings(fences)),\n"
        "  'spaces': [len(h) for h in headings(spaces)],\n"
        "  'hashes': sorted(headings(hashes)),\n"
        "  'tasks': [f.code for f in tasks.extract(yaml)[1]],\n"
        "  'follow_ups': follow_ups('keep this\\n' + '<!--' * (n // 4 - 3)),\n"
        "}))\n")
    assert got == {
        "fences": [],  # the first fence never closes: the late heading is code
        "spaces": [len("# Title") - 2 + (SIZE - 9) + 2],  # "title", the spaces, "#x"
        "hashes": ["title"],
        "tasks": ["task-list-invalid"],  # the unclosed yaml fence is read to the end
        "follow_ups": ["keep this"],
    }
