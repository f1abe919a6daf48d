"""The outbox: every visible effect the-loop makes, recorded before it is performed.

Hooks reach it through their wrapped integrations; the runtime's own effects (the status
comment, the check run a hook keeps on the status, the forced-move comment) and any
caller outside a hook chain (a worker's notice) take the GitHub port through it with
:meth:`HookEffects.github`, e.g. a notice posted once per effect id::

    outbox = HookEffects(state, store, f"{ref}/notice")
    outbox.github(github, effect=f"{ref}/alarm/{k}").comment(repo=repo, number=n, body=text)

When the runtime calls a hook it hands it each integration wrapped in an
:class:`EffectProxy`, which has the integration's typed port methods (:mod:`graph.ports`).
A side-effecting operation (one its port declares a write with :func:`graph.ports.write`;
reads are passed straight through) gets a stable effect id
``<ref>/<node>/<visit>/<hook>/<n>`` (``n`` is the call's ordinal among the side effects of
that hook run; ``<hook>`` is the hook's name, or ``<name>@<boundary><position>`` when the
node calls the same hook more than once). The proxy records the effect as ``pending`` in
the work item's state and **saves that record before performing it**, then marks it ``done``
with a summary of the result (never a body, a file's text or a secret) and saves it again:
each a small write of the one record (:meth:`graph.state.StateStore.save_effect`), never a
rewrite of the whole state.

Run the same hook again for the same node visit (a retried job, a worker killed mid-job)
and:

* a ``done`` effect is not performed again: the recorded result is returned;
* a ``pending`` effect (the previous attempt may or may not have reached the target) is
  reconciled with the target first, so it is idempotent there:

  - ``comment``: the body carries the-loop's hidden marker (the hook's own, or one with the
    effect id appended); ``list-comments`` finds a comment with that marker written by
    one of the accounts the-loop writes as (:func:`graph.markers.own_effect`; a marker in
    anyone else's comment is ignored), which is updated in place instead of posting
    another. A comment that carries its own marker (it names what it posts once, e.g. the
    review request of a node visit) is looked up this way before every post, so it stays
    single even when the state was rebuilt;
  - ``put-file``: ``get-file`` on the branch; if the file already holds content an earlier
    attempt of this effect wrote (compared by SHA-256 digest), nothing is committed;
  - ``create-check-run``: always (not only on a retry, see :data:`UPSERT_OPS`)
    ``list-check-runs`` by head SHA and name first; an existing run is updated
    (``update-check-run``) instead of creating a second one, unless it is completed and
    the new state is in progress (a completed run is not reopened: a new one says so);
  - labels, reactions, reviewer requests, ``update-*``: set semantics or idempotent at the
    target already; performed again;
  - any other operation (Slack, Jira...): when the integration implements ``find-effect``
    (:class:`graph.ports.EffectFinder`: ``find_effect(operation=..., effect=ID,
    params=..., since=T) -> {"found": bool, "result": {...}}``, ``T`` the time the effect
    was first recorded), it is asked first; such an integration gets every write's effect
    id as ``effect=ID`` to tag the write with (Slack: message metadata). An operation the
    integration lists in ``at_most_once`` (it cannot read its writes back: a Slack
    incoming webhook) is not performed again while its outcome is unknown: the pending
    record is closed as ``done`` with ``{"unconfirmed": True}`` and a warning is logged;
    one the target refused with an HTTP answer (``IntegrationError.status`` set) is
    recorded ``failed`` and performed again. Any other operation is performed again (at
    least once).

A refusal (a non-retriable ``IntegrationError``: a 4xx answer, a Jira transition that
does not exist from the issue's status) is recorded ``failed`` with ``refused: true``, the
HTTP status (``http_status``) and the provider's ``reason``; the same effect performed again
(a redelivery) raises that refusal again without asking the target.

An effect performed *in place* (``perform(..., in_place=True)``: the work item's one status
comment, edited as the status changes) is reconciled with its target every time, and a
``done`` record does not stop it from being brought up to date.

A transient failure of any call (``IntegrationError.retriable``: 5xx, rate limits, network)
raises :class:`RetryLater` (a retriable ``IntegrationError``). A hook that handles
integration errors itself (``notify`` records a failed notification and goes on) keeps
doing so; anywhere else the runtime lets it through to its caller: the delivery is retried
later as a whole, and the outbox makes that replay safe. The graph core stays free
of Redis and HTTP: state is saved through :class:`graph.state.StateStore`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from graph.context import HookConfig
from graph.errors import LoopError
from graph.markers import OwnAccounts, find_effect, marker, own_effect
from graph.ports import (
    MAX_REASON,
    OPERATIONS,
    EffectFinder,
    GitHub,
    Integration,
    IntegrationError,
    NotFound,
    Operation,
    RetryLater,
)
from graph.state import StateStore, WorkItemState

log = logging.getLogger(__name__)

#: Operations that are create-or-update at their target by nature (one check run per head
#: SHA and name): reconciled with the target on every perform.
UPSERT_OPS = frozenset({"create-check-run"})
#: Result keys never kept in state (bodies, file contents, credentials).
_PRIVATE_KEYS = frozenset({"body", "text", "content", "message", "token", "patch", "diff",
                           "raw", "html", "blocks", "attachments"})
_MAX_ITEMS = 200
_MAX_TEXT = 300


def is_side_effect(op: str, integration: str = "github") -> bool:
    """Whether operation ``op`` of ``integration`` changes something outside the-loop:
    its port declares it a write, or it is not declared at all (recorded, to be safe)."""
    spec = OPERATIONS.get(integration, {}).get(op)
    return spec is None or spec.writes


def _method(integration: Integration, name: str, op: str) -> Callable[..., dict[str, Any]]:
    """The bound port method performing ``op`` on ``integration`` (named ``name``); an
    operation no port declares goes through ``call``."""
    spec = OPERATIONS.get(name, {}).get(op)
    if spec is None:
        return functools.partial(integration.call, op)
    method: Callable[..., dict[str, Any]] = getattr(integration, spec.method)
    return method


def hook_keys(entry: tuple[str, ...], exit_: tuple[str, ...]) -> dict[tuple[str, int], str]:
    """(boundary, position) -> the ``<hook>`` segment of effect ids for a node's chains:
    the hook's name, or ``<name>@<boundary><position>`` when the node calls it twice."""
    names = list(entry) + list(exit_)
    keys: dict[tuple[str, int], str] = {}
    for boundary, calls in (("entry", entry), ("exit", exit_)):
        for position, name in enumerate(calls):
            unique = names.count(name) == 1
            keys[(boundary, position)] = name if unique else f"{name}@{boundary}{position}"
    return keys


def digest(text: str) -> str:
    """SHA-256 hex of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def summary(result: Any) -> dict[str, Any]:
    """What of an operation's result is kept in state: scalars and short lists of scalars,
    without bodies, contents or credentials."""
    if not isinstance(result, Mapping):
        return {}
    kept: dict[str, Any] = {}
    for key, value in result.items():
        if key in _PRIVATE_KEYS:
            continue
        if isinstance(value, str):
            kept[key] = value[:_MAX_TEXT]
        elif value is None or isinstance(value, (bool, int, float)):
            kept[key] = value
        elif isinstance(value, (list, tuple)) and all(
                isinstance(v, (str, int, float, bool)) for v in value):
            kept[key] = list(value)[:_MAX_ITEMS]
    return kept


class HookEffects:
    """The effects of one hook run, recorded in ``state`` and saved through ``store``.

    Args:
        state: the work item's state (the runtime's own object; saved as a whole).
        store: where it is saved.
        prefix: ``<ref>/<node>/<visit>/<hook>``; effect ids are ``<prefix>/<n>``.
        own: the accounts the-loop writes as (``HookConfig.own``): only their marked
            comments are taken for the ones it posted.
    """

    def __init__(self, state: WorkItemState, store: StateStore, prefix: str, *,
                 own: OwnAccounts | None = None) -> None:
        self.state = state
        self.store = store
        self.prefix = prefix
        self.own = own if own is not None else OwnAccounts()
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()

    def wrap(self, config: HookConfig) -> HookConfig:
        """``config`` with every integration wrapped in an :class:`EffectProxy`; the
        outbox takes ``config.own`` as the accounts it writes as."""
        self.own = config.own
        if not config.integrations:
            return config
        wrapped = {name: EffectProxy(name, integration, self)
                   for name, integration in config.integrations.items()}
        return dataclasses.replace(config, integrations=wrapped)

    def github(self, integration: Integration, *, effect: str | None = None,
               in_place: bool = False) -> GitHub:
        """``integration`` as the typed :class:`graph.ports.GitHub` port whose writes go
        through this outbox (reads pass straight through).

        Args:
            effect, in_place: as for :meth:`perform`, for every write made through the
                port returned (so give ``effect`` only for one write).
        """
        return cast(GitHub, EffectProxy("github", integration, self, effect=effect,
                                        in_place=in_place))

    def close(self) -> None:
        """Refuse further effects: the hook ran past its timeout and was abandoned."""
        with self._lock:
            self._closed = True

    def perform(self, name: str, integration: Integration, op: str,
                params: dict[str, Any], *, effect: str | None = None,
                in_place: bool = False) -> dict[str, Any]:
        """Perform side effect ``op`` (the port method of ``op`` on ``integration``)
        exactly once per effect id: recorded ``pending`` and saved first, marked ``done``
        after; a ``done`` effect returns its recorded result, a ``pending`` one is
        reconciled with the target.

        Args:
            name: the integration's name (``"github"``), for the record and errors.
            integration: the unwrapped transport.
            op, params: the operation (``"comment"``) and its parameters.
            effect: the effect id; the next ``<prefix>/<n>`` when ``None`` (a hook's n-th
                side effect). A comment's body gets ``marker(effect)`` unless it carries
                a marker already.
            in_place: the effect is kept current rather than made once (the status
                comment): reconciled with the target (the marked comment updated, or
                posted when there is none) on every call, whatever the record says.

        Returns:
            the operation's result (or the recorded summary of a ``done`` effect).

        Raises:
            RetryLater: a transient failure, or the hook run was abandoned.
            IntegrationError: a permanent refusal: recorded ``failed`` (``refused``, with
                the HTTP status and the provider's ``reason``) and raised again, without
                asking the target, when the same effect is performed again (a redelivery).
        """
        with self._lock:
            if self._closed:
                raise RetryLater("the hook ran past its timeout; its effects stop here",
                                 integration=name, op=op)
            if effect is None:
                effect = f"{self.prefix}/{self._count}"
                self._count += 1
            in_place = in_place or op in UPSERT_OPS
            previous = self.state.effects.get(effect)
            if (previous and previous.get("op") == op and previous.get("status") == "done"
                    and not in_place):
                return dict(previous.get("result") or {})
            if (previous and previous.get("op") == op and previous.get("status") == "failed"
                    and previous.get("refused") and not in_place):
                # The target refused it for good: a redelivery does not ask again.
                raise _refused(name, op, effect, previous)
            finder = "find-effect" in integration.operations
            at_most_once = not finder and op in frozenset(
                getattr(integration, "at_most_once", None) or ())
            if (at_most_once and previous and previous.get("op") == op
                    and previous.get("status") == "pending"):
                # The earlier attempt may have landed and the target cannot be read back:
                # at most once, so it is not made again.
                previous.update(status="done", result={"unconfirmed": True}, at=time.time())
                self._save(effect, name, op)
                log.warning("effect %s (%s %s) was left pending by an earlier attempt and "
                            "%s cannot be read back: not performed again (at most once)",
                            effect, name, op, name)
                return {"unconfirmed": True}
            # A comment that names itself (a hook's own marker, e.g. the review request of
            # a node visit) is looked up first even without a record (state rebuilt).
            named = op == "comment" and find_effect(params.get("body")) is not None
            retry = in_place or named or bool(previous and previous.get("op") == op)
            params = self._marked(op, params, effect)
            if finder:
                params = {**params, "effect": effect}
            record: dict[str, Any] = {
                "op": op,
                "integration": name,
                "status": "pending",
                "attempts": int(previous.get("attempts", 0)) + 1 if retry and previous else 1,
                "at": time.time(),
                "target": self._target(op, params, previous if retry else None),
            }
            self.state.effects[effect] = record
            # Persist BEFORE the side effect: a crash from here on leaves it pending.
            self._save(effect, name, op)
        try:
            result = (self._reconcile(integration, op, params, record, effect, previous)
                      if retry else None)
            if result is None:
                result = _method(integration, name, op)(**params)
        except IntegrationError as exc:
            if not exc.retriable:
                with self._lock:  # refused for good: failed, never performed again
                    if not self._closed:
                        record.update(status="failed", refused=True, http_status=exc.status,
                                      reason=exc.reason or str(exc)[:MAX_REASON],
                                      at=time.time())
                        self._save(effect, name, op)
            elif at_most_once and exc.status is not None:
                with self._lock:  # the target answered: it did not make it, so it may again
                    if not self._closed:
                        record.update(status="failed", at=time.time())
                        self._save(effect, name, op)
            if exc.retriable:
                raise RetryLater.from_error(exc) from exc
            raise
        with self._lock:
            if self._closed:  # abandoned meanwhile: the runtime owns the state now
                return result
            record.update(status="done", result=summary(result), at=time.time())
            self._save(effect, name, op)
        return result

    def _save(self, effect: str, name: str, op: str) -> None:
        """Record ``effect`` in the state store.

        The store being unreachable (a dropped or timed-out connection) is a transient
        failure of the-loop's own infrastructure, never the hook's verdict: it is raised as
        :class:`RetryLater` (``integration="state"``), so the delivery is retried and the
        outbox converges (a pending record is looked up or replayed). The-loop's own refusals
        (a :class:`~graph.errors.LoopError`, e.g. the work item's lock taken over) pass
        through unchanged.

        Raises:
            RetryLater: the store failed to record the effect.
        """
        try:
            self.store.save_effect(self.state, effect)
        except LoopError:
            raise
        except Exception as exc:  # noqa: BLE001  (the store's client errors: not ours)
            raise RetryLater(f"the state store could not record effect {effect} "
                             f"({name} {op}): {type(exc).__name__}",
                             integration="state", op="save-effect") from exc

    # -- what identifies an effect at its target -----------------------------------------

    @staticmethod
    def _marked(op: str, params: dict[str, Any], effect: str) -> dict[str, Any]:
        """A comment's body carries a marker (the hook's own, else the effect id's)."""
        body = params.get("body")
        if op == "comment" and isinstance(body, str) and find_effect(body) is None:
            return {**params, "body": f"{body}\n\n{marker(effect)}"}
        return params

    @staticmethod
    def _target(op: str, params: Mapping[str, Any],
                previous: Mapping[str, Any] | None) -> dict[str, Any]:
        before = dict((previous or {}).get("target") or {})
        if op == "comment":
            body = params.get("body")
            return {"marker": find_effect(body), "number": params.get("number"),
                    "digest": digest(body) if isinstance(body, str) else None}
        if op == "put-file":
            digests = list(before.get("digests") or [])
            text = params.get("text")
            if isinstance(text, str) and digest(text) not in digests:
                digests.append(digest(text))
            return {"path": params.get("path"), "branch": params.get("branch"),
                    "digests": digests[-5:]}
        if op == "create-check-run":
            shown = {k: params.get(k) for k in sorted(params) if k not in ("repo", "effect")}
            return {"name": params.get("name"), "head_sha": params.get("head_sha"),
                    "status": params.get("status"),
                    "digest": digest(repr(sorted(shown.items())))}
        # When the first attempt was made: where a read-back of the target starts.
        return {"since": before.get("since") or time.time()}

    def _visit_since(self, effect: str) -> str | None:
        """For a comment of the current node visit (its marker names the visit), when
        the visit began (ISO 8601, a minute early for clock skew): it cannot be older, so
        the search need not page through the comments before it; ``None`` for any other
        comment (the status comment dates from the enrolment) and in a visit the state
        was rebuilt into (the comment may come from before the rebuild)."""
        state = self.state
        if not effect.startswith(f"{state.ref}/{state.current_node}/{state.visit}/"):
            return None
        if state.visit_via == "reconstructed":
            return None  # a visit rebuilt from the artifacts: its comments may be older
        return time.strftime("%Y-%m-%dT%H:%M:%SZ",
                             time.gmtime(max(0.0, state.visit_started_at - 60)))

    def _reconcile(self, integration: Integration, op: str, params: dict[str, Any],
                   record: Mapping[str, Any], effect: str,
                   previous: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """For a pending effect: what the target already holds, made current; ``None``
        when it has to be performed.

        A comment or check run an earlier attempt made is edited by the id it recorded
        (one request, and none when the comment's body is unchanged), never searched for
        again; only when that id is gone (404) is the target searched (comments by
        marker, check runs by head SHA and name)."""
        ops = integration.operations
        target = record.get("target") or {}
        github = cast(GitHub, integration)
        if op == "create-check-run":
            # The latest run any effect made on this head SHA under this name (GitHub
            # shows one run per head and name): edited by its id, not listed again.
            previous = _latest_check_run(self.state.effects, effect, target, previous)
        known = _known_id(op, previous, target)
        if op == "comment" and known is not None:
            before = (previous or {}).get("target") or {}
            if before.get("digest") and before.get("digest") == target.get("digest"):
                return {"id": known, "reused": True, "unchanged": True}
            if "update-comment" in ops:
                try:
                    updated = github.update_comment(repo=params["repo"], comment_id=known,
                                                    body=params["body"])
                    return {**updated, "id": updated.get("id", known), "reused": True}
                except NotFound:
                    pass  # deleted by someone: search by marker, else post anew
        if op == "comment" and "list-comments" in ops and target.get("marker"):
            return _reuse_comment(integration, params, str(target["marker"]), self.own,
                                  since=self._visit_since(str(target["marker"])))
        if op == "create-check-run" and known is not None and "update-check-run" in ops:
            before = (previous or {}).get("target") or {}
            if "status" not in before:
                known = None  # recorded before runs kept their status: list them
            elif before.get("status") == "completed" and params.get("conclusion") is None:
                return None  # a completed run is not reopened: a new one says so
            elif before.get("digest") and before.get("digest") == target.get("digest"):
                return {"id": known, "unchanged": True}  # it shows this already
        if op == "create-check-run" and known is not None and "update-check-run" in ops:
            changes = {k: v for k, v in params.items()
                       if k not in ("repo", "head_sha", "name")}
            try:
                run = github.update_check_run(repo=params["repo"], check_run_id=known,
                                              **changes)
                return {**run, "id": run.get("id", known)}
            except NotFound:
                pass
        if op == "put-file" and "get-file" in ops:
            try:
                got = github.get_file(repo=params["repo"], path=params["path"],
                                      ref=params.get("branch"))
            except NotFound:
                return None
            if digest(str(got.get("text", ""))) in (target.get("digests") or []):
                return {"path": got.get("path"), "sha": got.get("sha"), "unchanged": True}
            return None
        if op == "create-check-run" and "list-check-runs" in ops:
            return _reuse_check_run(integration, params)
        if "find-effect" in ops:
            asked = {k: v for k, v in params.items() if k != "effect"}
            found = cast(EffectFinder, integration).find_effect(
                operation=op, effect=effect, params=asked, since=target.get("since"))
            if found.get("found"):
                return dict(found.get("result") or {})
        return None


def _known_id(op: str, previous: Mapping[str, Any] | None,
              target: Mapping[str, Any]) -> int | None:
    """The id of the comment or check run an earlier attempt of this effect made (its
    recorded result), when it was made on the same issue (same marker) or the same head
    SHA and name; else ``None``."""
    if not previous or previous.get("op") != op or previous.get("status") != "done":
        return None
    result = previous.get("result") or {}
    before = previous.get("target") or {}
    ident = result.get("id")
    if isinstance(ident, bool) or not isinstance(ident, int) or result.get("unconfirmed"):
        return None
    same = (("marker", "number") if op == "comment" else
            ("name", "head_sha") if op == "create-check-run" else None)
    if same is None or any(before.get(k) != target.get(k) for k in same):
        return None
    return ident


def _latest_check_run(effects: Mapping[str, Any], effect: str, target: Mapping[str, Any],
                      previous: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The latest done ``create-check-run`` record on ``target``'s head SHA and name:
    ``previous`` (this effect's own earlier record) or another effect's; ``None`` when
    there is none."""
    best: Mapping[str, Any] | None = None
    for record in [*(r for k, r in effects.items() if k != effect), previous]:
        if (not isinstance(record, Mapping)
                or record.get("op") != "create-check-run" or record.get("status") != "done"):
            continue
        before = record.get("target") or {}
        if (before.get("name"), before.get("head_sha")) != (target.get("name"),
                                                             target.get("head_sha")):
            continue
        if best is None or float(record.get("at") or 0) >= float(best.get("at") or 0):
            best = record
    return best


def _reuse_comment(integration: Integration, params: Mapping[str, Any],
                   effect: str, own: OwnAccounts,
                   since: str | None = None) -> dict[str, Any] | None:
    """"Post this comment once": the comment on ``params``' issue that ``own`` wrote and
    whose marker carries ``effect`` (among those updated since ``since``, ISO 8601, when
    given), updated to ``params["body"]`` when it differs; ``None`` when there is none
    (post it). Someone else's comment carrying the marker is never taken (nor edited)."""
    github = cast(GitHub, integration)
    listed = (github.list_comments(repo=params["repo"], number=params["number"])
              if since is None else
              github.list_comments(repo=params["repo"], number=params["number"], since=since))
    for comment in listed.get("comments", []):
        if own_effect(comment.get("body"), comment.get("user"), comment.get("user_id"),
                      own) == effect:
            if comment.get("body") != params["body"] and "update-comment" in integration.operations:
                updated = github.update_comment(repo=params["repo"], comment_id=comment["id"],
                                                body=params["body"])
                return {**updated, "id": updated.get("id", comment["id"]), "reused": True}
            return {"id": comment["id"], "reused": True}
    return None


def _reuse_check_run(integration: Integration,
                     params: Mapping[str, Any]) -> dict[str, Any] | None:
    """"Create or update the check run": the run named ``params["name"]`` on
    ``params["head_sha"]``, updated with the other parameters; ``None`` when there is none,
    or when it is completed and ``params`` would reopen it (``conclusion`` unset): a new
    run then says the work item is in progress again (GitHub shows the latest by name)."""
    github = cast(GitHub, integration)
    runs = github.list_check_runs(repo=params["repo"], head_sha=params["head_sha"],
                                  name=params["name"])
    for run in runs.get("check_runs", []):
        if run.get("name") != params["name"]:
            continue
        if run.get("status") == "completed" and params.get("conclusion") is None:
            return None
        if "update-check-run" not in integration.operations:
            return {"id": run["id"], "reused": True}
        changes = {k: v for k, v in params.items() if k not in ("repo", "head_sha", "name")}
        updated = github.update_check_run(repo=params["repo"], check_run_id=run["id"],
                                          **changes)
        return {**updated, "id": updated.get("id", run["id"])}
    return None


class EffectProxy:
    """An integration whose port methods route side effects through the outbox.

    ``proxy.add_label(repo=..., number=..., label=...)`` (any method of the
    integration's port, :data:`graph.ports.OPERATIONS`) and ``proxy.call("add-label",
    ...)`` are the same: a write is performed exactly once per effect id
    (:meth:`HookEffects.perform`), a read passes straight through. A transient failure of
    any call raises :class:`RetryLater`. Other attributes are the wrapped integration's.
    """

    def __init__(self, name: str, integration: Integration, effects: HookEffects, *,
                 effect: str | None = None, in_place: bool = False) -> None:
        self.name = name
        self.operations = integration.operations
        self._integration = integration
        self._effects = effects
        self._effect = effect
        self._in_place = in_place
        self._ports: dict[str, Operation] = {
            spec.method: spec for spec in OPERATIONS.get(name, {}).values()}

    def __getattr__(self, attribute: str) -> Any:
        spec = self.__dict__.get("_ports", {}).get(attribute)
        if spec is None:
            return getattr(self._integration, attribute)
        return functools.partial(self.call, spec.name)

    def __repr__(self) -> str:
        return f"EffectProxy({self._integration!r})"

    def call(self, op: str, **params: Any) -> dict[str, Any]:
        """Perform ``op`` (a write through the outbox, a read directly).

        Raises:
            RetryLater: a transient failure.
            IntegrationError: a permanent refusal.
        """
        if is_side_effect(op, self.name):
            return self._effects.perform(self.name, self._integration, op, params,
                                         effect=self._effect, in_place=self._in_place)
        try:
            return _method(self._integration, self.name, op)(**params)
        except IntegrationError as exc:
            if exc.retriable:
                raise RetryLater.from_error(exc) from exc
            raise


def _refused(name: str, op: str, effect: str, record: Mapping[str, Any]) -> IntegrationError:
    """The refusal recorded in ``record`` (a ``failed`` effect the target refused for
    good), raised again instead of asking the target a second time."""
    status = record.get("http_status")
    reason = str(record.get("reason") or "")
    return IntegrationError(
        f"{name} {op}: refused when first tried (effect {effect}, HTTP {status}): "
        f"{reason or 'no reason given'}; not tried again",
        integration=name, op=op, status=status if isinstance(status, int) else None,
        reason=reason)
