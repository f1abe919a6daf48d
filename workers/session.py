"""A delivery's session with its work item: what the handler works with, read once.

The shape of policy-bot's ``NewEvalContext`` then ``Evaluate``: :meth:`WorkItemSession.open`
builds the handler's world in one place, and the handler and the runtime are handed its
values instead of reading them again:

- the repository configuration (:meth:`workers.repo_context.RepoContext.config`), read
  once;
- the work item's stored state, loaded once (one ``load`` of the state store per
  delivery); a state that cannot be read (:class:`graph.state.StateError`) is rebuilt
  once, through :meth:`graph.runtime.Runtime.load`, when the hook config is there to
  rebuild it with;
- the hook config (:meth:`workers.repo_context.RepoContext.hook_config`), built once;
- the work item (:class:`graph.model.WorkItem`: kind, tickets, risk tier), derived from
  that one state and the event.

The runtime is handed the state as loaded (``state=`` of
:meth:`graph.runtime.Runtime.enrol` and :meth:`graph.runtime.Runtime.advance`); a step
that saved the state meanwhile marks the session's copy stale (:meth:`stale`), and the
runtime then loads it itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from foundation.events import GitHubEvent
from foundation.turns import RunnerWork, TurnContext
from graph.context import HookConfig
from graph.model import WorkItem
from graph.ports import GitHub
from graph.refs import WorkItemRef
from graph.runtime import UNLOADED, Unloaded
from graph.state import StateError, WorkItemState
from workers.repo_context import RepoConfig

if TYPE_CHECKING:  # the handlers' types; their module imports this one
    from workers.routes.agent import Agent, Delivery


def turn_work(agent: Agent, event: GitHubEvent, ref: WorkItemRef, repository: str,
              kind: str | None = None) -> tuple[RunnerWork | None, str | None]:
    """Where the work item's agent turns are ordered (``HookConfig.work``), and its branch
    (artifacts are read there once a turn has pushed); ``(None, None)`` without a
    harness (``agent.turns`` is ``None``).

    Args:
        agent: the handlers' collaborators.
        event: the delivery's event (title, default branch, installation).
        ref: the work item.
        repository: the repository's current full name.
        kind: what the work item is (``issue`` or ``pull_request``) as its state last
            recorded it; ``None``: the event's kind when the event names the work item
            itself (a delivery on its draft pull request does not), else ``issue``.
    """
    if agent.turns is None:
        return None, None
    branch = agent.turns.workspace(ref.format()).get("branch")
    context = TurnContext(
        repository=repository, number=ref.number, title=event.title or "",
        default_branch=event.default_branch or "main",
        installation_id=event.installation_id, branch=branch,
        kind=kind or (event.kind if event.ref == ref and event.kind else "issue"))
    return RunnerWork(agent.turns, context, max_turns=agent.max_turns,
                      cost_cap_usd=agent.cost_cap_usd), branch


@dataclass
class WorkItemSession:
    """One delivery's world for one work item (open it with :meth:`open`).

    Attributes:
        agent: the handlers' collaborators.
        delivery: the delivery (its ``ref`` is the work item).
        ref: the work item.
        github: the GitHub provider, ``None`` without credentials or an installation
            (until :meth:`hook_config` asks for one, which raises then).
        repository: the repository's current full name.
        repo_config: the repository configuration from its default branch (the
            defaults without GitHub).
        stored: the work item's state as loaded (``None``: not enrolled, or unreadable
            until :meth:`state` rebuilds it).
        readable: whether the stored state could be read.
        fresh: whether ``stored`` is still what the store holds (:meth:`stale`).
    """

    agent: Agent
    delivery: Delivery
    ref: WorkItemRef
    github: GitHub | None
    repository: str
    repo_config: RepoConfig
    stored: WorkItemState | None
    readable: bool
    fresh: bool = True
    _config: HookConfig | None = None
    _item: WorkItem | None = None

    @classmethod
    def open(cls, agent: Agent, delivery: Delivery) -> WorkItemSession:
        """Read what the delivery's handler needs of its work item: the repository
        configuration (when there is a GitHub provider) and the stored state (one
        ``load``; an unreadable one is noted, :attr:`readable`).

        Raises:
            ValueError: the delivery names no work item.
            IntegrationError: GitHub failed reading the configuration (not "absent").
        """
        ref, event = delivery.ref, delivery.event
        if ref is None:
            raise ValueError(f"delivery {delivery.id} names no work item")
        github = agent.github_or_none(event.installation_id)
        repository = delivery.repository_of(ref)
        repo_config = (agent.repos.config(github, repository, event.default_branch or "main")
                       if github is not None else RepoConfig())
        try:
            stored, readable = agent.store.load(ref.format()), True
        except StateError:  # rebuilt from the artifacts' verified records (state())
            stored, readable = None, False
        return cls(agent, delivery, ref, github, repository, repo_config, stored, readable)

    @property
    def known(self) -> bool:
        """Whether the work item has stored state (an unreadable one is known)."""
        return self.stored is not None or not self.readable

    @property
    def enrolment_label(self) -> str:
        """The label that enrols a work item in this repository."""
        return self.repo_config.enrolment_label(self.agent.settings)

    def hook_config(self) -> HookConfig:
        """The delivery's HookConfig, built once (the GitHub provider is required from
        here on).

        Raises:
            IntegrationError: no credentials are configured (naming the variables to
                set), the installation's client cannot be made, or GitHub failed.
        """
        if self._config is None:
            agent, event, ref = self.agent, self.delivery.event, self.ref
            if self.github is None:
                self.github = agent.github_for(event.installation_id)  # raises, naming why
            work, branch = turn_work(agent, event, ref, self.repository,
                                     self.stored.kind if self.stored is not None else None)
            pull = (agent.turns.workspace(ref.format()).get("pull")
                    if agent.turns is not None else None)
            self._config = agent.repos.hook_config(
                self.github, event, ref, self.repo_config, branch=branch, work=work,
                repository=self.repository, draft_pull=int(pull) if pull else None)
        return self._config

    def state(self) -> WorkItemState | None:
        """The work item's state: as loaded, or, when it was unreadable, rebuilt once from
        the artifacts' verified records (:meth:`graph.runtime.Runtime.load`, which saves
        it) before anything reads it.

        Raises:
            IntegrationError: as :meth:`hook_config` (a rebuild needs it).
        """
        if not self.readable:
            spec_dir = self.repo_config.spec_dir(self.agent.settings)
            default = self.repo_config.harness.risk.default
            item = self.delivery.event.work_item(self.ref, spec_dir, risk_tier=default)
            self.stored = self.agent.runtime.load(replace(item, repository=self.repository),
                                                  self.hook_config())
            self.readable = True
        return self.stored

    def work_item(self) -> WorkItem:
        """The work item, derived once from the event and the one state.

        Its risk tier is the event's labels' when it carries labels (a ``risk:<n>``
        label, else ``risk.default``), else the tier last recorded in its state (a CI
        event or a turn report shows no labels), else ``risk.default``. The kind is the
        one its state recorded (what it was enrolled as: is-docs-only reads a pull
        request's files, an issue has none), else the event's (an issue for a delivery of
        another pull request, the issue's draft forwarded to it; ``pull_request`` for a
        CI result); tickets the event's, else the state's.
        """
        if self._item is None:
            event, risk = self.delivery.event, self.repo_config.harness.risk
            state = self.state()
            if event.carries_labels:
                tier = risk.tier(event.labels)
            elif state is not None and state.risk_tier is not None:
                tier = state.risk_tier
            else:
                tier = risk.default
            item = event.work_item(self.ref, self.repo_config.spec_dir(self.agent.settings),
                                   risk_tier=tier)
            # A work item is what it was enrolled as: a delivery of an issue's draft
            # pull request (forwarded to the issue) shows a pull request, a CI result
            # or a re-drive shows neither.
            kind: str | None = state.kind if state is not None and state.kind else None
            if kind is None and event.pull_number not in (None, self.ref.number):
                kind = "issue"  # the draft pull request
            if kind is None:
                kind = event.kind or ("pull_request" if event.ci is not None else None)
            tickets = event.tickets or (tuple(state.tickets) if state is not None else ())
            self._item = replace(item, repository=self.repository, kind=kind or item.kind,
                                 tickets=tickets)
        return self._item

    def stale(self) -> None:
        """Something saved the work item's state since it was loaded: the runtime loads
        it again (:meth:`runtime_state`)."""
        self.fresh = False

    def runtime_state(self) -> WorkItemState | None | Unloaded:
        """The ``state=`` to hand the runtime: the session's own, or
        :data:`graph.runtime.UNLOADED` once it is stale."""
        return self.state() if self.fresh else UNLOADED
