""""Sign in with GitHub" against the loopback fake GitHub (the_loop/sandbox/fakegithub/http/
served on 127.0.0.1): the App's web flow with its client id and secret, then the
organization or team membership check; the session cookie is Secure, HttpOnly and
SameSite=Lax; a non-member, a forged state and a refused authorization get no session."""

from __future__ import annotations

import urllib.parse

import pytest
import requests

from foundation.settings import Settings, SettingsError
from tests.web.conftest import make_site
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

PUBLIC = "https://loop.test"
CLIENT_ID, CLIENT_SECRET = "Iv1.0123456789abcdef", "client-secret-of-the-app-0001"


@pytest.fixture
def fake():
    fake = HttpFakeGitHub()
    fake.add_oauth_app(CLIENT_ID, CLIENT_SECRET)
    fake.add_member("acme", "alice")
    fake.add_member("acme", "bob", team="reviewers")
    fake.add_member("acme", "carol", state="pending")
    url, stop = serve(fake)
    yield fake, url
    stop()


def oauth_site(redis_ns, seeded, url: str, members: str = "acme"):
    return make_site(redis_ns, seeded, THE_LOOP_GITHUB_API_URL=url,
                     THE_LOOP_GITHUB_CLIENT_ID=CLIENT_ID,
                     THE_LOOP_GITHUB_CLIENT_SECRET=CLIENT_SECRET,
                     THE_LOOP_UI_GITHUB_MEMBERS=members, THE_LOOP_PUBLIC_URL=PUBLIC)


def sign_in(site, fake, login: str | None, next_path: str = "/ui/deliveries/failed"):
    """The browser's part of the flow: the-loop -> GitHub's authorize page -> back."""
    fake.sign_in_as(login)
    start = site.client.get(f"/ui/auth/github?next={next_path}", base_url=PUBLIC)
    assert start.status_code == 302
    authorize = start.headers["Location"]
    cookie = start.headers["Set-Cookie"]
    github = requests.get(authorize, allow_redirects=False, timeout=10)
    assert github.status_code == 302
    back = urllib.parse.urlsplit(github.headers["Location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == f"{PUBLIC}/ui/auth/github/callback"
    return authorize, cookie, site.client.get(f"{back.path}?{back.query}", base_url=PUBLIC)


def test_a_member_of_the_organization_signs_in_and_the_session_cookie_is_locked_down(
        redis_ns, seeded, fake):
    fake, url = fake
    site = oauth_site(redis_ns, seeded, url)
    assert "Sign in with GitHub" in site.client.get("/ui/login", base_url=PUBLIC).data.decode()
    authorize, state_cookie, done = sign_in(site, fake, "alice")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorize).query)
    assert authorize.startswith(f"{url}/login/oauth/authorize?")
    assert query["client_id"] == [CLIENT_ID]
    assert query["redirect_uri"] == [f"{PUBLIC}/ui/auth/github/callback"]
    assert len(query["state"][0]) >= 30
    assert "HttpOnly" in state_cookie and "Secure" in state_cookie
    assert done.status_code == 303 and done.headers["Location"] == "/ui/deliveries/failed"
    session = next(c for c in done.headers.getlist("Set-Cookie")
                   if c.startswith("the_loop_session="))
    assert "Secure" in session and "HttpOnly" in session and "SameSite=Lax" in session
    assert "ghu_" not in session and CLIENT_SECRET not in session
    board = site.client.get("/ui/", base_url=PUBLIC)
    assert board.status_code == 200 and "alice" in board.data.decode()
    assert site.client.get("/api/v1/work-items", base_url=PUBLIC).status_code == 200
    paths = [r.path for r in fake.requests]
    assert paths == ["/login/oauth/authorize", "/login/oauth/access_token", "/user",
                     "/user/memberships/orgs/acme"]
    assert all(r.auth == "token" for r in fake.requests[2:])


def test_a_team_member_signs_in_where_only_the_team_is_allowed(redis_ns, seeded, fake):
    fake, url = fake
    site = oauth_site(redis_ns, seeded, url, members="acme/reviewers")
    assert sign_in(site, fake, "bob")[2].status_code == 303
    assert fake.requests[-1].path == "/orgs/acme/teams/reviewers/memberships/bob"


@pytest.mark.parametrize("login", ["mallory", "carol"], ids=["stranger", "pending"])
def test_someone_not_an_active_member_gets_403_and_no_session(redis_ns, seeded, fake, login):
    fake, url = fake
    site = oauth_site(redis_ns, seeded, url, members="acme,acme/reviewers")
    done = sign_in(site, fake, login)[2]
    assert done.status_code == 403
    assert f"@{login} is not a member" in done.data.decode()
    assert not any(c.startswith("the_loop_session=") for c in done.headers.getlist("Set-Cookie"))
    assert site.client.get("/ui/", base_url=PUBLIC).status_code == 302


def test_a_refused_authorization_or_a_forged_state_starts_no_session(redis_ns, seeded, fake):
    fake, url = fake
    site = oauth_site(redis_ns, seeded, url)
    refused = sign_in(site, fake, None)[2]
    assert refused.status_code == 400 and "did not complete" in refused.data.decode()
    fake.sign_in_as("alice")
    start = site.client.get("/ui/auth/github", base_url=PUBLIC)
    github = requests.get(start.headers["Location"], allow_redirects=False, timeout=10)
    back = urllib.parse.urlsplit(github.headers["Location"])
    code = urllib.parse.parse_qs(back.query)["code"][0]
    forged = site.client.get(f"{back.path}?code={code}&state=attacker-chosen", base_url=PUBLIC)
    assert forged.status_code == 400
    assert site.client.get("/ui/", base_url=PUBLIC).status_code == 302
    other = make_site(redis_ns, seeded, THE_LOOP_GITHUB_API_URL=url,
                      THE_LOOP_GITHUB_CLIENT_ID=CLIENT_ID,
                      THE_LOOP_GITHUB_CLIENT_SECRET="not-the-secret-of-the-app-0000",
                      THE_LOOP_UI_GITHUB_MEMBERS="acme", THE_LOOP_PUBLIC_URL=PUBLIC)
    failed = sign_in(other, fake, "alice")[2]
    assert failed.status_code == 502
    assert "(incorrect_client_credentials)" in failed.data.decode()


def test_the_fake_exchanges_a_code_once_and_answers_memberships_as_github_does(fake):
    fake, url = fake
    fake.sign_in_as("alice")
    redirect = "https://loop.test/cb"
    got = requests.get(f"{url}/login/oauth/authorize", params={
        "client_id": CLIENT_ID, "redirect_uri": redirect, "state": "s1"},
        allow_redirects=False, timeout=10)
    code = urllib.parse.parse_qs(urllib.parse.urlsplit(got.headers["Location"]).query)["code"][0]
    form = {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "code": code,
            "redirect_uri": redirect}
    first = requests.post(f"{url}/login/oauth/access_token", data=form,
                          headers={"Accept": "application/json"}, timeout=10).json()
    again = requests.post(f"{url}/login/oauth/access_token", data=form,
                          headers={"Accept": "application/json"}, timeout=10).json()
    assert first["access_token"].startswith("ghu_") and again == {"error": "bad_verification_code"}
    auth = {"Authorization": f"token {first['access_token']}"}
    assert requests.get(f"{url}/user", headers=auth, timeout=10).json()["login"] == "alice"
    assert requests.get(f"{url}/api/v3/user/memberships/orgs/acme", headers=auth,
                        timeout=10).json()["state"] == "active"
    assert requests.get(f"{url}/user/memberships/orgs/other", headers=auth,
                        timeout=10).status_code == 404
    assert requests.get(f"{url}/user", timeout=10).status_code == 401
    assert requests.get(f"{url}/orgs/acme/teams/reviewers/memberships/bob", headers=auth,
                        timeout=10).json()["state"] == "active"


def test_the_apps_client_id_alone_turns_no_sign_in_on():
    # `the-loop app create` writes the App's client id and secret into .env.
    settings = Settings.from_env({"THE_LOOP_WEBHOOK_SECRET": "s",
                                  "THE_LOOP_GITHUB_CLIENT_ID": CLIENT_ID,
                                  "THE_LOOP_GITHUB_CLIENT_SECRET": "x"}, process="receiver")
    assert settings.dashboard.oauth is False


@pytest.mark.parametrize(("env", "named"), [
    ({"THE_LOOP_GITHUB_CLIENT_ID": CLIENT_ID}, "THE_LOOP_GITHUB_CLIENT_SECRET is not"),
    ({"THE_LOOP_UI_GITHUB_MEMBERS": "acme", "THE_LOOP_PUBLIC_URL": PUBLIC},
     "needs THE_LOOP_GITHUB_CLIENT_ID and THE_LOOP_GITHUB_CLIENT_SECRET"),
    ({"THE_LOOP_GITHUB_CLIENT_ID": CLIENT_ID, "THE_LOOP_GITHUB_CLIENT_SECRET": "x",
      "THE_LOOP_UI_GITHUB_MEMBERS": "acme"}, "needs THE_LOOP_PUBLIC_URL"),
    ({"THE_LOOP_UI_GITHUB_MEMBERS": "acme/re views"}, "THE_LOOP_UI_GITHUB_MEMBERS lists ORG"),
    ({"THE_LOOP_PUBLIC_URL": "loop.example.com"}, "THE_LOOP_PUBLIC_URL must be"),
    ({"THE_LOOP_API_TOKENS": "short"}, "entry 1 is shorter than 24"),
    ({"THE_LOOP_API_TOKENS": "sha256:abc"}, "entry 1 starts with sha256:"),
    ({"THE_LOOP_UI_SESSION_SECRET": "short"}, "THE_LOOP_UI_SESSION_SECRET must be at least"),
])
def test_settings_refuse_a_half_configured_sign_in_naming_the_variable(env, named):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"THE_LOOP_WEBHOOK_SECRET": "s", **env}, process="receiver")
    assert named in str(caught.value)
    assert "short" not in str(caught.value).replace("shorter", "")
    assert "re views" not in str(caught.value)
