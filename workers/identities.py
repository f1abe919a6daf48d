"""What the-loop knows of repositories and installations, kept in Redis for every worker.

**Repositories** (:class:`Repositories`). GitHub names a repository ``OWNER/REPO``, but
the name changes on a rename or a transfer while ``repository.id`` stays ("Webhook events
and payloads", ``repository`` object; the ``repository`` event's ``renamed`` and
``transferred`` actions). A work item ref keeps the ``github:OWNER/REPO#N`` form; its
OWNER/REPO is the repository's *key*: the name the repository had when the-loop first
saw it, fixed for good. Each delivery notes the id and the current name
(:meth:`Repositories.note`), so a delivery naming the new name is handed to the work item
under the key (:func:`workers.routes` forwards it), API calls use the current name, and a
ref written with any name the repository has had resolves (:meth:`Repositories.resolve`).

**Accounts** (:class:`Accounts`). A login is not a person: after a rename or a deleted
account, anyone can register the freed login and gets a new user id ("Changing your
GitHub username": the old name becomes available). So the-loop knows people by user id:
the first time a login is resolved (``GET /users/{username}``) its id is recorded for
good; GitHub is asked again at most once per ``config_ttl`` seconds, and an answer naming
another account is noted (and logged) but never replaces the recorded id. The accounts
the-loop writes as (:meth:`Accounts.own`) are its App's bot, ``<slug>[bot]`` from ``GET
/app``, and ``THE_LOOP_BOT_LOGINS``.

**Installations** (:class:`Installations`). ``installation`` (``deleted``, ``suspend``,
``unsuspend``) and ``installation_repositories`` (``removed``) deliveries say that the
App lost (or got back) access; a delivery for a deleted or suspended installation, or for
a repository removed from it, can never succeed and ends as a logged no-op.

Keys (:class:`IdentityKeys`; ``P`` the prefix; names and logins lower-cased, as GitHub's
are case-insensitive):

- ``P:repository:ID``       hash: ``key`` (the OWNER/REPO its work item refs use, fixed
  at first sight), ``name`` (its current full name), ``installation``, ``removed``
- ``P:repository-name:OWNER/REPO`` the repository id a name (current or former) names
- ``P:repository-key:OWNER/REPO``  the repository id whose work item refs use that name
- ``P:installation:ID``     hash: ``status`` (``deleted``, ``suspended``; absent: active), ``at``
- ``P:installation-items:ID`` set of work item refs seen through the installation
- ``P:account:LOGIN``       hash: ``id`` (the user id recorded for a login, at first
  resolution, kept), ``other`` (another account's id GitHub answered for it since), ``at``
- ``P:account-checked:LOGIN`` string "1": GitHub was asked about the login lately; expires
- ``P:app``                 hash: ``slug`` of the App the-loop acts for; expires

Script (``workers/scripts/``): ``repository.lua``, :meth:`Repositories.note`'s one round
trip; it gets its keys through ``KEYS``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import redis
from cachetools import LRUCache, TTLCache

from foundation.inbox.record import text
from foundation.redis import scripts
from foundation.redis.namespaces import KeySpace, owns
from graph.markers import OwnAccounts
from graph.ports import GitHub, GitHubIdentity, IntegrationError, NotFound, RetryLater
from graph.refs import WorkItemRef

__all__ = ["DELETED", "SUSPENDED", "Accounts", "IdentityKeys", "Installations", "Noted",
           "Repositories"]

log = logging.getLogger("the_loop.worker")

DELETED = "deleted"
SUSPENDED = "suspended"
#: Repositories a worker keeps the key of in memory (a key never changes for an id).
CACHE_SIZE = 4096


@owns("repository", "repository-name", "repository-key", "installation",
      "installation-items", "account", "account-checked", "app")
@dataclass(frozen=True, slots=True)
class IdentityKeys(KeySpace):
    """The key names of repositories, installations, accounts and the App, for one
    deployment (see the module docstring). No I/O.

    Args:
        prefix: prefix of the-loop's keys (``THE_LOOP_REDIS_PREFIX``).
    """

    def repository(self, repository_id: int) -> str:
        """``P:repository:ID``: a repository's ref key, current name, installation."""
        return self.key("repository", str(repository_id))

    def repository_name(self, full_name: str) -> str:
        """``P:repository-name:OWNER/REPO``: the repository id the name names (lower-cased:
        GitHub's names are case-insensitive)."""
        return self.key("repository-name", full_name.lower())

    def repository_key(self, full_name: str) -> str:
        """``P:repository-key:OWNER/REPO``: the repository id whose refs use the name."""
        return self.key("repository-key", full_name.lower())

    def installation(self, installation_id: int) -> str:
        """``P:installation:ID``: an installation's status (hash)."""
        return self.key("installation", str(installation_id))

    def installation_items(self, installation_id: int) -> str:
        """``P:installation-items:ID``: work item refs seen through the installation."""
        return self.key("installation-items", str(installation_id))

    def account(self, login: str) -> str:
        """``P:account:LOGIN``: the user id recorded for a login (lower-cased: GitHub's
        logins are case-insensitive)."""
        return self.key("account", login.lower())

    def account_checked(self, login: str) -> str:
        """``P:account-checked:LOGIN``: GitHub was asked about the login lately."""
        return self.key("account-checked", login.lower())

    def app(self) -> str:
        """``P:app``: the App the-loop acts for (its ``slug``)."""
        return self.key("app")


@dataclass(frozen=True)
class Noted:
    """What :meth:`Repositories.note` found.

    Attributes:
        key: the OWNER/REPO the repository's work item refs use.
        name: its current full name (the one just noted).
        previous: the name noted before, when it differed (a rename or transfer was just
            seen), else ``None``.
    """

    key: str
    name: str
    previous: str | None = None

    @property
    def renamed(self) -> bool:
        """Whether the repository's refs use a name other than its current one."""
        return self.key != self.name


class Repositories:
    """Repository id -> the key of its work item refs and its current name.

    Args:
        connection: Redis client.
        keys: the deployment's identity key names.
    """

    def __init__(self, connection: redis.Redis, keys: IdentityKeys) -> None:
        self.redis = connection
        self.keys = keys
        self._script = scripts.register(connection, "workers.scripts", "repository")
        # id -> (key, current name) as last noted by this worker
        self._known: LRUCache[int, tuple[str, str]] = LRUCache(CACHE_SIZE)
        self._lock = threading.Lock()

    def note(self, repository_id: int, full_name: str,
             installation_id: int | None = None) -> Noted:
        """Note that repository ``repository_id`` is now called ``full_name``.

        One round trip, none when this worker noted the same name before (the key of an
        id never changes, so a cached key stays right).

        Returns:
            the repository's key and names (:class:`Noted`).

        Raises:
            redis.RedisError: Redis failed (the delivery is retried).
        """
        with self._lock:
            known = self._known.get(repository_id)
        if known is not None and known[1] == full_name:
            return Noted(known[0], full_name)
        key, previous = self._script(
            keys=(self.keys.repository(repository_id), self.keys.repository_name(full_name),
                  self.keys.repository_key(full_name)),
            args=(repository_id, full_name,
                  "" if installation_id is None else installation_id))
        key = text(key)
        previous = text(previous) if previous else None
        with self._lock:
            self._known[repository_id] = (key, full_name)
        return Noted(key, full_name, previous if previous and previous != full_name else None)

    def name_of(self, key: str) -> str:
        """The current full name of the repository whose refs use ``key`` (``key`` itself
        when nothing else is known)."""
        repository_id = self.redis.get(self.keys.repository_key(key))
        if repository_id is None:
            return key
        name = self.redis.hget(self.keys.repository(int(text(repository_id))), "name")
        return text(name) if name else key

    def resolve(self, ref: WorkItemRef) -> WorkItemRef:
        """The work item ``ref`` names, under its repository's key: a ref written with a
        repository's former or current name resolves to the one work item (a name
        the-loop never saw is returned as it is)."""
        repository_id = self.redis.get(self.keys.repository_name(ref.repository))
        if repository_id is None:
            return ref
        key = self.redis.hget(self.keys.repository(int(text(repository_id))), "key")
        return WorkItemRef(text(key), ref.number) if key else ref

    def mark_removed(self, repository_ids: Iterable[int], removed: bool = True) -> None:
        """Note that the installation lost (``removed``) or got back access to these
        repositories."""
        with self.redis.pipeline() as pipe:
            for repository_id in repository_ids:
                if removed:
                    pipe.hset(self.keys.repository(repository_id), "removed", str(time.time()))
                else:
                    pipe.hdel(self.keys.repository(repository_id), "removed")
            pipe.execute()

    def removed(self, repository_id: int) -> bool:
        """Whether the App's installation no longer has access to the repository."""
        return bool(self.redis.hexists(self.keys.repository(repository_id), "removed"))


class Accounts:
    """Login -> the user id recorded for it, and the accounts the-loop writes as.

    Args:
        connection: Redis client.
        keys: the deployment's identity key names.
        ttl: seconds before GitHub is asked about a login (or the App) again
            (``THE_LOOP_CONFIG_TTL``).
        bot_logins: ``THE_LOOP_BOT_LOGINS``, casefolded: accounts the-loop also writes as.
    """

    def __init__(self, connection: redis.Redis, keys: IdentityKeys, *, ttl: float,
                 bot_logins: Iterable[str] = ()) -> None:
        self.redis = connection
        self.keys = keys
        self.ttl = max(int(ttl), 1)
        self.bot_logins = tuple(sorted(set(bot_logins)))
        self._own: TTLCache[str, OwnAccounts] = TTLCache(1, self.ttl)
        self._lock = threading.Lock()
        self._warned = False

    def account_id(self, github: GitHub, login: str) -> int | None:
        """The user id recorded for ``login``: the id of the account that had it when
        the-loop first resolved it (``GET /users/{username}``, "Get a user"), kept for
        good; ``None`` when no account had it. An account that took the login since is
        not it: GitHub's new answer is noted (``other``) and logged, never recorded.

        Raises:
            RetryLater: GitHub could not be asked now and nothing is recorded yet.
        """
        key, checked = self.keys.account(login), self.keys.account_checked(login)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(key, "id")
            pipe.exists(checked)
            recorded, fresh = pipe.execute()
        if recorded is not None and fresh:
            return int(text(recorded))
        try:
            current: int | None = int(github.get_user(login=login)["id"])
        except NotFound:
            current = None
        except IntegrationError as exc:
            if recorded is not None:
                return int(text(recorded))  # the recorded id stands meanwhile
            if exc.retriable:
                raise RetryLater.from_error(exc) from exc
            log.warning("the account of a login could not be resolved (%s)",
                        type(exc).__name__)
            return None
        if current is not None:
            if recorded is None:
                self.redis.hsetnx(key, "id", current)
                self.redis.hset(key, "at", str(time.time()))
                recorded = self.redis.hget(key, "id")
            elif int(text(recorded)) != current:
                self.redis.hset(key, "other", current)
                log.warning("login %s now names another GitHub account than the one "
                            "recorded for it; that account decides nothing", login)
        self.redis.set(checked, "1", ex=self.ttl)
        return int(text(recorded)) if recorded is not None else None

    def record(self, github: GitHub, logins: Iterable[str]) -> int:
        """Record the user id of each of ``logins`` not recorded yet (the people a
        repository's ``collaborators.yaml`` names, when it is read), so the id is the
        one the login had then, not when it first acts. One round trip when all are
        recorded; a login GitHub cannot resolve now is left for its first action.

        Returns:
            how many were recorded now.
        """
        wanted = sorted({login.casefold() for login in logins if login})
        if not wanted:
            return 0
        with self.redis.pipeline(transaction=False) as pipe:
            for login in wanted:
                pipe.hexists(self.keys.account(login), "id")
            known = pipe.execute()
        done = 0
        for login, exists in zip(wanted, known, strict=True):
            if exists:
                continue
            try:
                done += self.account_id(github, login) is not None
            except IntegrationError as exc:
                log.warning("the account of a collaborator could not be resolved yet (%s)",
                            type(exc).__name__)
        return done

    def app_bot(self, github: GitHub) -> str | None:
        """The login of the App's bot user, ``<slug>[bot]`` (``GET /app``, "Get the
        authenticated app"; cached for ``ttl`` seconds), or ``None`` when the transport
        acts for no App (a token) or GitHub refuses to say.

        Raises:
            RetryLater: GitHub could not be asked now (the delivery is retried: going on
                without knowing its own comments would post them again).
        """
        cached = self.redis.hget(self.keys.app(), "slug")
        if cached is not None:
            return f"{text(cached)}[bot]"
        if "get-app" not in github.operations:
            return None
        try:
            slug = str(cast(GitHubIdentity, github).get_app()["slug"])
        except IntegrationError as exc:
            if exc.retriable:
                raise RetryLater.from_error(exc) from exc
            log.warning("the App's bot could not be learned (%s)", type(exc).__name__)
            return None
        with self.redis.pipeline() as pipe:
            pipe.hset(self.keys.app(), "slug", slug)
            pipe.expire(self.keys.app(), self.ttl)
            pipe.execute()
        return f"{slug}[bot]"

    def token_user(self, github: GitHub) -> str | None:
        """The login a person's token acts as (``GET /user``, "Get the authenticated
        user"), or ``None`` when the transport cannot ask or GitHub refuses to say.

        Raises:
            RetryLater: GitHub could not be asked now.
        """
        if "get-authenticated-user" not in github.operations:
            return None
        try:
            return str(cast(GitHubIdentity, github).get_authenticated_user()["login"])
        except IntegrationError as exc:
            if exc.retriable:
                raise RetryLater.from_error(exc) from exc
            log.warning("the token's user could not be learned (%s)", type(exc).__name__)
            return None

    def own(self, github: GitHub) -> OwnAccounts:
        """The accounts the-loop writes as: the App's bot (or, for a person's token, the
        token's user) and ``THE_LOOP_BOT_LOGINS``, each with its recorded user id when
        GitHub can say (else by login: a ``[bot]`` login cannot be taken by a person).
        Kept in memory for ``ttl`` seconds.

        Raises:
            RetryLater: GitHub could not be asked who the transport acts as now.
        """
        with self._lock:
            known = self._own.get("own")
        if known is not None:
            return known
        writer = self.app_bot(github) or self.token_user(github)
        logins = [login for login in (writer, *self.bot_logins) if login]
        if not logins and not self._warned:
            self._warned = True
            log.warning("the-loop cannot tell its own comments: its GitHub transport "
                        "cannot say who it acts as; set THE_LOOP_BOT_LOGINS to the login "
                        "it writes as")
        accounts: dict[str, int | None] = {}
        for login in logins:
            try:
                accounts[login] = self.account_id(github, login)
            except IntegrationError:
                accounts[login] = None
        own = OwnAccounts.of(accounts)
        if logins:
            with self._lock:
                self._own["own"] = own
        return own


class Installations:
    """Installation id -> its status (``deleted``, ``suspended``, or active) and the work
    items seen through it.

    Args:
        connection: Redis client.
        keys: the deployment's identity key names.
    """

    def __init__(self, connection: redis.Redis, keys: IdentityKeys) -> None:
        self.redis = connection
        self.keys = keys

    def status(self, installation_id: int | None) -> str | None:
        """``deleted``, ``suspended``, or ``None`` (active, or never said otherwise)."""
        if installation_id is None:
            return None
        value = self.redis.hget(self.keys.installation(installation_id), "status")
        return text(value) if value else None

    def set_status(self, installation_id: int, status: str | None) -> None:
        """Record ``status`` (``None``: active again)."""
        key = self.keys.installation(installation_id)
        if status is None:
            self.redis.delete(key)
        else:
            self.redis.hset(key, mapping={"status": status, "at": str(time.time())})

    def add_work_item(self, installation_id: int, ref: str) -> None:
        """Note that work item ``ref`` is seen through the installation."""
        self.redis.sadd(self.keys.installation_items(installation_id), ref)

    def work_items(self, installation_id: int) -> list[str]:
        """The work items seen through the installation, sorted."""
        return sorted(text(m) for m in
                      self.redis.smembers(self.keys.installation_items(installation_id)))

    def forget(self, installation_id: int) -> None:
        """Drop what is kept of a deleted installation's work items."""
        self.redis.delete(self.keys.installation_items(installation_id))
