"""Build the runtime for a local checkout (``the-loop run``, ``check``, ``graph force
--repo``); the service's Redis state is :func:`the_loop.wiring.build_operator`'s."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from foundation.config.repository import (
    COLLABORATORS_PATH,
    DEFAULT_SPEC_DIR,
    HARNESS_CONFIG_PATH,
    Collaborators,
    load_harness_config,
)
from foundation.settings import WorkerSettings
from foundation.signing import KEYS_PATH, trusted_keys
from graph.context import HookConfig
from graph.model import Graph, WorkItem
from graph.refs import PREFIX, RefError, WorkItemRef
from graph.runtime import Runtime
from graph.state import StateStore
from the_loop.graphs import load_graph
from the_loop.stores import FileStateStore, LocalFiles

LOCAL_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/#-]{0,199}$")
STATE_DIR = ".the-loop/state"


def parse_ref(ref: str, spec_dir: str = DEFAULT_SPEC_DIR) -> WorkItem:
    """``github:OWNER/REPO#N`` (:meth:`graph.refs.WorkItemRef.parse`; artifacts in
    ``specs/N``) or a local name such as ``local:login-page`` (artifacts in
    ``specs/login-page``).

    Raises:
        RefError: a malformed ``github:`` ref, or neither form.
    """
    if ref.startswith(PREFIX):
        github = WorkItemRef.parse(ref)
        return WorkItem(ref=github.format(), id=github.number, repository=github.repository,
                        spec_dir=spec_dir.format(number=github.number))
    if not LOCAL_REF.match(ref):
        raise RefError(f"work item ref {ref!r} is malformed; use github:OWNER/REPO#N or a "
                       "local name like local:login-page")
    name = ref.split(":", 1)[-1].replace("/", "-").replace("#", "-")
    return WorkItem(ref=ref, spec_dir=spec_dir.format(number=name))


@dataclass
class Local:
    """A runtime over a local checkout with file state and no network integrations."""

    runtime: Runtime
    work_item: WorkItem
    config: HookConfig
    repo: Path

    @property
    def graph(self) -> Graph:
        return self.runtime.graph


def open_local(
    repo: Path, ref: str, graph_path: str | None = None,
    settings: WorkerSettings | None = None,
) -> Local:
    """Compile the graph, read ``.the-loop/collaborators.yaml``,
    ``.the-loop/harness-config.yaml`` and the published review-record keys
    (``.the-loop/keys/records.pub``) from the checkout, and keep state under
    ``<repo>/.the-loop/state``. Review records are signed with ``settings.signer`` and
    verified against the published keys and the signer's own.

    Args:
        repo: the checkout.
        ref: the work item ref.
        graph_path: the graph file (default: ``settings.graph_path``, else the shipped one).
        settings: the deployment's ``THE_LOOP_GRAPH`` and ``THE_LOOP_SPEC_DIR``
            (:attr:`foundation.settings.Settings.worker`; default: every default).

    Raises:
        RefError, graph.compile.GraphError, foundation.config.loader.ConfigFileError.
    """
    settings = settings or WorkerSettings()
    repo = repo.resolve()
    graph = load_graph(graph_path or settings.graph_path)
    files = LocalFiles(repo)
    work_item = parse_ref(ref, settings.spec_dir)
    collaborators = Collaborators.parse(files.read_text(COLLABORATORS_PATH),
                                        str(repo / COLLABORATORS_PATH))
    harness = load_harness_config(files.read_text(HARNESS_CONFIG_PATH),
                                  str(repo / HARNESS_CONFIG_PATH))
    # A local work item has no labels: its tier is the harness config's risk.default.
    work_item = dataclasses.replace(work_item, risk_tier=harness.risk.default)
    config = HookConfig(harness=harness.as_dict(), collaborators=collaborators, files=files,
                        human_only=harness.requires_human,
                        human_reason=harness.human_reservation,
                        signer=settings.signer,
                        record_keys=trusted_keys(files.read_text(KEYS_PATH),
                                                 str(repo / KEYS_PATH), settings.signer))
    store: StateStore = FileStateStore(repo / STATE_DIR, seal_key=settings.state_key)
    return Local(Runtime(graph, store), work_item, config, repo)
