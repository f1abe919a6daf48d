"""How the-loop recognises its own comments: its hidden marker *and* its author.

Every comment the-loop writes ends with ``<!-- the-loop effect=<id> -->``. The effect id
is derived from the work item, the node visit and the hook, so posting is idempotent
(look for the marked comment before posting again). Anyone can type a marker, so a marker
alone proves nothing: a comment is the-loop's own only when it also was written by one of
the accounts the-loop writes as (:class:`OwnAccounts`, checked by login and user id).
:func:`own_effect` is the one predicate every reader of comments goes through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

MARKER_RE = re.compile(r"<!-- the-loop effect=([A-Za-z0-9:/#._@-]+) -->")


def effect_id(ref: str, node: str, visit: int, hook: str) -> str:
    """Stable id of one side effect: ``<ref>/<node>/<visit>/<hook>``."""
    return f"{ref}/{node}/{visit}/{hook}"


def marker(effect: str) -> str:
    """The hidden HTML comment carrying ``effect``."""
    return f"<!-- the-loop effect={effect} -->"


def find_effect(body: str | None) -> str | None:
    """The effect id in ``body``'s marker, or ``None`` if it carries none."""
    if not body:
        return None
    match = MARKER_RE.search(body)
    return match.group(1) if match else None


#: The bot account of an App named ``the-loop`` (GitHub names an App's bot user
#: ``<slug>[bot]``): who the-loop writes as when nothing else is known (a local run, an
#: in-process test). The worker learns the real one from the App (``GET /app``).
DEFAULT_BOT_LOGIN = "the-loop[bot]"


@dataclass(frozen=True)
class OwnAccounts:
    """The GitHub accounts the-loop writes as.

    Attributes:
        accounts: login (casefolded) -> its user id, or ``None`` when the id is not known
            (then the login alone is compared; a ``[bot]`` login cannot be taken by a
            person, GitHub reserves the suffix for Apps).
    """

    accounts: Mapping[str, int | None] = field(
        default_factory=lambda: {DEFAULT_BOT_LOGIN: None})

    @classmethod
    def of(cls, logins: Mapping[str, int | None]) -> OwnAccounts:
        """Accounts from ``login -> id`` (logins compared without regard to case)."""
        return cls({login.casefold(): user_id for login, user_id in logins.items()})

    def wrote(self, login: str | None, user_id: int | None) -> bool:
        """Whether the account ``login`` (with user id ``user_id``, ``None`` if the
        source did not say) is one of these: the login matches and, when both ids are
        known, so does the id (a recreated account with a former login is not)."""
        if not login:
            return False
        key = login.casefold()
        if key not in self.accounts:
            return False
        expected = self.accounts[key]
        return expected is None or user_id is None or user_id == expected


def own_effect(body: str | None, login: str | None, user_id: int | None,
               own: OwnAccounts) -> str | None:
    """The effect id of a comment the-loop wrote, else ``None``: ``body`` carries the
    marker *and* its author (``login``, ``user_id``) is one of ``own``. A marker in anyone
    else's comment is ignored: it is never the status comment, a review request or a
    notice, and it never counts as the-loop's own."""
    if not own.wrote(login, user_id):
        return None
    return find_effect(body)
