"""The curator's page (``GET /`` of ``raydp serve``) in a real headless Chromium, driven by Selenium.

One real server for the module (``--backend local``), two analysts with releases on two data sets, and one
browser (Debian's ``chromium`` and ``chromium-driver``; Selenium is given both paths and never fetches a driver
or a browser). The page is loaded with the curator's token, each analyst's and a wrong one; what each may see
is checked by the elements' data attributes and text, what each may not see by the whole page's source. A
screenshot per kind of token goes to ``$RAYDP_SCREENSHOTS`` (default ``out/screenshots/`` in the repository).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import serve_util as su
from paths import REPO

from raydp.client import Client

pytestmark = [pytest.mark.subprocess]

HOSTILE = '<img id="pwn" src="https://example.com/x.png">'  # an analyst's request id, shown as text to the curator
INSTALL = ("the curator's page is tested in Debian's headless Chromium: install the packages chromium and "
           "chromium-driver (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def srv():
    root = su.state_root("raydp-page-")
    data = root / "data"
    data.mkdir()
    rng = np.random.default_rng(3)
    np.save(data / "incomes.npy", rng.exponential(1.0, 300))
    np.save(data / "survey.npy", rng.exponential(1.0, 300))
    s = su.start(root / "state", "--backend", "local", "--respond-after", "0")
    try:
        admin = Client(s.url, s.token)
        exp = {"oracle": "exponential", "oracle_args": {"rate": 1.0}}
        admin.add_dataset("incomes", str(data / "incomes.npy"), n=300, epsilon_total=10, **exp)
        admin.add_dataset("survey", str(data / "survey.npy"), n=300, epsilon_total=5, **exp)
        s.tokens = {name: admin.add_analyst(name) for name in ("alice", "bob")}
        admin.set_cap("alice", "incomes", epsilon=2)
        admin.set_cap("alice", "survey", epsilon=1)
        admin.set_cap("bob", "incomes", epsilon=1)
        admin.allow_target("raydp.targets:mean")
        admin.precompute("incomes", "raydp.targets:mean", gamma=0.05, seed=0)  # the same oracle and n: both
        a, b = Client(s.url, s.tokens["alice"]), Client(s.url, s.tokens["bob"])
        s.jobs = {"alice": [a.release("incomes", "raydp.targets:mean", epsilon=0.5, gamma=0.05),
                            a.release("survey", "raydp.targets:mean", epsilon=0.25, gamma=0.05, request_id=HOSTILE),
                            a.release("incomes", "raydp.targets:mean", epsilon=0.3, gamma=0.05)],
                  "bob": [b.release("incomes", "raydp.targets:mean", epsilon=0.2, gamma=0.05,
                                    request_id="bob-request-7")]}
        assert all(j["status"] == "released" for js in s.jobs.values() for j in js)
        yield s
    finally:
        s.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.fail(f"{INSTALL}; missing: {'chromium' if chromium is None else 'chromedriver'}")
    from selenium import webdriver

    profile = tempfile.mkdtemp(prefix="raydp-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,1700",
                 f"--user-data-dir={profile}", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-default-apps"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    offline = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager, were it ever asked, must not go to the network
    service = webdriver.ChromeService(executable_path=driver_path)
    driver, kids = None, set()
    try:
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        if driver is not None:
            kids = su.descendants(service.process.pid) | {service.process.pid}
            driver.quit()
        deadline = time.monotonic() + 10
        while su.alive(kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in su.alive(kids):  # the browser's processes, by their ids: none should be left
            os.kill(pid, 9)
        if offline is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = offline
        shutil.rmtree(profile, ignore_errors=True)
    assert not su.alive(kids), f"the browser left processes {su.alive(kids)}"


def shots() -> Path:
    d = Path(os.environ.get("RAYDP_SCREENSHOTS") or REPO / "out" / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def load(driver, srv, token: str) -> dict:
    """Open the page afresh (nothing kept), give the token in its form, and wait until it has shown or refused."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(srv.url + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(srv.url + "/")
    driver.get_log("browser")  # drop what came before
    field = driver.find_element(By.ID, "token")
    assert field.get_attribute("type") == "password"
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("ready", "refused", "error"))
    state = driver.find_element(By.TAG_NAME, "body").get_attribute("data-state")
    origin = srv.url.rstrip("/")
    resources = driver.execute_script(
        "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))"
        ".map(e => e.name)")
    assert resources and all(r.startswith(origin + "/") for r in resources), resources  # no other host
    assert token not in driver.current_url
    problems = [e["message"] for e in driver.get_log("browser")
                if e["level"] == "SEVERE" and "401" not in e["message"]]
    assert not problems, problems  # no script error, no Content-Security-Policy violation
    shown = driver.execute_script(  # the document as it stands, without the page's own script
        "const c = document.documentElement.cloneNode(true); c.querySelectorAll('script').forEach(s => s.remove());"
        "return c.outerHTML")
    return {"state": state, "source": shown, "text": driver.find_element(By.TAG_NAME, "body").text}


def screenshot(driver, name: str) -> Path:
    path = shots() / f"{name}.png"
    path.unlink(missing_ok=True)
    assert driver.save_screenshot(str(path))
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    width, height = struct.unpack(">II", raw[16:24])
    assert width >= 800 and height >= 600 and len(raw) > 10_000, (width, height, len(raw))
    return path


def attrs(driver, css: str, *names: str) -> list[tuple]:
    from selenium.webdriver.common.by import By

    return [tuple(e.get_attribute(n) for n in names) for e in driver.find_elements(By.CSS_SELECTOR, css)]


def numbers(driver, css: str, *names: str) -> dict:
    """{key attributes: the last attribute as a number} of the elements ``css`` selects."""
    rows = attrs(driver, css, *names)
    out = {(r[0] if len(r) == 2 else r[:-1]): float(r[-1]) for r in rows}
    assert len(out) == len(rows), rows
    return out


# ---------------------------------------------------------------------------------------------- the HTTP side


def test_the_page_is_public_self_contained_and_sent_with_a_strict_policy(srv):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        html = resp.read().decode()
        headers = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    assert resp.status == 200 and headers["content-type"].startswith("text/html")
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "form-action 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp and "http" not in csp
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]{44}'", csp) and re.search(r"style-src 'sha256-", csp)
    assert headers["x-content-type-options"] == "nosniff" and headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    # nothing in it names another host (the SVG namespace is a name, never fetched), and it holds no data
    urls = set(re.findall(r"https?://[^\s\"'<>]+", html))
    assert urls == {"http://www.w3.org/2000/svg"}, urls
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", html)
    for private in ("incomes", "survey", "alice", "bob", srv.token):
        assert private not in html
    assert "/" not in srv.call("GET", "/v1/openapi.json", token="")[1]["paths"]
    # it reads: one form (the token's, never sent anywhere: form-action 'none'), every call a plain GET
    assert html.count("<form") == 1 and "method" not in html and "POST" not in html


def test_the_new_routes_keep_roles_apart_and_are_never_cached(srv):
    alice, bob = srv.tokens["alice"], srv.tokens["bob"]
    schema = srv.call("GET", "/v1/openapi.json", token="")[1]["paths"]
    admin = [(m.upper(), p) for p, ms in schema.items() if p.startswith("/v1/admin/") for m in ms]
    assert {("GET", "/v1/admin/releases"), ("GET", "/v1/admin/budget/history")} <= set(admin)
    for method, path in admin:  # every curator route, those the page reads among them: an analyst gets 403
        for token in (alice, bob):
            status, body, headers = srv.call(method, path, body={}, token=token)
            assert status == 403, (method, path, status, body)
        assert srv.call(method, path, body={}, token="")[0] == 401
    for path in ("/v1/releases", "/v1/budget/history"):
        assert srv.call("GET", path)[0] == 403  # the curator's token: the analysts' routes
        assert srv.call("GET", path, token="x" * 43)[0] == 401
    status, mine, headers = srv.call("GET", "/v1/releases", token=bob)
    assert status == 200 and headers["cache-control"] == "no-store" and headers["x-content-type-options"] == "nosniff"
    assert [r["job"] for r in mine["releases"]] == [srv.jobs["bob"][0]["job"]]
    assert {r["analyst"] for r in mine["releases"]} == {"bob"}
    history = srv.call("GET", "/v1/budget/history", token=alice)[1]["analysts"]
    assert [s["analyst"] for s in history] == ["alice"]
    assert [p["spent_epsilon"] for p in history[0]["points"]] == [0.5, 0.75, 1.05]
    every = srv.call("GET", "/v1/admin/budget/history")[1]["analysts"]
    assert {s["analyst"]: s["points"][-1]["spent_epsilon"] for s in every} == {"alice": 1.05, "bob": 0.2}
    assert len(srv.call("GET", "/v1/admin/releases?limit=2")[1]["releases"]) == 2
    assert srv.call("GET", "/v1/whoami", token="nope")[2].get("cache-control") == "no-store"


# ---------------------------------------------------------------------------------------------- in the browser


def test_the_curator_sees_every_budget_the_chart_releases_and_the_chain(srv, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = load(browser, srv, srv.token)
    assert page["state"] == "ready", page["text"]
    assert attrs(browser, "#who", "data-role", "data-name") == [("admin", "curator")]
    assert browser.execute_script("return sessionStorage.getItem('raydp.token')") == srv.token
    overview = Client(srv.url, srv.token).overview()
    want = {d["name"]: d["dataset"]["spent"]["epsilon"] for d in overview["datasets"]}
    assert numbers(browser, "#datasets tr[data-dataset]", "data-dataset", "data-epsilon-spent") == want
    assert want == {"incomes": 1.0, "survey": 0.25}
    assert numbers(browser, "#caps tr[data-analyst]", "data-analyst", "data-dataset", "data-epsilon-left") == {
        ("alice", "incomes"): 1.2, ("alice", "survey"): 0.75, ("bob", "incomes"): 0.8}
    # the chart: one SVG path per analyst, a step per reservation
    assert sorted(attrs(browser, "svg#spend-chart path[data-analyst]", "data-analyst", "data-points")) == [
        ("alice", "3"), ("bob", "1")]
    # the releases: every analyst's, each with its statement; an analyst's request id is text, not markup
    items = browser.find_elements(By.CSS_SELECTOR, "#releases li[data-job]")
    jobs = {j["job"]: (who, j["result"]["statement"]) for who, js in srv.jobs.items() for j in js}
    assert {i.get_attribute("data-job") for i in items} == set(jobs)
    for i in items:
        who, statement = jobs[i.get_attribute("data-job")]
        assert i.get_attribute("data-analyst") == who
        assert i.find_element(By.CSS_SELECTOR, ".statement").text == statement
    assert HOSTILE in page["text"] and not browser.find_elements(By.ID, "pwn")
    verify = Client(srv.url, srv.token).verify()
    assert verify["ok"]
    assert attrs(browser, "#chain", "data-ok", "data-rows", "data-head") == [("true", str(verify["rows"]), verify["head"])]
    assert f"{verify['rows']}:{verify['head']}" in page["text"] and "verified" in page["text"]
    screenshot(browser, "curator")
    # the token is kept in the tab: a reload shows the same without asking again
    browser.refresh()
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready")
    assert attrs(browser, "#who", "data-role") == [("admin",)] and not browser.find_element(By.ID, "login").is_displayed()


@pytest.mark.parametrize("me,other", [("alice", "bob"), ("bob", "alice")])
def test_an_analyst_sees_her_own_and_nothing_of_the_other(srv, browser, me, other):
    from selenium.webdriver.common.by import By

    page = load(browser, srv, srv.tokens[me])
    assert page["state"] == "ready", page["text"]
    assert attrs(browser, "#who", "data-role", "data-name") == [("analyst", me)]
    mine = {d["name"]: d["analyst"]["spent"]["epsilon"] for d in Client(srv.url, srv.tokens[me]).datasets()}
    assert numbers(browser, "#datasets tr[data-dataset]", "data-dataset", "data-epsilon-spent") == mine
    assert mine == ({"incomes": 0.8, "survey": 0.25} if me == "alice" else {"incomes": 0.2})
    paths = browser.find_elements(By.CSS_SELECTOR, "svg#spend-chart path")
    assert [p.get_attribute("data-analyst") for p in paths] == [me]
    items = browser.find_elements(By.CSS_SELECTOR, "#releases li[data-job]")
    assert {i.get_attribute("data-job") for i in items} == {j["job"] for j in srv.jobs[me]}
    assert sorted(i.find_element(By.CSS_SELECTOR, ".statement").text for i in items) == \
        sorted(j["result"]["statement"] for j in srv.jobs[me])
    verify = Client(srv.url, srv.token).verify()
    source = page["source"]
    for leak in (other, *(j["job"] for j in srv.jobs[other]), *(j.get("request_id") or "" for j in srv.jobs[other]),
                 verify["head"], "Audit chain", "spent over time, per analyst"):
        assert leak and leak not in source, leak
    for j in srv.jobs[other]:  # the other's releases, by their values
        assert json.dumps(j["result"]["value"]) not in source
    assert not browser.find_elements(By.CSS_SELECTOR, "#chain, #caps")
    assert {e[0] for e in attrs(browser, "[data-analyst]", "data-analyst")} == {me}
    screenshot(browser, f"analyst-{me}")


def test_a_wrong_token_gets_the_refusal_and_nothing_else(srv, browser):
    from selenium.webdriver.common.by import By

    page = load(browser, srv, srv.tokens["alice"][:-2] + "xx")
    assert page["state"] == "refused"
    assert browser.find_element(By.ID, "refused").is_displayed()
    assert "Token not accepted" in page["text"]
    assert not browser.find_element(By.ID, "view").is_displayed()
    assert browser.find_element(By.ID, "view").get_attribute("innerHTML") == ""
    assert browser.find_element(By.ID, "who").text == ""
    for name in ("incomes", "survey", "alice", "bob"):
        assert name not in page["source"]
    assert not browser.find_elements(By.CSS_SELECTOR, "#spend-chart, #datasets, #releases, #chain, [data-dataset]")
    assert browser.execute_script("return sessionStorage.getItem('raydp.token')") is None
    screenshot(browser, "refused")
