"""Running one boundary's hooks: a chain in declared order, each hook under its timeout.

:func:`run_chain` runs a node's ``entry`` or ``exit`` calls and returns their verdict, a
:class:`ChainResult`; :func:`call_hook` runs one hook in a thread of its own. Neither
touches state: recording a chain's results is the walk's (:mod:`graph.runtime.calls`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from graph import hook_threads
from graph.context import HEAD_MOVED, HookConfig, RevisionFiles
from graph.effects import HookEffects
from graph.model import Boundary, HookCall, HookContext, HookResult, Message
from graph.ports import IntegrationError, RetryLater

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChainResult:
    """The verdict of one chain.

    Attributes:
        node: id of the node whose chain ran.
        boundary: ``entry`` or ``exit``.
        status: ``pass`` (every hook passed or skipped), ``block`` or ``wait`` (the first
            hook that returned it short-circuited the chain).
        outcome: what edges route on: the first named outcome a passing hook put in
            ``data["outcome"]``, else ``pass``; for a stopped chain, its status.
        results: every result produced, in order.
    """

    node: str
    boundary: Boundary
    status: str
    outcome: str
    results: tuple[HookResult, ...]

    @property
    def stopper(self) -> HookResult | None:
        """The result that stopped the chain, if one did."""
        return self.results[-1] if self.status != "pass" and self.results else None

    @property
    def messages(self) -> tuple[Message, ...]:
        """Messages of the stopping result (what goes back to the work as its next input)."""
        stop = self.stopper
        return stop.messages if stop else ()


def call_hook(call: HookCall, ctx: HookContext, *,
              on_timeout: Callable[[], None] | None = None) -> HookResult:
    """Run one hook under its timeout (:attr:`HookCall.limit` seconds: the graph's
    ``timeout`` for this call, else ``HookDef.timeout``).

    A hook that raises, or returns something other than a HookResult, is a ``block`` with
    ``retriable=False``; one that runs past its timeout is a retriable ``block``: its
    thread is stopped (:func:`graph.hook_threads.stop`: pure-Python code, CPU-bound or
    not, ends at its next bytecode; what cannot be stopped is watched and, if it keeps
    burning CPU, ends the worker), it can no longer affect the verdict, and
    ``on_timeout`` is called, e.g. to stop its effects. A transient failure
    (:class:`graph.effects.RetryLater`, or a retriable
    :class:`~graph.ports.IntegrationError`: 5xx, rate limit, network) is not a verdict:
    it propagates as ``RetryLater`` so the caller retries the delivery later.

    An integration hook (``HookDef.fails_open``, e.g. ``notify``) never stops the chain:
    its timeout, exception or transient failure is a ``pass`` whose data records it
    (``{"integration_failed": "timeout" | "raised" | "transient", "error": type name}``),
    which the runtime writes to the event log as ``notification.failed``.

    Raises:
        RetryLater: the hook failed transiently.
    """
    box: list[HookResult | BaseException] = []

    def target() -> None:
        try:
            box.append(call.definition.fn(ctx))
        except BaseException as exc:  # noqa: BLE001  (reported as a block below)
            box.append(exc)

    worker = threading.Thread(target=target, name=f"hook-{call.name}", daemon=True)
    worker.start()
    worker.join(call.limit)
    fails_open = call.definition.fails_open
    if not box:
        hook_threads.stop(worker)
        if on_timeout is not None:
            on_timeout()
        log.warning("hook %s ran past its timeout at node %s", call.name, ctx.node.id)
        if fails_open:
            return _failed_open(call, "timeout", "timeout")
        return HookResult.blocked(
            call.name,
            Message(f"hook {call.name} ran past its timeout of {call.limit:g} s",
                    code="hook-timeout"),
            retriable=True,
        )
    outcome = box[0]
    if fails_open and isinstance(outcome, BaseException):
        transient = isinstance(outcome, RetryLater) or (
            isinstance(outcome, IntegrationError) and outcome.retriable)
        log.warning("integration hook %s failed at node %s (%s); recorded, continuing",
                    call.name, ctx.node.id, type(outcome).__name__)
        return _failed_open(call, "transient" if transient else "raised",
                            type(outcome).__name__)
    if isinstance(outcome, RetryLater):
        raise outcome
    if isinstance(outcome, IntegrationError) and outcome.retriable:
        raise RetryLater.from_error(outcome) from outcome
    if isinstance(outcome, HookResult):
        if outcome.hook != call.name:
            outcome = dataclasses.replace(outcome, hook=call.name)
        return outcome
    if isinstance(outcome, BaseException):
        log.error("hook %s raised at node %s", call.name, ctx.node.id, exc_info=outcome)
        kind = type(outcome).__name__
    else:
        kind = f"returned {type(outcome).__name__}, not HookResult"
    return HookResult(
        "block",
        call.name,
        (Message(f"hook {call.name} failed ({kind}); see the-loop's logs", code="hook-raised"),),
        {},
        retriable=False,
    )


def _failed_open(call: HookCall, how: str, error: str) -> HookResult:
    """The ``pass`` of an integration hook that failed (see :func:`call_hook`)."""
    seconds = f" of {call.limit:g} s" if how == "timeout" else ""
    return HookResult(
        "pass", call.name,
        (Message(f"hook {call.name} failed ({how}{seconds}); recorded, the graph continues",
                 code=f"integration-{how}"),),
        {"integration_failed": how, "error": error, "notification_failed": True})


def run_chain(
    calls: tuple[HookCall, ...],
    ctx: HookContext,
    *,
    only_validating: bool = False,
    effects: Callable[[int, HookCall], HookEffects] | None = None,
) -> ChainResult:
    """Run ``calls`` in declared order; the first non-pass short-circuits.

    ``skip`` is recorded and the chain continues. A hook that raises is a ``block`` with
    ``retriable=False``, never a pass; one that times out is a retriable ``block``
    (specification, "Error handling"). See :func:`call_hook`.

    Args:
        calls: the chain (a node's ``entry`` or ``exit``).
        ctx: the context; ``results`` and ``params`` are filled in per hook.
        only_validating: run only hooks registered ``validating=True`` (recompute).
        effects: (position, call) -> the outbox of that hook run; its integrations are
            handed to the hook wrapped (see :mod:`graph.effects`).

    Returns:
        the :class:`ChainResult`.

    Raises:
        RetryLater: a hook failed transiently; the chain stops without a verdict.
    """
    results: list[HookResult] = []
    for position, call in enumerate(calls):
        if only_validating and not call.definition.validating:
            continue
        outbox = effects(position, call) if effects is not None else None
        hook_ctx = dataclasses.replace(
            ctx, results=tuple(results), params=call.params,
            config=outbox.wrap(ctx.config) if outbox is not None else ctx.config)
        result = call_hook(call, hook_ctx, on_timeout=outbox.close if outbox else None)
        results.append(result)
        ctx = dataclasses.replace(ctx, config=with_moved_head(ctx.config, (result,)))
        if result.status in ("block", "wait"):
            return ChainResult(ctx.node.id, ctx.boundary, result.status, result.status,
                               tuple(results))
    outcome = next(
        (r.outcome for r in results if r.status == "pass" and r.outcome != "pass"), "pass"
    )
    return ChainResult(ctx.node.id, ctx.boundary, "pass", outcome, tuple(results))


def with_moved_head(config: HookConfig, results: Sequence[HookResult]) -> HookConfig:
    """``config`` with ``head_sha`` set to the last head a passing hook of ``results``
    moved the pull request branch to (``data[HEAD_MOVED]``), and its files read there
    when the reader can move (:class:`graph.context.RevisionFiles`); else ``config``
    itself."""
    moved = next((str(r.data[HEAD_MOVED]) for r in reversed(results)
                  if r.status == "pass" and r.data.get(HEAD_MOVED)), None)
    if moved is None or moved == config.head_sha:
        return config
    at = getattr(config.files, "at", None)
    files = cast(RevisionFiles, config.files).at(moved) if callable(at) else config.files
    return dataclasses.replace(config, head_sha=moved, files=files)
