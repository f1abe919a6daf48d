"""The dashboard under ``/ui/`` through Flask's test client, over the seeded deployment:
signing in with a token (the cookie's attributes, cross-site posts refused, sessions of a
removed token ended), the board, a work item's page, the failed deliveries with the
exact retry command, the refresh of a page's main part, and no text a person wrote or
credential on any page. (A real browser: test_browser.py.)"""

from __future__ import annotations

import re
import time
import urllib.parse

import pytest

from foundation.links import work_item_path
from tests.web.conftest import OTHER_TOKEN, TOKEN, make_site
from tests.web.seed import AT_GATE, COMMENT_TEXT, FORCE_REASON, FORCED, PARKED, WORKING

BASE = "https://loop.test"  # the session cookie is Secure: the client keeps it for https


def sign_in(site, token: str = TOKEN, next_path: str = "/ui/"):
    return site.client.post("/ui/login", base_url=BASE, data={"token": token, "next": next_path},
                            headers={"Origin": BASE})


def page(site, path: str, **kwargs) -> str:
    response = site.client.get(path, base_url=BASE, **kwargs)
    assert response.status_code == 200, (path, response.status_code, response.data[:300])
    return response.data.decode()


def test_pages_send_people_to_sign_in_and_the_sign_in_page_shows_no_data(site):
    for path in ("/ui/", work_item_path(AT_GATE), "/ui/deliveries/failed"):
        response = site.client.get(path, base_url=BASE)
        assert response.status_code == 302
        assert response.headers["Location"] == "/ui/login?" + urllib.parse.urlencode(
            {"next": path})
    login = page(site, "/ui/login?next=/ui/deliveries/failed")
    assert 'name="token"' in login and 'value="/ui/deliveries/failed"' in login
    assert "acme" not in login and "Sign in with GitHub" not in login  # no client id


def test_a_token_signs_in_with_a_secure_httponly_lax_cookie_that_opens_the_api_too(site):
    response = sign_in(site, next_path=work_item_path(AT_GATE))
    assert response.status_code == 303
    assert response.headers["Location"] == work_item_path(AT_GATE)
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("the_loop_session=")
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"secure", "httponly", "samesite", "path", "max-age", "expires"} <= attributes
    assert "SameSite=Lax" in cookie and "Path=/" in cookie and "Max-Age=28800" in cookie
    assert TOKEN not in cookie
    assert page(site, "/ui/").count('class="card"') == 3
    assert site.client.get("/api/v1/work-items", base_url=BASE).status_code == 200
    assert site.client.post("/ui/logout", base_url=BASE,
                            headers={"Origin": BASE}).status_code == 303
    assert site.client.get("/ui/", base_url=BASE).status_code == 302


def test_a_wrong_token_a_foreign_next_and_a_cross_site_post_are_refused(site):
    wrong = sign_in(site, token="not-one-of-the-tokens-0000000")
    assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers
    assert "That token is not one of THE_LOOP_API_TOKENS." in wrong.data.decode()
    forged = site.client.post("/ui/login", base_url=BASE, data={"token": TOKEN},
                              headers={"Origin": "https://evil.example"})
    assert forged.status_code == 403 and "Set-Cookie" not in forged.headers
    behind_tls_proxy = site.client.post("/ui/login", base_url="http://loop.test",
                                        data={"token": TOKEN}, headers={"Origin": BASE})
    assert behind_tls_proxy.status_code == 303
    for target in ("https://evil.example/", "//evil.example/ui/", "/elsewhere"):
        assert sign_in(site, next_path=target).headers["Location"] == "/ui/"


def test_a_next_with_a_line_break_is_a_400_not_a_500(site):
    for target in ("/ui/\r\nSet-Cookie: x=1", "/ui/\nx", "/ui/\x00"):
        answer = sign_in(site, next_path=target)
        assert answer.status_code == 400, (target, answer.status_code)
        assert "Set-Cookie" not in answer.headers
        assert "not a dashboard path" in answer.data.decode()
        assert "x=1" not in answer.data.decode()  # the value is never echoed
    login = page(site, "/ui/login?next=" + urllib.parse.quote("/ui/\r\nx"))
    assert "\r\nx" not in login


def test_removing_a_token_from_the_settings_ends_its_sessions(redis_ns, site):
    sign_in(site, token=OTHER_TOKEN)
    cookie = site.client.get_cookie("the_loop_session", domain="loop.test").value
    assert page(site, "/ui/")
    narrower = make_site(redis_ns, site.seeded, THE_LOOP_API_TOKENS=TOKEN)
    narrower.client.set_cookie("the_loop_session", cookie, domain="loop.test")
    assert narrower.client.get("/ui/", base_url=BASE).status_code == 302


def test_a_session_ends_after_its_lifetime(redis_ns, seeded):
    site = make_site(redis_ns, seeded, THE_LOOP_UI_SESSION_TTL="1")
    sign_in(site)
    assert site.client.get("/ui/", base_url=BASE).status_code == 200
    time.sleep(2.1)
    assert site.client.get("/ui/", base_url=BASE).status_code == 302


def test_the_board_groups_work_items_by_phase_in_the_graphs_order(site):
    sign_in(site)
    html = page(site, "/ui/")
    phases = re.findall(r'<h2 id="phase-\d+">([^<]+?) <span', html)
    assert phases[:4] == ["requirements", "requirements-approval", "design", "design-approval"]
    assert phases[-1] == "done"
    sections = re.split(r'<section class="column"', html)[1:]
    where = {}
    for section in sections:
        phase = re.search(r'<h2 id="phase-\d+">([^<]+?) <span', section).group(1)
        for ref in re.findall(r'data-ref="([^"]+)"', section):
            where[ref] = phase
    assert where == {AT_GATE: "design-approval", WORKING: "requirements", FORCED: "design"}
    filtered = page(site, "/ui/?status=working")
    assert re.findall(r'data-ref="([^"]+)"', filtered) == [WORKING]
    assert "1 work item." in filtered
    assert site.client.get("/ui/?status=nonsense", base_url=BASE).status_code == 400


def test_the_work_item_page_draws_the_graph_and_lists_hooks_decisions_sessions_events(site):
    sign_in(site)
    html = page(site, work_item_path(AT_GATE))
    assert '<pre class="mermaid" data-current="design-approval">flowchart TD' in html
    assert "class n_design_approval current" in html
    assert "n_requirements_approval --&gt;|approved| n_design" in html  # text of the <pre>
    assert "Exit hooks of design-approval" in html
    assert "waiting for a decision from role approver" in html
    assert ('href="https://github.com/acme/widgets/issues/1#issuecomment-90001">the comment '
            'on GitHub</a>') in html
    assert html.count("<tr><td>requirements</td><td>") == 2  # the requirements session's turns
    events = len(site.seeded.store.events(AT_GATE))
    assert html.count('<li class="event"') == events
    assert f'data-seq="{events}"' in html.split('<li class="event"')[1]  # newest first
    forced = page(site, work_item_path(FORCED))
    assert "class n_design forced" in forced
    assert "Forced moves" in forced and "requirements → design" in forced
    assert f"the-loop deliveries retry {PARKED}" in forced


def test_the_failed_deliveries_page_shows_the_exact_retry_command(site):
    sign_in(site)
    html = page(site, "/ui/deliveries/failed")
    assert f'<code class="cmd">the-loop deliveries retry {PARKED}</code>' in html
    assert f'data-copy="the-loop deliveries retry {PARKED}"' in html
    assert f"the-loop deliveries discard {PARKED}" in html
    assert 'href="/ui/work-items/github:acme/gadgets%233"' in html


def test_a_refresh_gets_the_main_part_alone_and_304_until_the_state_changes(site):
    sign_in(site)
    path = work_item_path(AT_GATE)
    full = site.client.get(path, base_url=BASE)
    etag = full.headers["ETag"]
    assert f'data-etag="&quot;{etag.strip(chr(34))}&quot;"' in full.data.decode()
    refresh = {"X-The-Loop-Refresh": "1"}
    part = site.client.get(path, base_url=BASE, headers=refresh)
    assert part.status_code == 200 and part.headers["ETag"] == etag
    assert not part.data.lstrip().startswith(b"<!doctype") and b"<h1>" in part.data
    same = site.client.get(path, base_url=BASE, headers={**refresh, "If-None-Match": etag})
    assert same.status_code == 304
    site.seeded.approve_design()
    moved = site.client.get(path, base_url=BASE, headers={**refresh, "If-None-Match": etag})
    assert moved.status_code == 200 and b"At node <strong>tasks</strong>" in moved.data
    site.client.post("/ui/logout", base_url=BASE, headers={"Origin": BASE})
    assert site.client.get(path, base_url=BASE, headers=refresh).status_code == 401


def test_pages_forbid_scripts_from_elsewhere_and_the_receiver_keeps_its_headers(site):
    sign_in(site)
    response = site.client.get("/ui/", base_url=BASE)
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp
    assert "http" not in csp.replace("'self'", "")
    assert "Content-Security-Policy" not in site.client.get("/healthz").headers


def test_mermaid_is_served_from_the_vendored_npm_package(site):
    from pathlib import Path

    settings = site.app.extensions["the_loop.web"].settings.dashboard
    installed = Path(settings.mermaid_dir, "node_modules/mermaid/dist/mermaid.min.js")
    if not installed.is_file():
        pytest.fail(f"{installed} is missing: run make venv (tools/mermaid)")
    response = site.client.get("/ui/vendor/mermaid.min.js", base_url=BASE)
    assert response.status_code == 200 and response.mimetype == "text/javascript"
    assert response.data[:2000] == installed.read_bytes()[:2000]
    response.close()
    assert site.client.get("/ui/vendor/other.js", base_url=BASE).status_code == 404


def test_no_page_holds_comment_text_an_operator_reason_or_a_credential(site):
    sign_in(site)
    paths = ["/ui/", "/ui/deliveries/failed", "/ui/login"] + [
        work_item_path(ref) for ref in (AT_GATE, WORKING, FORCED)]
    for path in paths:
        html = page(site, path)
        for needle in (COMMENT_TEXT, "budget is 41923", FORCE_REASON, "incident 77311", TOKEN,
                       OTHER_TOKEN, site.env["THE_LOOP_WEBHOOK_SECRET"]):
            assert needle not in html, (path, needle)


def test_a_long_timeline_shows_the_newest_events_and_points_to_the_rest(site, monkeypatch):
    import the_loop.web.ui as ui

    monkeypatch.setattr(ui, "TIMELINE_LIMIT", 5)
    sign_in(site)
    html = page(site, work_item_path(AT_GATE))
    events = len(site.seeded.store.events(AT_GATE))
    assert re.findall(r'<li class="event" data-seq="(\d+)"', html) == [
        str(n) for n in range(events, events - 5, -1)]
    assert f"{events - 5} earlier events:" in html
    assert 'href="/api/v1/work-items/github:acme/widgets%231/events"' in html


def test_a_hooks_refusal_is_shown_in_the_notes_and_the_timeline(site):
    """Given a work item whose hook noted a Jira refusal (``hook.notes``, and a note of the
    status comment)
    When its page is opened
    Then the refusal, with Jira's reason, is in its notes and its timeline."""
    store = site.seeded.store
    state = store.load(AT_GATE)
    text = "Jira transition-issue on ABC-125 failed (refused): no transition 'In Review'"
    state.note("jira-failed", f"set-phase-label: {text}")
    store.save(state)
    store.append_event(AT_GATE, "hook.notes", {"hook": "set-phase-label", "code": "jira-failed",
                                                "node": state.current_node, "note": text})
    sign_in(site)
    html = page(site, work_item_path(AT_GATE))
    notes = html[html.index("<dt>Notes</dt>"):html.index("</dd>", html.index("<dt>Notes</dt>"))]
    assert "no transition &#39;In Review&#39;" in notes
    timeline = html[html.index('id="timeline"'):]
    assert "hook.notes" in timeline and "no transition &#39;In Review&#39;" in timeline
