"""Signed payloads are checked against GitHub's published schema of their event before the
worker processes them: one that does not match is acknowledged, recorded as invalid with
the failing JSON path (never a value), never retried or parked, and never holds its work
item's next delivery. Real Redis, a real RQ worker (``LoopWorker``), the fake GitHub."""

from __future__ import annotations

import copy
import json
import re
import uuid

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from foundation.inbox.dead import Deliveries
from foundation.settings import ReceiverSettings, WorkerSettings
from foundation.webhook_schema import SCHEMA_VERSION, PayloadSchemas
from tests.conftest import fixture_files, load_payload, signed_post
from tests.workers.test_processing import (
    COLLABORATORS,
    REPO,
    REQUIREMENTS,
    comment_payload,
    deliver,
    enrol_payload,
    work,
)
from the_loop.cli import main
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor
from webhook.app import create_app
from workers import metrics as worker_metrics
from workers.state import RedisStateStore

REF = f"github:{REPO}#1"
#: Text planted in the broken payloads: it must never reach the record, a log or the CLI.
PLANTED = "planted-value-7f3a"


def missing_required():
    p = enrol_payload()
    del p["issue"]["title"]
    return p, "$.issue.title", "required"


def wrong_type():
    p = enrol_payload()
    p["issue"]["user"]["id"] = PLANTED
    return p, "$.issue.user.id", "type"


def wrong_nested_enum():
    p = enrol_payload()
    p["issue"]["state"] = PLANTED
    return p, "$.issue.state", "enum"


def extra_junk():
    p = enrol_payload()
    p[PLANTED] = {"x": PLANTED}  # the issues.labeled schema forbids other top-level keys
    return p, "$", "additionalProperties"


def extra_junk_in_a_label():
    p = enrol_payload()
    p["label"][PLANTED] = PLANTED
    return p, "$.label", "additionalProperties"


KINDS = [missing_required, wrong_type, wrong_nested_enum, extra_junk, extra_junk_in_a_label]


@pytest.fixture
def env(redis_ns, monkeypatch):
    gh = FakeGitHub()
    gh.add_file(REPO, ".the-loop/collaborators.yaml", COLLABORATORS, ref="master")
    gh.add_file(REPO, "specs/1/requirements.md", REQUIREMENTS, ref="master")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                              delivery_attempts=2)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    from foundation.inbox.enqueue import DeliveryQueue

    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    monkeypatch.setenv("REDIS_URL", redis_ns.url)
    monkeypatch.setenv("THE_LOOP_REDIS_PREFIX", redis_ns.prefix)
    monkeypatch.setenv("THE_LOOP_QUEUE", redis_ns.queue_name)
    yield gh, processor, queue, redis_ns


def invalid_count(event: str) -> float:
    return worker_metrics.PAYLOAD_CHECKS.labels(event, "invalid")._value.get()


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_a_schema_invalid_payload_is_recorded_with_its_path_and_the_next_one_is_processed(
        env, kind, caplog):
    gh, processor, queue, ns = env
    payload, path, rule = kind()
    before = invalid_count("issues")
    bad = deliver(queue, "issues", payload)
    good = deliver(queue, "issues", enrol_payload())  # the same work item's next delivery
    with caplog.at_level("INFO"):
        work(ns, processor)

    ledger = processor.deliveries
    [entry] = ledger.invalid()
    assert (entry["delivery"], entry["event"], entry["action"], entry["work_item"],
            entry["path"], entry["rule"]) == (bad, "issues", "labeled", REF, path, rule)
    # Never retried, never parked, nothing held; the next delivery went through.
    assert ledger.failed() == [] and ledger.retrying() == []
    assert not ns.client.exists(processor.keys.parked(REF))
    assert not ns.client.exists(processor.keys.delivery(bad))
    state = RedisStateStore(ns.client, ns.prefix).load(REF)
    assert state is not None and state.blocked_by_delivery is None
    assert (state.status, state.current_node) == ("waiting", "requirements-approval")
    assert "phase:requirements-approval" in gh.labels(REPO, 1)
    assert ns.client.llen(processor.keys.inbox(REF)) == 0
    assert invalid_count("issues") == before + 1
    # The log names the delivery, path and rule, and no payload value.
    line = next(r.getMessage() for r in caplog.records if "invalid payload" in r.getMessage())
    assert bad in line and path in line and rule in line
    assert PLANTED not in caplog.text and good not in json.dumps(ledger.invalid())


def test_the_operator_sees_invalid_deliveries_where_the_parked_ones_are_listed(env):
    _, processor, queue, ns = env
    payload, path, _ = wrong_type()
    bad = deliver(queue, "issues", payload)
    work(ns, processor)
    out = CliRunner().invoke(main, ["deliveries", "failed"])
    assert out.exit_code == 0, out.output
    assert "no parked deliveries" in out.output and "1 invalid deliveries" in out.output
    assert bad in out.output and f"invalid at {path} (type)" in out.output
    doc = json.loads(CliRunner().invoke(main, ["deliveries", "failed", "--json"]).output)
    assert [e["delivery"] for e in doc["invalid"]] == [bad] and doc["failed"] == []
    assert PLANTED not in out.output and PLANTED not in json.dumps(doc)


def test_the_receiver_acknowledges_a_signed_invalid_payload_and_the_worker_records_it(env):
    """GitHub gets its 202 (the signature is good); the check is the worker's."""
    _, processor, _, ns = env
    app = create_app(ReceiverSettings(secrets=(b"s3cret",), redis_url=ns.url,
                                      queue_name=ns.queue_name, redis_prefix=ns.prefix),
                     redis=ns.client)
    payload, path, rule = wrong_nested_enum()
    delivery = str(uuid.uuid4())
    answer = signed_post(app.test_client(), json.dumps(payload).encode(), event="issues",
                         secret=b"s3cret", delivery=delivery)
    assert answer.status_code == 202
    work(ns, processor)
    [entry] = processor.deliveries.invalid()
    assert (entry["delivery"], entry["path"], entry["rule"]) == (delivery, path, rule)


def test_an_action_the_schema_does_not_list_is_invalid_at_the_action(env):
    """``installation`` is routed for every action; one the published schema does not
    list for the event is recorded at ``$.action``."""
    _, processor, queue, ns = env
    payload = load_payload("installation", "created")
    payload["action"] = PLANTED
    bad = deliver(queue, "installation", payload)
    work(ns, processor)
    [entry] = processor.deliveries.invalid()
    assert (entry["delivery"], entry["path"], entry["rule"]) == (bad, "$.action", "enum")
    assert entry["action"] is None  # the refused action is payload text
    assert processor.deliveries.failed() == []
    out = CliRunner().invoke(main, ["deliveries", "failed"])
    assert bad in out.output and PLANTED not in out.output


def test_an_invalid_delivery_is_never_retried_even_once(env):
    _, processor, queue, ns = env
    deliver(queue, "issues", missing_required()[0])
    work(ns, processor)
    work(ns, processor)  # a second wake-up finds nothing to do again
    assert len(processor.deliveries.invalid()) == 1
    assert ns.client.zcard(processor.keys.retry) == 0


def test_the_invalid_record_is_bounded(redis_ns):
    from foundation.inbox import dead

    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name)
    ledger = Deliveries(redis_ns.client, settings, RedisStateStore(redis_ns.client,
                                                                   redis_ns.prefix))
    for i in range(dead.INVALID_KEPT + 5):
        ledger.record_invalid(f"{redis_ns.token}-{i}", "issues", "labeled", None, "$", "type")
    kept = ledger.invalid()
    assert len(kept) == dead.INVALID_KEPT and kept[0]["delivery"].endswith(
        f"-{dead.INVALID_KEPT + 4}")


# -- the schemas themselves --------------------------------------------------------------


@pytest.mark.parametrize(
    "event,path", [(e, p) for e, p in fixture_files() if "api.github.com" in p.parts],
    ids=lambda v: v if isinstance(v, str) else f"{v.parent.name}/{v.name}")
def test_every_real_github_com_payload_validates(event, path):
    payload = json.loads(path.read_bytes())
    check = PayloadSchemas().check(event, payload.get("action"), payload)
    assert check.outcome == "valid", check.reason


@pytest.mark.parametrize(
    "event,path", [(e, p) for e, p in fixture_files() if "ghes-35" in p.parts],
    ids=lambda v: v if isinstance(v, str) else f"{v.parent.name}/{v.name}")
def test_github_enterprise_server_payloads_pass_unvalidated(event, path):
    """The vendored schemas describe github.com; GHES 3.5 sends older shapes (see the
    README beside schema.json), so a GHES deployment does not check them."""
    payload = json.loads(path.read_bytes())
    check = PayloadSchemas(enterprise=True).check(event, payload.get("action"), payload)
    assert check.outcome == "unvalidated"


def test_an_event_the_package_has_no_schema_for_passes_unvalidated():
    check = PayloadSchemas().check("sub_issues", "parent_issue_added", {"action": "x"})
    assert check.outcome == "unvalidated" and SCHEMA_VERSION in check.reason


def test_a_path_names_only_what_the_schema_declares():
    """A key the schema does not name (under an open object) is written ``*``; an index
    is kept: the recorded path cannot carry payload text."""
    payload = load_payload("check_run", "created")
    payload["repository"]["custom_properties"] = {PLANTED: 5}  # values: string, list, null
    check = PayloadSchemas().check("check_run", "created", payload)
    assert check.outcome == "invalid" and PLANTED not in (check.path or "")
    assert check.path == "$.repository.custom_properties.*"
    labels = comment_payload("Codertocat", "hi")
    labels["issue"]["labels"][0]["id"] = "x"
    check = PayloadSchemas().check("issue_comment", "created", labels)
    assert (check.path, check.rule) == ("$.issue.labels[0].id", "type")


def test_the_check_leaves_the_payload_as_it_was():
    payload = enrol_payload()
    del payload["issue"]["labels"][0]["description"]
    kept = copy.deepcopy(payload)
    PayloadSchemas().check("issues", "labeled", payload)
    assert payload == kept


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
SCHEMAS = PayloadSchemas()


@settings(max_examples=200, deadline=None)
@given(event=st.sampled_from(["issues", "issue_comment", "pull_request", "push", "status",
                              "check_run", "installation", "nonesuch"]),
       key=st.sampled_from(["issue", "comment", "pull_request", "repository", "sender",
                            "installation", "label", "check_run", "action", "commits"]),
       value=JSON, action=st.one_of(st.none(), st.sampled_from(["labeled", "created",
                                                                 "opened", "x"])))
def test_any_payload_gets_a_verdict_and_a_path_free_of_its_text(event, key, value, action):
    """Whatever the payload, the check answers (never raises), and the path it gives is
    made of the schema's names, ``*`` and indices only."""
    payload = {**enrol_payload(), "action": action, key: value}
    check = SCHEMAS.check(event, action, payload)
    assert check.outcome in ("valid", "invalid", "unvalidated")
    if check.outcome == "invalid":
        steps = re.findall(r"\.([^.\[]+)|\[(\d+)\]", (check.path or "$")[1:])
        assert all(name in SCHEMAS._names or name == "*" or index for name, index in steps)
