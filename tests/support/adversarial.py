"""Adversarial comment bodies of GitHub's full 65,536 characters, with the command each
must parse to: the regression corpus of :mod:`tests.graph.test_untrusted_text` and the
inputs ``benchmarks/parsing.py`` times.

Each body is a run of one construct that makes backtracking parsers (or ones that are
quadratic per line) blow up, padded or cut to exactly :data:`SIZE` characters, with a
tail that decides what the body says: a visible ``/approve`` (expected ``approved``) or
one hidden where it must not count (expected ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: GitHub's comment body limit (characters).
SIZE = 65_536


@dataclass(frozen=True)
class Case:
    """One body: its name, the text (exactly :data:`SIZE` characters), the command
    outcome it must parse to."""

    name: str
    body: str
    expected: str | None


def _fill(unit: str, tail: str) -> str:
    room = SIZE - len(tail)
    return (unit * (room // len(unit) + 1))[:room] + tail


VISIBLE = "\n\n/approve\n"
RUNS: dict[str, str] = {
    "backticks": "`",
    "backticks-spaced": "` ",
    "backtick-runs": "``a",
    "tildes": "~",
    "fence-lines": "```\n",
    "tilde-fence-lines": "~~~~\n",
    "quotes": ">",
    "quotes-spaced": "> ",
    "brackets": "[",
    "links": "[a](",
    "asterisks": "*",
    "emphasis": "*a_",
    "underscores": "_",
    "whitespace": " ",
    "tabs": "\t",
    "blank-lines": "\n",
    "crlf": "a\r\n",
    "carriage-returns": "\r",
    "html-comment-opens": "<!--",
    "angle-brackets": "<",
    "tags": "<b>",
    "list-markers": "- ",
    "list-items": "- a\n",
    "ordered-items": "1. a\n",
    "headings": "# ",
    "paragraph-lines": "a\n",
    "indented-lines": "    a\n",
    "entities": "&#",
    "backslashes": "\\",
    "pipes": "|-",
    "approve-lines": "/approve\n",
    "approve-lines-crlf": "/approve\r\n",
}


def corpus() -> list[Case]:
    """Every case: each run with a visible command after it, then bodies whose commands
    are all hidden (in a fence never closed, a quote, indented code, an HTML comment
    never closed), and one with two different commands (ambiguous)."""
    cases = []
    for name, unit in RUNS.items():
        # The blank line before the tail closes every run but an open fence or HTML block.
        cases.append(Case(name, _fill(unit, VISIBLE), _visible_after(name)))
    cases += [
        Case("unclosed-fence", "```\n" + _fill("/approve\n", "")[4:], None),
        Case("deep-quote", _fill("> ", "/approve\n"), None),
        Case("indented-code", _fill("    /approve\n", ""), None),
        Case("unclosed-comment", "<!--\n" + _fill("/approve\n", "")[5:], None),
        Case("inline-code", _fill("`/approve` ", ""), None),
        Case("ambiguous", _fill("/approve\n\n/request-changes\n\n", ""), None),
    ]
    return cases


def _visible_after(name: str) -> str | None:
    """What a run followed by a blank line and ``/approve`` says (CommonMark): a fence
    or an HTML comment still open hides it; every other run is closed by the blank line
    (indented code, by the unindented command)."""
    if name in ("fence-lines", "tilde-fence-lines"):
        # An odd number of fence lines (both runs here) leaves the last one open.
        count = (SIZE - len(VISIBLE)) // len(RUNS[name])
        return None if count % 2 else "approved"
    if name in ("backticks", "tildes"):
        return None  # one opening fence, never closed
    if name == "html-comment-opens":
        return None  # an HTML block that starts "<!--" runs until a "-->"
    return "approved"
