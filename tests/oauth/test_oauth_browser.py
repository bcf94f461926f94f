"""The consent page in a real browser: Debian's chromium, driven by Selenium through Debian's
chromium-driver. ``.ci/run`` installs both (as root on Debian) and runs with ``CI`` set: there their
absence is a failure; anywhere else this skips, saying why.
The page renders, a wrong key shows the error and no code, the right key sends the browser back
to the client with a code that exchanges for tokens; a client known by its document is shown with
its host, and each error page says what happened in plain words. A screenshot of every state is
kept in tests/output/consent-pages/ (look at them after a change to the pages)."""

import os
import shutil
from pathlib import Path

import pytest

from colabhive_mcp.sandbox import DEMO_KEY

from ..support.http_server import HttpServer
from ..support.oauth_flow import Flow, Pages, SignedClient, pkce, query

SCREENSHOTS = Path(__file__).resolve().parents[1] / "output" / "consent-pages"

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MISSING = "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
CI_SAYS_IT_MUST = bool(os.environ.get("CI"))  # (CI runs .ci/run with CI=true, after installing them)
pytestmark = [pytest.mark.real_clients, pytest.mark.skipif(
    not (CHROMIUM and DRIVER or CI_SAYS_IT_MUST), reason=MISSING + "; .ci/run does, as root on Debian")]


@pytest.fixture(scope="module")
def callback():
    """The client's redirect URI: a loopback page that says it got the answer."""
    pages = Pages()
    yield pages.put("/callback", b"<!doctype html><title>Connected</title><p>The application got its answer.</p>",
                    "text/html")
    pages.close()


@pytest.fixture
def browser(tmp_path):
    assert CHROMIUM and DRIVER, MISSING + ", though CI must run this test: see what .ci/run said installing them"
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra has it)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=900,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def screenshot(browser):
    """Saves what the browser shows as ``SCREENSHOTS/<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return lambda name: browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def test_the_consent_page_in_chromium(gateway_sandbox, callback, browser, screenshot):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    def after_submit(condition):  # the click returns before the next page has loaded on a busy machine
        return WebDriverWait(browser, 30).until(condition)

    server = HttpServer(gateway_sandbox.url, public=True)
    try:
        flow = Flow(server.root, server.url, redirect_uri=callback)
        flow.register(client_name="Browser Test App")
        verifier, challenge = pkce()
        browser.get(flow.authorize(challenge).url)
        assert browser.title == "Connect to ColabHive"
        assert "Connect Browser Test App to ColabHive" in browser.find_element(By.TAG_NAME, "h1").text
        assert "a name the application gave itself" in browser.page_source
        screenshot("1-consent-registered-client")

        browser.find_element(By.ID, "key").send_keys("hive_this_key_is_wrong")
        browser.find_element(By.CSS_SELECTOR, "button[value=allow]").click()
        error = after_submit(shown.presence_of_element_located((By.CLASS_NAME, "error")))
        assert "ColabHive did not accept this key" in error.text
        assert browser.current_url.startswith(server.root + "/authorize")
        screenshot("2-wrong-key")

        browser.find_element(By.ID, "key").send_keys(DEMO_KEY)
        browser.find_element(By.CSS_SELECTOR, "button[value=allow]").click()
        after_submit(shown.url_contains(callback + "?"))
        assert browser.current_url.startswith(callback + "?")
        answer = query(browser.current_url)
        assert answer["state"] == "st4te" and answer["iss"] == server.root
        screenshot("3-back-at-the-client")
        exchanged = flow.exchange(answer["code"], verifier)
        assert exchanged.status_code == 200 and exchanged.json()["access_token"]
    finally:
        server.stop()


def test_a_documented_client_and_the_error_pages_in_chromium(gateway_sandbox, browser, screenshot):
    from selenium.webdriver.common.by import By

    pages = Pages()
    server = HttpServer(gateway_sandbox.url, public=True, env={"COLABHIVE_OAUTH_LOOPBACK_CLIENTS": "true"})
    try:
        client = SignedClient(pages, server.root + "/token")
        flow = Flow(server.root, server.url)
        flow.client_id = client.client_id
        browser.get(flow.authorize(pkce()[1]).url)
        assert "127.0.0.1, verified by its address" in browser.find_element(By.CLASS_NAME, "who").text
        screenshot("4-consent-documented-client")
        for name, client_id, redirect_uri, sentence in (
                ("5-error-unknown-client", "hmcp_client_" + "A" * 60, None, "does not know this application"),
                ("6-error-unregistered-redirect", client.client_id, "https://elsewhere.example/cb",
                 "did not register"),
                ("7-error-document-unreachable", pages.url("/missing/client.json"), None, "could not read")):
            flow.client_id = client_id
            browser.get(flow.authorize(pkce()[1], redirect_uri=redirect_uri).url)
            assert browser.title == "Cannot connect" and sentence in browser.find_element(By.CLASS_NAME, "error").text
            assert browser.find_element(By.TAG_NAME, "code").text in ("invalid_client", "invalid_request")
            screenshot(name)
    finally:
        server.stop()
        pages.close()
