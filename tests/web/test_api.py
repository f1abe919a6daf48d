"""The read API under ``/api/v1/`` on the receiver's app, over a seeded deployment in the
real Redis: authentication first, then filters, pagination, the work item's detail, the
``the-loop.graph/v1`` envelope and its limits, the event log, parked deliveries; every
answer the same bytes for the same state, and none holding text a person wrote or a
credential."""

from __future__ import annotations

import hashlib
import json
import urllib.parse

import pytest

import graph.envelope as envelope_module
from foundation.links import api_path
from graph.envelope import SCHEMA, Limits
from tests.conftest import load_fixture, signed_post
from tests.web.conftest import OTHER_TOKEN, TOKEN, WEBHOOK_SECRET, make_site
from tests.web.seed import (
    APPROVAL_COMMENT,
    AT_GATE,
    COMMENT_TEXT,
    FORCE_REASON,
    FORCED,
    PARKED,
    WORKING,
)

ROUTES = ["/api/v1/", "/api/v1/work-items", api_path(AT_GATE), api_path(AT_GATE, "graph"),
          api_path(AT_GATE, "events"), "/api/v1/deliveries/failed"]


def body(response) -> dict:
    assert response.status_code == 200, response.data
    return json.loads(response.data)


# -- authentication ---------------------------------------------------------------------


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer not-a-token-of-this-deployment-at-all"},
    {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer "},
    {"Cookie": "the_loop_session=forged.value.sig"},
], ids=["none", "wrong-token", "wrong-scheme", "empty", "forged-cookie"])
def test_without_credentials_every_route_answers_401_and_no_data(site, headers):
    for route in ROUTES:
        response = site.client.get(route, headers=headers)
        assert response.status_code == 401, route
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="the-loop"'
        doc = json.loads(response.data)
        assert set(doc) == {"ok", "error"} and doc["ok"] is False
        assert "THE_LOOP_API_TOKENS" in doc["error"]
        assert b"acme" not in response.data


def test_each_configured_token_and_a_token_given_by_its_digest_is_accepted(redis_ns, seeded):
    digest = hashlib.sha256(b"a-token-held-only-as-its-digest-0001").hexdigest()
    site = make_site(redis_ns, seeded, THE_LOOP_API_TOKENS=f"{TOKEN}, sha256:{digest}")
    assert site.get("/api/v1/work-items").status_code == 200
    assert site.get("/api/v1/work-items",
                    token="a-token-held-only-as-its-digest-0001").status_code == 200
    assert site.get("/api/v1/work-items", token=OTHER_TOKEN).status_code == 401
    assert site.get("/api/v1/work-items", token=TOKEN[:-1]).status_code == 401


def test_with_no_token_configured_the_answer_says_what_to_set(redis_ns, seeded):
    site = make_site(redis_ns, seeded, THE_LOOP_API_TOKENS="")
    doc = json.loads(site.get("/api/v1/work-items").data)
    assert doc["error"].startswith("authentication required: no way to sign in is "
                                   "configured: set THE_LOOP_API_TOKENS")


def test_the_receiver_is_untouched_beside_the_api(site):
    answer = signed_post(site.client, load_fixture("issues", "opened"), event="issues",
                         secret=WEBHOOK_SECRET)
    assert answer.status_code == 202
    assert site.client.get("/healthz").status_code == 200
    assert site.get("/webhook").status_code == 405  # the API's token opens nothing else


# -- the listing ------------------------------------------------------------------------


def test_work_items_are_listed_newest_first_with_phase_status_and_links(site):
    doc = body(site.get("/api/v1/work-items"))
    assert [w["ref"] for w in doc["work_items"]] == [FORCED, WORKING, AT_GATE]
    assert (doc["total"], doc["page"], doc["per_page"], doc["pages"]) == (3, 1, 30, 1)
    gate = doc["work_items"][2]
    assert (gate["node"], gate["phase"], gate["status"]) == (
        "design-approval", "design-approval", "waiting")
    assert gate["links"] == {
        "ui": "/ui/work-items/github:acme/widgets%231",
        "api": "/api/v1/work-items/github:acme/widgets%231",
        "graph": "/api/v1/work-items/github:acme/widgets%231/graph",
        "events": "/api/v1/work-items/github:acme/widgets%231/events",
        "github": "https://github.com/acme/widgets/issues/1"}
    assert doc["work_items"][0]["held_by_delivery"] == PARKED


@pytest.mark.parametrize(("query", "refs"), [
    ("repository=acme/widgets", [WORKING, AT_GATE]),
    ("repository=ACME/gadgets", [FORCED]),
    ("phase=design-approval", [AT_GATE]),
    ("phase=requirements", [WORKING]),
    ("status=working", [WORKING]),
    ("status=waiting&repository=acme/widgets", [AT_GATE]),
    ("status=done", []),
])
def test_filters(site, query, refs):
    doc = body(site.get(f"/api/v1/work-items?{query}"))
    assert [w["ref"] for w in doc["work_items"]] == refs
    assert doc["total"] == len(refs)


def test_pages(site):
    pages = [body(site.get(f"/api/v1/work-items?per_page=2&page={n}")) for n in (1, 2, 3)]
    assert [[w["ref"] for w in p["work_items"]] for p in pages] == [[FORCED, WORKING],
                                                                   [AT_GATE], []]
    assert {(p["total"], p["pages"]) for p in pages} == {(3, 2)}


@pytest.mark.parametrize(("query", "named"), [
    ("page=0", "page must be a whole number from 1"),
    ("per_page=101", "per_page must be a whole number from 1 to 100"),
    ("per_page=x", "per_page"),
    ("status=stuck", "status must be one of active, waiting, working, blocked, escalated, done"),
    ("phase=<script>", "phase must be one of requirements, requirements-approval, design"),
    ("repository=not a repo", "repository must be OWNER/REPO"),
])
def test_a_bad_parameter_is_400_naming_it_and_never_echoing_it(site, query, named):
    response = site.get(f"/api/v1/work-items?{query}")
    assert response.status_code == 400
    error = json.loads(response.data)["error"]
    assert named in error
    assert "<script>" not in error and "not a repo" not in error


def test_a_bad_or_unknown_ref_is_a_clear_400_or_404(site):
    bad = site.get("/api/v1/work-items/acme%2Fwidgets%231")
    assert bad.status_code == 400
    assert "github:OWNER/REPO#N with its # written %23" in json.loads(bad.data)["error"]
    for route in ("", "/graph", "/events"):
        missing = site.get(f"/api/v1/work-items/github:acme/widgets%2399{route}")
        assert missing.status_code == 404
        assert json.loads(missing.data)["error"] == ("no such work item (see "
                                                     "/api/v1/work-items)")


# -- one work item ----------------------------------------------------------------------


def test_the_detail_says_where_it_is_and_how_it_got_there(site):
    item = body(site.get(api_path(AT_GATE)))
    assert (item["node"], item["status"], item["actor"]) == ("design-approval", "waiting",
                                                             "human")
    assert item["parked_reason"] == ("exit hook classify-feedback: waiting for a decision "
                                     "from role approver")
    assert item["visits"] == {"design": 1, "design-approval": 1, "requirements": 1,
                              "requirements-approval": 1}
    [decision] = item["decisions"]
    assert {k: decision[k] for k in ("node", "outcome", "actor", "source", "comment_id")} == {
        "node": "requirements-approval", "outcome": "approved", "actor": "alice",
        "source": "comment", "comment_id": APPROVAL_COMMENT}
    assert decision["link"] == (f"https://github.com/acme/widgets/issues/1"
                                f"#issuecomment-{APPROVAL_COMMENT}")
    assert decision["body_sha256"] == hashlib.sha256(COMMENT_TEXT.encode()).hexdigest()
    assert decision["at"].endswith("Z")
    exits = [(h["hook"], h["status"]) for h in item["hooks"] if h["boundary"] == "exit"]
    assert exits == [("classify-feedback", "wait"), ("record-feedback", "not-run"),
                     ("record-decision", "not-run"), ("log-entry", "not-run")]
    assert [h["messages"] for h in item["hooks"] if h["hook"] == "classify-feedback"] == [[{
        "text": "waiting for a decision from role approver", "path": None,
        "code": "awaiting-decision"}]]
    [requirements, design] = item["sessions"]
    assert requirements["nodes"] == ["requirements", "requirements-approval"]
    assert [(t["node"], t["number"], t["status"], t["cost_usd"], t["seconds"])
            for t in requirements["turns"]] == [("requirements", 1, "completed", 0.12, 95.0),
                                               ("requirements", 2, "completed", 0.31, 140.0)]
    assert (requirements["turn_count"], requirements["cost_usd"]) == (2, 0.43)
    assert design["nodes"] == ["design", "design-approval"]
    assert item["spend"]["cost_usd"] == pytest.approx(0.87)
    assert [h["node"] for h in item["history"]] == [
        "requirements", "requirements-approval", "design", "design-approval"]


def test_the_blocked_turn_and_the_running_one_are_the_sessions_turns(site):
    item = body(site.get(api_path(WORKING)))
    [session] = item["sessions"]
    assert [(t["number"], t["status"]) for t in session["turns"]] == [(1, "completed"),
                                                                    (2, "running")]
    [validate] = [h for h in item["hooks"] if h["hook"] == "validate-artifacts"]
    assert validate["status"] == "block"
    assert [m["path"] for m in validate["messages"]] == ["specs/2/requirements.md"]


def test_a_forced_move_and_the_delivery_holding_the_item_are_shown_without_free_text(site):
    item = body(site.get(api_path(FORCED)))
    [move] = item["forced"]
    assert {k: move[k] for k in ("from", "to", "bypassed", "undeclared", "operator")} == {
        "from": "requirements", "to": "design", "bypassed": ["requirements-approval"],
        "undeclared": True, "operator": "ops"}
    assert move["reason_sha256"] == hashlib.sha256(FORCE_REASON.encode()).hexdigest()
    assert item["held_by"]["delivery"] == PARKED
    assert item["held_by"]["retry"] == f"the-loop deliveries retry {PARKED}"


def test_events_are_the_log_in_order_metadata_only_and_paged(site):
    doc = body(site.get(api_path(FORCED, "events")))
    types = [e["type"] for e in doc["events"]]
    assert types[:3] == ["delivery.received", "node.entered", "work-item.enrolled"]
    assert "work-item.forced" in types and types[-1] == "delivery.parked"
    assert [e["seq"] for e in doc["events"]] == list(range(1, len(types) + 1))
    forced = next(e for e in doc["events"] if e["type"] == "work-item.forced")
    assert "reason" not in forced["data"]
    assert forced["data"]["reason_sha256"] == hashlib.sha256(FORCE_REASON.encode()).hexdigest()
    page = body(site.get(api_path(FORCED, "events") + "?after=2&limit=3"))
    assert [e["seq"] for e in page["events"]] == [3, 4, 5]
    assert (page["next_after"], page["total"]) == (5, len(types))
    last = body(site.get(api_path(FORCED, "events") + f"?after={len(types) - 1}"))
    assert [e["seq"] for e in last["events"]] == [len(types)] and last["next_after"] is None


# -- the graph envelope -----------------------------------------------------------------


def test_the_graph_envelope_is_the_versioned_path_of_the_work_item(site):
    doc = body(site.get(api_path(AT_GATE, "graph")))
    assert doc["schema"] == SCHEMA == "the-loop.graph/v1"
    assert doc["subject"] == f"the-loop/work-item/{AT_GATE}"
    assert doc["limits"] == {"nodes": 250, "edges": 500, "events": 500, "bytes": 1048576}
    ids = [n["id"] for n in doc["nodes"]]
    assert ids == sorted(ids)
    assert {n["data_classification"] for n in doc["nodes"]} == {"metadata_only"}
    kinds = {n["kind"] for n in doc["nodes"]}
    assert kinds == {"work-item", "node", "session", "decision"}
    nodes = {n["id"]: n for n in doc["nodes"]}
    for edge in doc["edges"]:  # no dangling edge
        assert edge["source"] in nodes and edge["target"] in nodes
    for event in doc["events"]:
        assert event["subject"] in nodes
    [at] = [e for e in doc["edges"] if e["kind"] == "at"]
    assert at["target"] == "the-loop/node/design-approval"
    assert nodes["the-loop/node/design-approval"]["attributes"]["current"] is True
    taken = {(e["source"], e["target"], e["attributes"]["on"]): e["attributes"]["taken"]
             for e in doc["edges"] if e["kind"] == "routes_to"}
    assert taken[("the-loop/node/requirements-approval", "the-loop/node/design",
                  "approved")] == 1
    assert taken[("the-loop/node/design-approval", "the-loop/node/tasks", "approved")] == 0
    [decision] = [n for n in doc["nodes"] if n["kind"] == "decision"]
    assert decision["attributes"]["outcome"] == "approved"
    assert [e["seq"] for e in doc["events"]] == list(range(1, len(doc["events"]) + 1))


def test_forced_moves_are_edges_and_nothing_dangles_even_off_the_graph(site):
    doc = body(site.get(api_path(FORCED, "graph")))
    [forced] = [e for e in doc["edges"] if e["kind"] == "forced"]
    assert (forced["source"], forced["target"]) == ("the-loop/node/requirements",
                                                    "the-loop/node/design")
    assert forced["attributes"]["bypassed"] == ["requirements-approval"]
    assert "reason" not in forced["attributes"] and forced["attributes"]["reason_sha256"]


def test_since_leaves_out_the_earlier_events(site):
    doc = body(site.get(api_path(AT_GATE, "graph") + "?since=20"))
    assert doc["events"][0]["seq"] == 21 and doc["events_since"] == 20


def test_past_a_limit_the_envelope_is_a_clear_422(site, monkeypatch):
    monkeypatch.setattr(envelope_module, "LIMITS", Limits(events=10))
    import the_loop.web.readmodel as readmodel

    monkeypatch.setattr(readmodel, "LIMITS", Limits(events=10))
    response = site.get(api_path(AT_GATE, "graph"))
    assert response.status_code == 422
    error = json.loads(response.data)["error"]
    assert error.startswith(f"the graph of {AT_GATE} has 34 events, over the limit of 10 ")
    assert "?since=SEQ" in error
    assert site.get(api_path(AT_GATE, "graph") + "?since=25").status_code == 200
    monkeypatch.setattr(readmodel, "LIMITS", Limits(nodes=5))
    error = json.loads(site.get(api_path(AT_GATE, "graph")).data)["error"]
    assert "nodes, over the limit of 5" in error
    monkeypatch.setattr(readmodel, "LIMITS", Limits(bytes=2000))
    assert "bytes, over the limit of 2000" in json.loads(
        site.get(api_path(AT_GATE, "graph")).data)["error"]


# -- deliveries -------------------------------------------------------------------------


def test_failed_deliveries_carry_the_exact_retry_command(site):
    doc = body(site.get("/api/v1/deliveries/failed"))
    [parked] = doc["failed"]
    assert parked["delivery"] == PARKED and parked["work_item"] == FORCED
    assert parked["retry"] == f"the-loop deliveries retry {PARKED}"
    assert parked["discard"] == f"the-loop deliveries discard {PARKED}"
    assert (parked["attempts"], parked["payload_kept"], parked["event"]) == (
        5, True, "issue_comment")
    assert parked["links"]["ui"] == "/ui/work-items/github:acme/gadgets%233"


# -- determinism and privacy ------------------------------------------------------------


def test_every_answer_is_the_same_bytes_for_the_same_state(redis_ns, site):
    first = {route: site.get(route).data for route in ROUTES}
    again = make_site(redis_ns, site.seeded)  # another process's app over the same Redis
    assert {route: again.get(route).data for route in ROUTES} == first
    response = site.get(api_path(AT_GATE, "graph"))
    etag = response.headers["ETag"]
    assert etag == f'"{hashlib.sha256(response.data).hexdigest()[:32]}"'
    cached = site.get(api_path(AT_GATE, "graph"), headers={"If-None-Match": etag})
    assert (cached.status_code, cached.data) == (304, b"")
    site.seeded.approve_design()
    changed = site.get(api_path(AT_GATE, "graph"), headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.data != first[api_path(AT_GATE, "graph")]


def secrets_and_text(site) -> list[str]:
    return [COMMENT_TEXT, "budget is 41923", FORCE_REASON, "incident 77311", TOKEN,
            OTHER_TOKEN, WEBHOOK_SECRET]


def test_no_answer_holds_comment_text_an_operator_reason_a_token_or_a_secret(site):
    routes = list(ROUTES)
    for ref in (AT_GATE, WORKING, FORCED):
        routes += [api_path(ref), api_path(ref, "graph"), api_path(ref, "events")]
    routes += ["/api/v1/work-items?per_page=1&page=2"]
    for route in routes:
        text = site.get(route).data.decode()
        decoded = urllib.parse.unquote(text)
        for needle in secrets_and_text(site):
            assert needle not in text and needle not in decoded, (route, needle)


def test_the_cli_exports_the_same_envelope_bytes_as_the_api(site, redis_ns, monkeypatch):
    from click.testing import CliRunner

    from the_loop.cli import main

    for name in ("REDIS_URL", "THE_LOOP_REDIS_PREFIX", "THE_LOOP_QUEUE"):
        monkeypatch.setenv(name, site.env[name])
    monkeypatch.setenv("THE_LOOP_GITHUB_TRANSPORT", "none")
    out = CliRunner().invoke(main, ["graph", "export", "--format", "envelope", "--work-item",
                                    AT_GATE])
    assert out.exit_code == 0, out.output
    assert out.output.encode() == site.get(api_path(AT_GATE, "graph")).data
    refused = CliRunner().invoke(main, ["graph", "export", "--format", "envelope"])
    assert refused.exit_code == 2 and "--format envelope needs --work-item REF" in refused.output
