"""Who is who, through the worker on the in-process fake GitHub: the-loop's own comments
are known by their marker *and* their author (the App's bot, learned from ``get-app``),
and people by their user id (a login resolved once with ``get-user`` and recorded).
A marker typed by a person is ignored; an account that took a collaborator's freed login
decides nothing and raises the alarm; an indented ``/approve`` is code, no command."""

from __future__ import annotations

from graph.markers import find_effect
from graph.state import Past
from tests.conftest import act_as, load_payload
from tests.workers import test_gate_decisions as decisions
from tests.workers.test_gate_decisions import REF1, REPO, comment, enrol, labelled
from workers.notices import ACCOUNT_ALARM_TEXT, ALARM_TEXT

#: The worker on the in-process fake GitHub (the fixture of the gate decision tests).
make = decisions.make


def by(gh, login, number=1):
    """``(effect id, body)`` of the marked comments ``login`` wrote on ``number``."""
    return [(find_effect(c["body"]), c["body"]) for c in gh.comments(REPO, number)
            if c["user"] == login and find_effect(c["body"])]


def bot_effects(gh, number=1):
    return [effect for effect, _ in by(gh, gh.bot_login, number)]


def plant(gh, effect, login="mallory"):
    """A person posts a comment carrying the-loop's marker for ``effect``."""
    body = f"Nothing to see here.\n\n<!-- the-loop effect={effect} -->"
    return gh.add_comment(REPO, 1, body, user=login), body


def test_a_status_marker_planted_by_a_person_is_not_taken_for_the_status_comment(make):
    gh, slack, store, deliver = make()
    planted, body = plant(gh, f"{REF1}/status")
    enrol(deliver)
    deliver("issue_comment", comment("thanks, looking at it", login="octocat"))
    # The-loop posted its own status comment, once, and kept it current in place.
    assert bot_effects(gh).count(f"{REF1}/status") == 1
    assert gh.find_comment(REPO, planted)["body"] == body  # never edited
    assert f"{REPO}:update-comment:{planted}" not in gh.actions


def test_a_review_request_marker_planted_by_a_person_is_not_the_review_request(make):
    gh, slack, store, deliver = make()
    request = f"{REF1}/requirements-approval/1/request-review"
    planted, body = plant(gh, request)
    enrol(deliver)
    assert store.load(REF1).current_node == "requirements-approval"
    [(effect, text)] = [(e, t) for e, t in by(gh, gh.bot_login) if e == request]
    assert "is waiting for a decision" in text
    assert gh.find_comment(REPO, planted)["body"] == body


def test_a_planted_alarm_marker_does_not_suppress_the_edited_approval_alarm(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    alarm = f"{REF1}/alarm/0/requirements-approval"
    planted, body = plant(gh, alarm)
    edited = labelled(load_payload("issue_comment", "edited"))
    edited["comment"]["body"] = "/approve"
    act_as(edited, "mallory", sender_only=True)  # mallory edits Codertocat's comment
    deliver("issue_comment", edited)
    assert Past.read(store, REF1).decisions == []
    [(effect, text)] = [(e, t) for e, t in by(gh, gh.bot_login) if e == alarm]
    assert ALARM_TEXT in text
    assert gh.find_comment(REPO, planted)["body"] == body


def test_the_apps_own_comments_are_still_recognised_after_its_login_is_learned(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    for n in range(3):
        deliver("issue_comment", comment(f"note {n}", login="octocat"))
    deliver("issue_comment", comment("/approve", cid=901))
    assert [d["node"] for d in Past.read(store, REF1).decisions] == ["requirements-approval"]
    effects = bot_effects(gh)
    assert effects.count(f"{REF1}/status") == 1  # updated in place, never posted twice
    assert effects.count(f"{REF1}/requirements-approval/1/request-review") == 1
    # A marked comment by the App's bot is its own: it never decides, even when it
    # carries a command line and its login is authorized.
    own = comment("/approve\n\n<!-- the-loop effect=x/y/1/z -->", login=gh.bot_login,
                  cid=902)
    own["sender"]["type"] = "User"
    before = list(Past.read(store, REF1).decisions)
    deliver("issue_comment", own)
    assert Past.read(store, REF1).decisions == before


def test_a_decision_records_the_reviewers_user_id(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    deliver("issue_comment", comment("/approve", cid=911))
    [decision] = Past.read(store, REF1).decisions
    assert decision["actor"] == "Codertocat"
    assert decision["reviewer_id"] == gh.user_id("Codertocat")


def test_a_recreated_login_decides_nothing_and_raises_the_alarm(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    first = gh.user_id("Codertocat")
    deliver("issue_comment", comment("reading it now", cid=921))  # id recorded here
    taken = gh.recreate_user("Codertocat")  # the login was freed and taken by another
    assert taken != first
    impostor = act_as(comment("/approve", cid=922), "Codertocat", user_id=taken)
    before = list(gh.actions)
    deliver("issue_comment", impostor)
    state = store.load(REF1)
    assert state.current_node == "requirements-approval" and Past.read(store, REF1).decisions == []
    alarms = [e for e in store.events(REF1) if e.type == "alarm"]
    assert [e.data["kind"] for e in alarms] == ["account-changed"]
    [(effect, text)] = [(e, t) for e, t in by(gh, gh.bot_login) if "/alarm/" in e]
    assert ACCOUNT_ALARM_TEXT in text and effect == alarms[0].data["notice"]
    assert not [a for a in gh.actions[len(before):] if ":add-reaction:" in a]
    # The account the login was recorded for still decides.
    deliver("issue_comment", act_as(comment("/approve", cid=923), "Codertocat",
                                    user_id=first))
    [decision] = Past.read(store, REF1).decisions
    assert decision["reviewer_id"] == first


def test_collaborators_ids_are_recorded_when_the_file_is_read_not_at_first_action(make):
    gh, slack, store, deliver = make()
    enrol(deliver)  # reads collaborators.yaml: Codertocat and octocat are resolved now
    original = gh.user_id("octocat")
    taken = gh.recreate_user("octocat")  # octocat never acted; the login is taken since
    deliver("issue_comment", act_as(comment("/approve", cid=941), "octocat", user_id=taken))
    state = store.load(REF1)
    assert state.current_node == "requirements-approval" and Past.read(store, REF1).decisions == []
    assert [e.data["kind"] for e in store.events(REF1) if e.type == "alarm"] == [
        "account-changed"]
    deliver("issue_comment", act_as(comment("/approve", cid=942), "octocat",
                                    user_id=original))
    assert [d["reviewer_id"] for d in Past.read(store, REF1).decisions] == [original]


def test_a_recreated_login_cannot_retract_the_approval_of_the_login_it_took(make):
    gh, slack, store, deliver = make()
    pr = decisions.pull_request(gh, deliver, store)
    deliver("pull_request_review", decisions.review(pr))  # Codertocat approves
    assert store.load(decisions.REF2).current_node == "design"
    taken = gh.recreate_user("Codertocat")
    impostor = act_as(decisions.review(pr, state="changes_requested", rid=802), "Codertocat",
                      user_id=taken)
    deliver("pull_request_review", impostor)
    state = store.load(decisions.REF2)
    assert state.current_node == "design" and not Past.read(store, decisions.REF2).decisions[0].get(
        "invalidated")
    assert not [e for e in store.events(decisions.REF2) if e.type == "gate.reopened"]


def test_an_indented_code_block_holding_approve_is_no_command(make):
    gh, slack, store, deliver = make()
    enrol(deliver)
    deliver("issue_comment", comment("Try this:\n\n    /approve\n", cid=931))
    deliver("issue_comment", comment("\t/approve", cid=932))
    state = store.load(REF1)
    assert state.current_node == "requirements-approval" and Past.read(store, REF1).decisions == []
    deliver("issue_comment", comment("   /approve", cid=933))  # three spaces: a command
    assert [d["node"] for d in Past.read(store, REF1).decisions] == ["requirements-approval"]
