"""What every route handler is handed, and what is checked before any handler runs.

:class:`Agent` carries what handlers may use (state, runtime, repository context, notices,
the GitHub provider), :class:`Delivery` the delivery, read once
(:class:`foundation.events.GitHubEvent`), :class:`Handled` what happened to it;
:func:`admit` applies what is known of the delivery's installation and repository first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from foundation.events import GitHubEvent
from foundation.inbox.record import DeliveryRecord
from foundation.settings import WorkerSettings
from foundation.turns import TurnRecords
from graph.model import Graph
from graph.ports import GitHub, IntegrationError
from graph.refs import WorkItemRef
from graph.runtime import Runtime
from graph.state import StateStore
from workers.identities import Installations, Repositories
from workers.notices import Notices
from workers.repo_context import RepoContext

log = logging.getLogger("the_loop.worker")


#: installation id -> the GitHub provider (its typed port, :class:`graph.ports.GitHub`).
GitHubFactory = Callable[[int | None], GitHub]


@dataclass(frozen=True)
class Handled:
    """What happened to one delivery: ``outcome`` is ``advanced``, ``ignored``,
    ``retrying``, ``failed`` or ``lost`` (another worker took its work item over);
    ``detail`` is the-loop's own reason or the work item's status."""

    delivery_id: str
    outcome: str
    detail: str = ""


@dataclass(frozen=True)
class Delivery:
    """One delivery as a handler sees it.

    Attributes:
        record: the stored delivery (its body read).
        event: the body, read once; its ``ref`` is the work item the record names: the
            receiver's (from the payload), or the one a CI result was fanned out to.
        replay: an earlier attempt of this delivery had started.
        repository: the current full name of the work item's repository (its ref keeps
            the name the-loop first saw, :mod:`workers.identities`), when known.
    """

    record: DeliveryRecord
    event: GitHubEvent
    replay: bool = False
    repository: str | None = None

    @property
    def id(self) -> str:
        """The ``X-GitHub-Delivery`` id."""
        return self.record.delivery_id

    @property
    def ref(self) -> WorkItemRef | None:
        """The work item, or ``None``."""
        return self.event.ref

    def ignored(self, reason: str) -> Handled:
        """This delivery, ignored for ``reason``."""
        return Handled(self.id, "ignored", reason)

    def repository_of(self, ref: WorkItemRef) -> str:
        """The name to call GitHub with for work item ``ref``: the repository's current
        name, else the ref's."""
        return self.repository or ref.repository


@dataclass(frozen=True)
class Agent:
    """What handlers may use (built once by :func:`the_loop.wiring.build_processor`).

    Attributes:
        settings: worker settings.
        graph: the compiled graph.
        store: work item state and event logs.
        runtime: the graph runtime over ``store``.
        repos: repository configuration, permissions, CI results, HookConfig.
        notices: the worker's notices and reactions (through the outbox).
        github: installation id -> GitHub provider; ``None`` without credentials.
        fan_out: queue a record again for each of the given work items; returns how
            many were queued.
        turns: the runner's turn records, when a harness is configured (agent nodes'
            work is then ordered as harness turns); ``None``: adapter ``none``.
        max_turns, cost_cap_usd: ``harness.maxTurns`` and ``harness.costCapUsd``.
        repositories, installations: what is known of repositories (ids, names) and
            installations (deleted, suspended), :mod:`workers.identities`; ``None``: not
            kept (every delivery is taken as it names itself).
        forward: queue a record again, action kept, for one work item (a delivery that
            names a renamed repository goes to the work item under its first name).
    """

    settings: WorkerSettings
    graph: Graph
    store: StateStore
    runtime: Runtime
    repos: RepoContext
    notices: Notices
    github: GitHubFactory | None
    fan_out: Callable[[DeliveryRecord, list[str]], int]
    turns: TurnRecords | None = None
    max_turns: int = 5
    cost_cap_usd: float | None = None
    repositories: Repositories | None = None
    installations: Installations | None = None
    forward: Callable[[DeliveryRecord, str], int] | None = None

    def github_or_none(self, installation_id: int | None) -> GitHub | None:
        """The GitHub provider, or ``None`` without credentials or an installation."""
        if self.github is None:
            return None
        try:
            return self.github(installation_id)
        except IntegrationError:
            return None

    def github_for(self, installation_id: int | None) -> GitHub:
        """The GitHub provider.

        Raises:
            IntegrationError: no credentials are configured (naming the variables to
                set), or the installation's client cannot be made.
        """
        if self.github is None:
            raise IntegrationError(
                "no GitHub credentials: set THE_LOOP_GITHUB_APP_ID and "
                "THE_LOOP_GITHUB_PRIVATE_KEY (or _PATH), or GH_TOKEN",
                integration="github", op="connect")
        return self.github(installation_id)


Handler = Callable[[Agent, Delivery], Handled]


def admit(agent: Agent, delivery: Delivery) -> Delivery | Handled:
    """What is known of the delivery's installation and repository, before its handler:

    * a delivery for a deleted or suspended installation, or for a repository removed
      from the App's installation, can never succeed: a logged no-op (never retried,
      never parked);
    * the repository's id and current name are noted (:mod:`workers.identities`); a
      delivery whose ref names the repository by a name other than the one its work
      items are keyed by (a rename or transfer) is forwarded to that work item's inbox;
      otherwise the delivery comes back with the repository's current name.

    Installation deliveries themselves pass (their route records them).

    Returns:
        the delivery to hand to its route, or what happened to it.
    """
    event, ref = delivery.event, delivery.ref
    if event.name in ("installation", "installation_repositories"):
        return delivery
    installations, repositories = agent.installations, agent.repositories
    status = installations.status(event.installation_id) if installations else None
    if status is not None:
        log.info("delivery=%s event=%s: installation %s is %s; nothing to do", delivery.id,
                 event.kind_name, event.installation_id, status)
        return delivery.ignored(f"installation {event.installation_id} is {status}")
    if repositories is None:
        return delivery
    if event.repository_id is not None and event.repository:
        if repositories.removed(event.repository_id):
            log.info("delivery=%s event=%s: repository %s was removed from the App's "
                     "installation; nothing to do", delivery.id, event.kind_name,
                     event.repository)
            return delivery.ignored(f"repository {event.repository} was removed from the "
                                    "installation")
        noted = repositories.note(event.repository_id, event.repository,
                                  event.installation_id)
        if noted.previous is not None:
            log.info("repository id %d is now %s (was %s); its work items keep their refs "
                     "(github:%s#N)", event.repository_id, noted.name, noted.previous,
                     noted.key)
        if ref is not None and ref.repository == event.repository and noted.renamed:
            owner = WorkItemRef(noted.key, ref.number).format()
            if agent.forward is None:
                return delivery.ignored("renamed repository: no way to forward")
            agent.forward(delivery.record, owner)
            return delivery.ignored(f"repository renamed to {noted.name}: forwarded to "
                                    f"{owner}")
        if ref is not None and ref.repository == noted.key:
            return replace(delivery, repository=noted.name)
        return delivery
    if ref is not None:  # the-loop's own deliveries (a turn report) carry no id
        return replace(delivery, repository=repositories.name_of(ref.repository))
    return delivery


def logged_by(agent: Agent, ref: str, type_: str, delivery_id: str) -> bool:
    """Whether ``ref``'s log has a ``type_`` event caused by ``delivery_id`` (an earlier
    attempt logged it before it failed or its worker died): the store's index of the
    entries a delivery caused, never a read of the whole log."""
    return any(e.type == type_ for e in agent.store.caused_by(ref, delivery_id))

