"""Risk tiers through the worker: a work item's tier comes from a `risk:<n>` label (or
the harness config's `risk.default`), and `autonomy.tiers` and
`security.review.humanSignOffMinTier` decide whether a model's reading of a comment may
satisfy a gate; the reservation is named in the status comment."""

from __future__ import annotations

import json
import uuid

import pytest

from foundation.config.repository import load_harness_config
from foundation.inbox.enqueue import DeliveryQueue
from foundation.inbox.keys import SHARED_INBOX
from foundation.settings import WorkerSettings
from graph.markers import find_effect
from graph.state import Past
from tests.conftest import act_as, gh_label
from tests.workers.test_gate_feedback import COLLABORATORS, REF1, REPO, REQUIREMENTS, fixture
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.events import parse_delivery
from workers.state import RedisStateStore

HARNESS = """version: 1
autonomy:
  tiers: {1: agent, 2: agent, 3: agent, 4: agent}
security:
  review: {humanSignOffMinTier: 3}
risk: {default: 2, labelPrefix: "risk/"}
"""
#: What the model classifier reads into any comment: an approval.
CLASSIFIER_CALLS: list[str] = []


def classifier(text, allowed):
    CLASSIFIER_CALLS.append(text)
    return "approved"


@pytest.fixture
def env(redis_ns):
    gh = FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, ".the-loop/harness-config.yaml", HARNESS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh,
                                classifier=classifier)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    store = RedisStateStore(redis_ns.client, redis_ns.prefix)

    def deliver(event, payload):
        body = json.dumps(payload).encode()
        delivery = parse_delivery({"X-GitHub-Event": event,
                                   "X-GitHub-Delivery": f"{redis_ns.token}-{uuid.uuid4()}",
                                   "Content-Type": "application/json"}, body)
        assert queue.enqueue(delivery)
        return processor.drain(delivery.work_item or SHARED_INBOX)

    CLASSIFIER_CALLS.clear()
    return gh, store, deliver


def labelled(payload, *labels):
    subject = payload.get("issue") or payload.get("pull_request")
    subject["labels"] = [gh_label("the-loop"), *(gh_label(n) for n in labels)]
    return payload


def status_body(gh):
    return next(c["body"] for c in gh.comments(REPO, 1)
                if (find_effect(c["body"]) or "").endswith("/status"))


def free_text(*labels):
    p = labelled(fixture("issue_comment", "created"), *labels)
    act_as(p, "Codertocat")
    p["comment"]["body"] = "Looks fine to me, ship it."
    return p


def test_a_risk_label_sets_the_tier_and_a_reserved_tier_refuses_a_models_approval(env):
    """Given humanSignOffMinTier 3 and an issue labelled risk/3
    When an approver writes a free-text comment a model reads as an approval
    Then the gate keeps waiting, and its status comment names the reservation."""
    gh, store, deliver = env
    enrol = labelled(fixture("issues", "labeled"), "risk/3")
    enrol["label"] = gh_label("the-loop")
    deliver("issues", enrol)
    state = store.load(REF1)
    assert (state.current_node, state.risk_tier) == ("requirements-approval", 3)
    body = status_body(gh)
    assert "Risk tier 3: this gate is reserved for a person's explicit decision" in body
    assert "security.review.humanSignOffMinTier is 3" in body
    deliver("issue_comment", free_text("risk/3"))
    assert CLASSIFIER_CALLS, "the classifier was asked"
    state = store.load(REF1)
    assert (state.current_node, state.status) == ("requirements-approval", "waiting")
    assert "a model's reading of a comment cannot grant it" in status_body(gh)
    # An explicit human signal still decides it.
    p = free_text("risk/3")
    p["comment"]["body"] = "/approve"
    deliver("issue_comment", p)
    assert store.load(REF1).current_node == "design"


def test_the_default_tier_lets_a_models_approval_satisfy_an_agent_tier_gate(env):
    """Given risk.default 2 and autonomy.tiers 2: agent, and an issue with no risk label
    When a model reads an approver's comment as an approval
    Then the gate is satisfied, and no reservation is named."""
    gh, store, deliver = env
    enrol = labelled(fixture("issues", "labeled"))
    enrol["label"] = gh_label("the-loop")
    deliver("issues", enrol)
    assert store.load(REF1).risk_tier == 2
    assert "reserved for a person" not in status_body(gh)
    deliver("issue_comment", free_text())
    state = store.load(REF1)
    assert state.current_node == "design"
    assert Past.read(store, REF1).decisions[-1]["source"] == "model"


def test_risk_tier_configuration():
    config = load_harness_config(HARNESS)
    assert config.risk.tier(["bug", "risk/1"]) == 1
    assert config.risk.tier(["risk/1", "RISK/4"]) == 4  # the highest label wins
    assert config.risk.tier(["risk/9", "risk/x"]) == 2  # not a tier: the default
    assert load_harness_config(None).risk.tier(["risk:3"]) == 3
    assert load_harness_config(None).risk.tier([]) is None
    assert config.human_reservation(2) is None
    assert "autonomy.tiers gives tier 1 to human" in load_harness_config(
        "version: 1\nautonomy: {tiers: {1: human}}\nsecurity: {review: "
        "{humanSignOffMinTier: 4}}\n").human_reservation(1)
    with pytest.raises(Exception, match="risk.default"):
        load_harness_config("version: 1\nrisk: {default: 7}\n")
