"""Line commands (``/approve``...) in comment and review bodies: untrusted text, read in
linear time and bounded size.

A body is rendered as GitHub renders it, by GitHub's own CommonMark parser (cmark-gfm,
through ``cmarkgfm``: linear time by design, C code that releases the interpreter lock
while it runs, raw HTML omitted), and a command counts only where a reader sees it as
plain text: alone on its own line of a top-level paragraph. Everything else is not a
command: fenced and indented code blocks, block quotes (lazy continuation lines
included), list items, tables, headings, inline code, HTML blocks (comments included).
A trailing inline HTML comment on the command's line is tolerated. Quotes nested deeper
than :data:`MAX_QUOTE_DEPTH` are read as that deep (still quoted: the same answer).

The rendered HTML is cmark's own output (text is escaped, so every ``<`` starts one of
its tags): one pass of a regex without backtracking finds candidate lines, and the
containers open before each are counted with ``str.count`` over the stretch since the
previous candidate, so the whole scan stays linear in the body's size.

Neutral ground: the ``classify-feedback`` hook reads the commands here, and the worker
asks :func:`carries_command` whether a comment earns reactions.
"""

from __future__ import annotations

import re

import cmarkgfm

#: GitHub's limit on a comment or review body (characters); a longer body is not
#: GitHub's and carries no command (cutting it could make one appear alone on a line).
MAX_BODY_CHARS = 65_536

COMMANDS = {
    "/approve": "approved",
    "/approve-with-comments": "approved-with-comments",
    "/request-changes": "changes-requested",
}

# cmark's HTML: a paragraph line starts after "<p>" or a soft break and ends at "</p>",
# a hard break or a soft break; raw inline HTML became this marker. The command is
# searched for (a literal), then its line checked; the possessive quantifier never
# gives back what it took.
_OMITTED = "<!-- raw HTML omitted -->"
_COMMAND = re.compile(r"/approve-with-comments|/approve|/request-changes")
# Block quotes nested deeper than this are as deep: cmark's output (and time) grows with
# the nesting, and whether a line is quoted at all is all that counts here. Each "[ \t]*>"
# is deterministic, so the run is taken in one pass.
MAX_QUOTE_DEPTH = 32
_DEEP_QUOTE = re.compile(rf"^(?:[ \t]*>){{{MAX_QUOTE_DEPTH + 1},}}+", re.MULTILINE)
_LINE_END = re.compile(rf"(?:{re.escape(_OMITTED)}|[ \t])*+(?:</p>|<br />|\n)")


def rendered(body: str) -> str:
    """``body`` as CommonMark HTML, raw HTML omitted (cmark's default, safe mode)."""
    return str(cmarkgfm.markdown_to_html(body))


def commands(body: str | None) -> set[str]:
    """The outcomes (``approved``, ``approved-with-comments``, ``changes-requested``) of
    the line commands a reader of ``body`` sees as plain text alone on a line of a
    top-level paragraph (see the module's rules).

    Args:
        body: a comment or review body as GitHub delivered it (any line endings).

    Returns:
        the set of outcomes found; empty for ``None``, an empty body, one longer than
        :data:`MAX_BODY_CHARS`, or one without a command.
    """
    if not body or len(body) > MAX_BODY_CHARS:
        return set()
    if "/approve" not in body and "/request-changes" not in body:
        return set()  # most bodies: no rendering at all
    html = rendered(_DEEP_QUOTE.sub(">" * MAX_QUOTE_DEPTH, body))
    found: set[str] = set()
    depth, last, closes_at = 0, 0, 0
    for match in _COMMAND.finditer(html):
        outcome, start = COMMANDS[match.group()], match.start()
        if outcome in found or (depth > 0 and start < closes_at):
            continue  # nothing to learn; inside a container no close tag has ended yet
        if not (html.startswith("<p>", start - 3) or html.startswith("\n", start - 1)):
            continue
        if _LINE_END.match(html, match.end()) is None:
            continue
        depth += _depth(html, last, start)
        last = start
        if depth == 0:
            found.add(outcome)
            if len(found) == len(COMMANDS):
                break
        else:
            closes_at = html.find("</", start)
            closes_at = len(html) if closes_at < 0 else closes_at
    return found


def carries_command(body: str | None) -> bool:
    """Whether ``body`` has a line command (as :func:`commands` reads one); two different
    ones still count as carrying one."""
    return bool(commands(body))


def _depth(html: str, start: int, end: int) -> int:
    """Containers opened minus containers closed in ``html[start:end]``."""
    count = html.count
    return (count("<blockquote>", start, end) + count("<li>", start, end)
            + count("<pre", start, end) + count("<table>", start, end)
            - count("</blockquote>", start, end) - count("</li>", start, end)
            - count("</pre>", start, end) - count("</table>", start, end))
