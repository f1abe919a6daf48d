"""The dashboard in a real browser: Debian's headless Chromium, driven through its
ChromeDriver (Selenium), against ``the-loop serve`` (gunicorn) as a real process over a
seeded deployment in the real Redis, and the loopback fake GitHub for "Sign in with
GitHub".

It signs in, loads the board and a work item at a gate, checks that Mermaid drew the
graph as an SVG with the current node marked and that the timeline lists every event,
that a state change reaches the open page without a reload, that pages fit a phone's
width, and that axe-core (npm, ``tools/axe``) finds no serious or critical violation.
Screenshots go to ``test-output/browser/`` (``THE_LOOP_TEST_OUTPUT`` moves it); with
``THE_LOOP_UPDATE_DOCS_SCREENSHOTS=1`` the board and the work item at its gate are also
written to ``docs/images/`` for the README.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from foundation.links import work_item_path
from tests.conftest import REPO_ROOT, TEST_REDIS_URL, RedisNamespace, _cleanup
from tests.e2e.test_end_to_end import free_port, wait_until
from tests.support.processes import start, stop
from tests.web.conftest import TOKEN, environment
from tests.web.seed import AT_GATE, FORCED, PARKED, Seeded, seed
from the_loop.sandbox.fakegithub.http import HttpFakeGitHub, serve

# One worker runs the module (pytest-xdist, --dist loadgroup): its receiver and Chromium are
# set up once, not once per worker, and one run writes test-output/browser/.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("browser")]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
AXE = Path(sys.prefix) / "axe" / "node_modules" / "axe-core" / "axe.min.js"
OUTPUT = Path(os.environ.get("THE_LOOP_TEST_OUTPUT") or REPO_ROOT / "test-output") / "browser"
DOCS_IMAGES = REPO_ROOT / "docs" / "images"
BIN = Path(sys.executable).parent
CLIENT_ID, CLIENT_SECRET = "Iv1.browser0000000001", "browser-client-secret-0001"
DESKTOP, PHONE = (1280, 900), (390, 844)


class Stack:
    """The running receiver, its seeded state and the fake GitHub."""

    def __init__(self, url: str, seeded: Seeded, fake: HttpFakeGitHub, logs: Path) -> None:
        self.url, self.seeded, self.fake, self.logs = url, seeded, fake, logs


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=5)
    token = f"t{uuid.uuid4().hex}"
    ns = RedisNamespace(client, TEST_REDIS_URL, token, f"the-loop-test-{token}",
                        f"the-loop-test-{token}")
    fake = HttpFakeGitHub()
    fake.add_oauth_app(CLIENT_ID, CLIENT_SECRET)
    fake.add_member("acme", "alice", team="reviewers")
    fake_url, stop_fake = serve(fake)
    tmp = tmp_path_factory.mktemp("dashboard")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")},
           **environment(ns), "THE_LOOP_PUBLIC_URL": url, "THE_LOOP_GITHUB_API_URL": fake_url,
           "THE_LOOP_GITHUB_CLIENT_ID": CLIENT_ID, "THE_LOOP_GITHUB_CLIENT_SECRET": CLIENT_SECRET,
           "THE_LOOP_UI_GITHUB_MEMBERS": "acme/reviewers", "THE_LOOP_WEB_WORKERS": "2",
           "THE_LOOP_LOG_FORMAT": "text"}
    web = None
    try:
        seeded = seed(client, ns.prefix, ns.queue_name)
        web = start([str(BIN / "the-loop"), "serve", "--port", str(port), "--host",
                     "127.0.0.1"], env, tmp / "web.out")

        def ready() -> bool:
            try:
                return requests.get(f"{url}/readyz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout=30, what="the receiver's /readyz")
        yield Stack(url, seeded, fake, tmp)
    finally:
        if web is not None:
            stop(web)
        stop_fake()
        _cleanup(ns)
        client.close()


@pytest.fixture
def browser(tmp_path) -> Iterator[webdriver.Chrome]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file():
            pytest.fail(f"{path} is missing: apt-get install -y chromium chromium-driver "
                        "(make test does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'profile'}",
                 f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shoot(driver: webdriver.Chrome, name: str, *, docs: bool = False) -> Path:
    """A screenshot of the whole page (the window grown to its height) under the test
    output; also under docs/images/ when asked to refresh the README's."""
    width = driver.execute_script("return window.innerWidth")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    original = driver.get_window_size()
    driver.set_window_size(original["width"], max(original["height"], min(height + 140, 4000)))
    time.sleep(0.2)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(original["width"], original["height"])
    assert path.stat().st_size > 5000 and width > 0
    if docs and os.environ.get("THE_LOOP_UPDATE_DOCS_SCREENSHOTS"):
        # The README's copy: the top of the page at a laptop's size (no long timeline).
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        driver.set_window_size(DESKTOP[0], min(height + 140, 1500))
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.2)
        driver.save_screenshot(str(DOCS_IMAGES / f"dashboard-{name}.png"))
        driver.set_window_size(original["width"], original["height"])
    return path


def sign_in_with_token(driver: webdriver.Chrome, stack: Stack, path: str = "/ui/") -> None:
    driver.get(f"{stack.url}{path}")
    assert driver.current_url.startswith(f"{stack.url}/ui/login?next=")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    wait_until(lambda: "/ui/login" not in driver.current_url, timeout=10, what="signed in")


def axe(driver: webdriver.Chrome) -> dict:
    """axe-core's results for the page (every rule, WCAG 2.1 A and AA among them)."""
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: run make venv (tools/axe)")
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    driver.set_script_timeout(30)
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(JSON.parse("
        "JSON.stringify({violations: r.violations, passes: r.passes.map(p => p.id)}))),"
        " e => done({error: String(e)}));")


def serious(results: dict) -> list[str]:
    assert "error" not in results, results
    return [f"{v['id']} ({v['impact']}): {v['help']} -- "
            f"{[n['target'] for n in v['nodes']][:3]}"
            for v in results["violations"] if v["impact"] in ("serious", "critical")]


def graph_drawn(driver: webdriver.Chrome) -> None:
    try:
        wait_until(lambda: driver.execute_script(
            "return document.documentElement.getAttribute('data-graph')"), timeout=20,
            what="Mermaid to draw the graph")
    except AssertionError:
        print(driver.get_log("browser") if hasattr(driver, "get_log") else "")
        raise
    assert driver.execute_script(
        "return document.documentElement.getAttribute('data-graph')") == "drawn"


def test_the_board_and_a_work_item_at_its_gate(stack, browser):
    sign_in_with_token(browser, stack)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Board"
    cards = {c.get_attribute("data-ref"): c for c in
             browser.find_elements(By.CSS_SELECTOR, "li.card")}
    assert set(cards) == {AT_GATE, "github:acme/widgets#2", FORCED}
    column = cards[AT_GATE].find_element(By.XPATH, "ancestor::section//h2")
    assert column.text.startswith("design-approval")
    assert cards[AT_GATE].find_element(By.CSS_SELECTOR, ".badge").text == "waiting"
    shoot(browser, "board", docs=True)

    cards[AT_GATE].find_element(By.CSS_SELECTOR, "a.ref").click()
    wait_until(lambda: browser.current_url == f"{stack.url}{work_item_path(AT_GATE)}",
               what="the work item's page")
    graph_drawn(browser)
    svg = browser.find_element(By.CSS_SELECTOR, "figure.graph svg")
    current = svg.find_elements(By.CSS_SELECTOR, "g.node.current")
    assert len(current) == 1
    assert "n_design_approval" in current[0].get_attribute("id")
    assert current[0].get_attribute("data-current") == "true"
    assert "design-approval" in current[0].text
    visited = {re.search(r"flowchart-(n_[a-z_]+)-", g.get_attribute("id")).group(1)
               for g in svg.find_elements(By.CSS_SELECTOR, "g.node.visited")}
    assert visited == {"n_requirements", "n_requirements_approval", "n_design"}
    events = stack.seeded.store.events(AT_GATE)
    listed = browser.find_elements(By.CSS_SELECTOR, "ol.timeline li.event")
    assert [int(li.get_attribute("data-seq")) for li in listed] == [
        e.seq for e in reversed(events)]
    assert listed[-1].find_element(By.CSS_SELECTOR, "code.type").text == "delivery.received"
    link = browser.find_element(By.PARTIAL_LINK_TEXT, "the comment on GitHub")
    assert link.get_attribute("href").endswith("/acme/widgets/issues/1#issuecomment-90001")
    hooks = browser.find_element(By.ID, "hooks").find_element(By.XPATH, "..").text
    assert "classify-feedback" in hooks and "waiting for a decision from role approver" in hooks
    shoot(browser, "work-item-gate", docs=True)


def test_pages_fit_a_phone(stack, browser):
    browser.set_window_size(*PHONE)
    sign_in_with_token(browser, stack)
    for name, path in (("board-phone", "/ui/"), ("work-item-phone", work_item_path(FORCED)),
                       ("deliveries-phone", "/ui/deliveries/failed")):
        browser.get(f"{stack.url}{path}")
        if "work-items" in path:
            graph_drawn(browser)
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than a phone"
        shoot(browser, name)


def test_the_failed_deliveries_page_gives_the_command_to_copy(stack, browser):
    sign_in_with_token(browser, stack, "/ui/deliveries/failed")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-delivery="{PARKED}"]')
    assert row.find_element(By.CSS_SELECTOR, "code.cmd").text == \
        f"the-loop deliveries retry {PARKED}"
    shoot(browser, "deliveries")


def test_no_serious_or_critical_accessibility_violation(stack, browser):
    sign_in_with_token(browser, stack)
    found = {}
    for path in ("/ui/", work_item_path(AT_GATE), work_item_path(FORCED),
                 "/ui/deliveries/failed"):
        browser.get(f"{stack.url}{path}")
        if "work-items" in path:
            graph_drawn(browser)
        results = axe(browser)
        assert "color-contrast" in results["passes"], path  # the contrast rule ran
        found[path] = serious(results)
    browser.delete_all_cookies()
    browser.get(f"{stack.url}/ui/login")
    found["/ui/login"] = serious(axe(browser))
    (OUTPUT / "axe.json").parent.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "axe.json").write_text(json.dumps(found, indent=2))
    assert found == {path: [] for path in found}


def test_sign_in_with_github_in_the_browser(stack, browser):
    stack.fake.sign_in_as("alice")
    browser.get(f"{stack.url}/ui/deliveries/failed")
    try:
        browser.find_element(By.LINK_TEXT, "Sign in with GitHub").click()
    except WebDriverException:
        print((stack.logs / "web.out").read_text()[-3000:])
        raise
    wait_until(lambda: browser.current_url == f"{stack.url}/ui/deliveries/failed", timeout=15,
               what="back on the dashboard, signed in")
    assert browser.find_element(By.CSS_SELECTOR, "form.who span").text == "alice"
    cookie = browser.get_cookie("the_loop_session")
    assert cookie["secure"] is True and cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Lax"
    assert browser.execute_script("return document.cookie").find("the_loop_session") == -1


def settled(read):
    """``read()``, or ``None`` while the page's refresh is replacing the element it reads
    (the poll swaps the main part in place: an element found a moment ago goes stale)."""
    def attempt():
        try:
            return read()
        except StaleElementReferenceException:
            return None
    return attempt


def test_a_page_follows_the_state_without_a_reload(stack, browser):
    # Last in the module: it moves #1 on from its gate, which the tests above look at.
    sign_in_with_token(browser, stack, work_item_path(AT_GATE))
    graph_drawn(browser)
    browser.execute_script("window.__same_page = 'yes';")
    stack.seeded.approve_design()
    wait_until(settled(lambda: "At node tasks" in browser.find_element(
        By.CSS_SELECTOR, "p.sub").text), timeout=20,
        what="the page to show the work item's new node")
    assert browser.execute_script("return window.__same_page") == "yes"  # no reload
    refreshes = wait_until(settled(lambda: browser.find_element(By.ID, "content")
                                   .get_attribute("data-refreshes")), timeout=20,
                           what="the refresh count")
    assert int(refreshes) >= 1
    current = wait_until(settled(lambda: [n.get_attribute("id") for n in
                                          browser.find_elements(By.CSS_SELECTOR,
                                                                "svg g.node.current")]),
                         timeout=20, what="the graph drawn again")
    assert any("n_tasks" in node_id for node_id in current)
    assert "Updated" in wait_until(settled(lambda: browser.find_element(By.ID, "updated")
                                           .text), timeout=20, what="the updated line")
    shoot(browser, "work-item-refreshed")
